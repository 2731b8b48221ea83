"""The API key never lands anywhere; the database and its companions are owner-only."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from pathlib import Path

from ..conftest import dayflow_cmd
from ..loopback_api import FAKE_KEY, LoopbackAPI, error_reply
from ..reliability_helpers import cli_env, dayflow, text

MODEL = "claude-loopback-1"


def files_holding(folder: Path, secret: bytes) -> list[str]:
    return sorted(str(p) for p in folder.rglob("*") if p.is_file() and secret in p.read_bytes())


def wait_for_lines(path: Path, count: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and len(path.read_text().split()) >= count):
        assert proc.poll() is None, "the process ended before the moment the test waits for"
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_api_key_is_never_written_to_the_database_logs_or_output(tmp_path):
    db, trace = tmp_path / "dayflow.db", tmp_path / "trace.log"
    secret = FAKE_KEY.encode()
    outputs: list[bytes] = []
    # The server echoes the key back in an error, as a careless proxy might.
    with LoopbackAPI(delay=0.3) as api:
        api.planned[2] = error_reply(401, f"invalid x-api-key {FAKE_KEY} for this organisation")
        env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0", DAYFLOW_TEST_TRACE=str(trace))
        failed = dayflow("brief", "-v", "--model", MODEL, db=db, env=env)
        outputs += [failed.stdout, failed.stderr]
        assert failed.returncode == 5, text(failed.stderr)
        assert "invalid x-api-key [redacted] for this organisation" in text(failed.stderr)
        resumed = dayflow("resume", db=db, env=env)
        outputs += [resumed.stdout, resumed.stderr]
        assert resumed.returncode == 0, text(resumed.stderr)
        for args in (("runs",), ("runs", "--json"), ("tasks", "--json"), ("show", "--raw", failed_run(db))):
            shown = dayflow(*args, db=db, env=env)
            assert shown.returncode == 0, (args, text(shown.stderr))
            outputs += [shown.stdout, shown.stderr]
        # A process killed mid-run leaves its -wal and -shm behind: they are searched too.
        killed = subprocess.Popen(dayflow_cmd("brief", "-v", "--model", MODEL, "--db", str(db)), env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        wait_for_lines(trace, len(trace.read_text().split()) + 3, killed)
        killed.send_signal(signal.SIGKILL)
        out, err = killed.communicate(timeout=60)
        outputs += [out, err]
    assert Path(f"{db}-wal").exists()
    assert all(secret in h.get("authorization", "").encode() + h.get("x-api-key", "").encode()
               for h in api.headers)  # the key did reach the server, so its absence below means something
    assert files_holding(tmp_path, secret) == []
    assert not [o for o in outputs if secret in o]


def failed_run(db: Path) -> str:
    listed = dayflow("runs", db=db)
    return text(listed.stdout).split()[0]


def test_database_wal_and_shm_are_owner_only_even_with_an_open_umask(tmp_path):
    data_home, trace = tmp_path / "xdg", tmp_path / "trace.log"
    env = cli_env(XDG_DATA_HOME=str(data_home), DAYFLOW_OFFLINE_DELAY="0.5", DAYFLOW_TEST_TRACE=str(trace))
    proc = subprocess.Popen(dayflow_cmd("brief"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, preexec_fn=lambda: os.umask(0))
    try:
        wait_for_lines(trace, 3, proc)  # api, commit, committed: the WAL has been written
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    folder = data_home / "dayflow"
    db = folder / "dayflow.db"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"))}
    assert modes == {"dayflow.db": 0o600, "dayflow.db-wal": 0o600, "dayflow.db-shm": 0o600}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
