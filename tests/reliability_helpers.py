"""Small helpers shared by the reliability tests (crash, concurrency, hostile input, security)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
from pathlib import Path

from .conftest import dayflow_cmd


def cli_env(**extra: str) -> dict[str, str]:
    """The test process's environment without keys or Dayflow settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "DAYFLOW_")) and k != "PYTEST_CURRENT_TEST"}
    env["DAYFLOW_OFFLINE_DELAY"] = "0"
    env.update(extra)
    return env


def dayflow(*args: str, db: Path | str | None = None, env: dict[str, str] | None = None,
            timeout: float = 120, **popen) -> subprocess.CompletedProcess:
    """Run the real console script to its end; ``db`` adds ``--db``."""
    full = list(args) + (["--db", str(db)] if db is not None else [])
    return subprocess.run(dayflow_cmd(*full), capture_output=True, env=env or cli_env(), timeout=timeout,
                          stdin=subprocess.DEVNULL, **popen)


def text(stream: bytes) -> str:
    return stream.decode("utf-8", errors="replace")


def assert_one_error_line(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """A failure the way the guide wants it: non-zero, one line on stderr, no traceback."""
    err = text(result.stderr)
    assert result.returncode != 0, (result.returncode, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def fingerprint(db: Path) -> dict[str, str | None]:
    """Bytes of the database and its companions: what 'nothing changed' is checked against."""
    prints: dict[str, str | None] = {}
    for suffix in ("", "-wal", "-shm", "-journal"):
        path = Path(f"{db}{suffix}")
        prints[suffix or "db"] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    return prints


def checkpointed(db: Path) -> None:
    """Fold the WAL into the main file (still in WAL mode), so the file alone holds everything."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def dead_pid() -> int:
    """The pid of a process that has just ended (not reused this quickly in practice)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def call_count(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0
