"""A private PostgreSQL cluster a test may break: restart, crash, kill -9 its postmaster, starve it.

The shared server (``DAYFLOW_TEST_PG_URL``) must never be restarted or reconfigured, so a test that
needs a server fault starts its own (see /work/shared/notes/private-postgres.md): ``initdb`` and
``pg_ctl`` run as the ``postgres`` user (they refuse root) on a data directory under the test's
temporary directory owned by that user, on a free port, listening on 127.0.0.1 only with its socket
in the data directory. It is always stopped (``pg_ctl stop -m immediate``) when the test ends (the ``private_pg`` fixture,
tests/conftest.py).

fsync stays on: a crash test must meet the server's real recovery, not a faster one that could lose
committed rows. Only memory is kept small (shared_buffers) so several clusters fit the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

# Debian keeps the server binaries off PATH; the machine may have them on PATH too.
_EXTRA_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def _find(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for directory in _EXTRA_BIN_DIRS:
        if (directory / name).exists():
            return str(directory / name)
    return None


def missing_reason() -> str | None:
    """Why a private cluster cannot be started here, or None."""
    for name in ("initdb", "pg_ctl", "postgres"):
        if _find(name) is None:
            return f"no private PostgreSQL cluster: {name} is not on PATH nor under /usr/lib/postgresql/*/bin"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "no private PostgreSQL cluster: running as root without runuser to become postgres"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "no private PostgreSQL cluster: no postgres user to run initdb/pg_ctl as"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivatePostgres:
    """One cluster: ``url`` to its ``postgres`` database; fault helpers that return once the fault is done
    (and, for those that bring the server back, once it accepts connections again)."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / "pgdata"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    # -- plumbing ---------------------------------------------------------

    def _run(self, name: str, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run([*self._as_postgres, _find(name) or name, *args], capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}\n"
                               f"log:\n{self.log_tail()}")
        return done

    def log_tail(self, lines: int = 30) -> str:
        log = self.data / "log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    def _options(self) -> str:
        return f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"

    # -- life -------------------------------------------------------------

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # the postgres user must reach its data directory under the test's tmp dir
        for parent in self.root.parents:
            if str(parent).startswith(("/tmp/", "/var/tmp/")) and parent.stat().st_uid == os.geteuid():
                parent.chmod(parent.stat().st_mode | 0o011)  # traverse only, nothing listed
        self.data.mkdir()
        if self._as_postgres:
            shutil.chown(self.data, "postgres", "postgres")
        self.data.chmod(0o700)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            # Small and quick to start; fsync on (see the module's docstring). --no-sync above only skips
            # initdb's own final flush of the fresh cluster, which no test crashes.
            conf.write("shared_buffers = 16MB\nmax_wal_size = 64MB\nlog_min_messages = warning\n"
                       "log_connections = off\nlog_disconnections = off\n")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-o", self._options(), "-l", str(self.data / "log"),
                  "-w", "-t", "60", "start")

    def stop(self, mode: str = "immediate") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().splitlines()[0])

    # -- faults -----------------------------------------------------------

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every session ended, the server back once it takes connections."""
        self._run("pg_ctl", "-D", str(self.data), "-o", self._options(), "-l", str(self.data / "log"),
                  "-m", "fast", "-w", "-t", "60", "restart")

    def crash(self) -> None:
        """``pg_ctl stop -m immediate`` (no checkpoint: crash recovery at the next start), then start."""
        self.stop("immediate")
        self.start()

    def kill_postmaster(self) -> None:
        """kill -9 of the postmaster; its backends notice and quit; then start (crash recovery).

        The new postmaster refuses to start while an orphaned backend still holds the old shared memory,
        so the start is tried again until they are gone."""
        os.kill(self.postmaster_pid(), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            time.sleep(0.2)
            try:
                self.start()
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise

    def set_max_connections(self, count: int, superuser_reserved: int = 2) -> None:
        """``ALTER SYSTEM SET max_connections`` plus a restart (the setting takes effect only then).

        ``superuser_reserved_connections`` (default 3) must stay below it; of ``count`` slots, the
        reserved ones are for superusers only (the test's own connections), the rest for everyone."""
        self.sql(f"ALTER SYSTEM SET superuser_reserved_connections = {superuser_reserved}",
                 f"ALTER SYSTEM SET max_connections = {count}")
        self.restart()

    def sql(self, *statements: str) -> list:
        import psycopg

        with psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                             application_name="dayflow-test-admin") as conn:
            rows = []
            for statement in statements:
                cur = conn.execute(statement)
                rows = cur.fetchall() if cur.description else []
            return rows

    def backends(self, application_name_like: str = "dayflow%") -> int:
        """Client backends on the server whose application_name matches (the test's own are not counted)."""
        return self.sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                        f"AND application_name LIKE '{application_name_like}' "
                        "AND application_name NOT LIKE 'dayflow-test%'")[0][0]
