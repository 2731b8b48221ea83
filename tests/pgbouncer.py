"""A real PgBouncer in transaction pooling, started by a test on a free port in front of the test server.

PgBouncer is the Debian package (``apt-get install -y pgbouncer``); without the binary a test using this
skips and says how to install it. It refuses to run as root, so as root it runs as the ``postgres`` user
(from a directory that user owns). ``ignore_startup_parameters = extra_float_digits,options``: libpq's
startup options (a URL's ``options=-csearch_path``) are not passed on in transaction pooling, which is
why Dayflow has the ``schema`` setting.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

SKIP_REASON = "PgBouncer not installed (apt-get install -y pgbouncer): the transaction-pooling tests need it"


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if os.access(p, os.X_OK)), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgBouncer:
    """``with PgBouncer(server_url) as bouncer``: ``bouncer.url`` reaches the same database through it."""

    def __init__(self, server_url: str, *, pool_size: int = 2):
        self.server = urlsplit(server_url)
        self.pool_size = pool_size
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="dayflow-pgbouncer-")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        user = self.server.username or "postgres"
        return urlunsplit(("postgresql", f"{user}@127.0.0.1:{self.port}", self.server.path, "", ""))

    def __enter__(self) -> "PgBouncer":
        binary = pgbouncer_binary()
        if binary is None:
            pytest.skip(SKIP_REASON)
        dbname = self.server.path.lstrip("/") or "postgres"
        user = self.server.username or "postgres"
        config = os.path.join(self.dir, "pgbouncer.ini")
        with open(os.path.join(self.dir, "users.txt"), "w") as fh:
            fh.write(f'"{user}" ""\n')
        with open(config, "w") as fh:
            fh.write(f"""[databases]
{dbname} = host={self.server.hostname or '127.0.0.1'} port={self.server.port or 5432} dbname={dbname}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir}/users.txt
pool_mode = transaction
default_pool_size = {self.pool_size}
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,options
logfile = {self.dir}/pgbouncer.log
pidfile = {self.dir}/pgbouncer.pid
""")
        argv = [binary, config]
        if os.geteuid() == 0:  # PgBouncer will not run as root
            shutil.chown(self.dir, "postgres")
            for name in os.listdir(self.dir):
                shutil.chown(os.path.join(self.dir, name), "postgres")
            argv = ["runuser", "-u", "postgres", "--", *argv]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    output = self.proc.stdout.read() if self.proc.poll() is not None else ""
                    self.__exit__(None, None, None)
                    raise AssertionError(f"pgbouncer did not start: {output}{self.log()}")
                time.sleep(0.05)

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "pgbouncer.log")) as fh:
                return fh.read()[-4000:]
        except OSError:
            return ""

    def _pid(self) -> int | None:
        try:
            with open(os.path.join(self.dir, "pgbouncer.pid")) as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            return None

    def __exit__(self, *exc) -> None:
        pid = self._pid()  # PgBouncer's own (runuser does not pass a signal on)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGINT)  # PgBouncer's immediate shutdown
            except ProcessLookupError:
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)
