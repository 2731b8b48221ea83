"""``dayflow worker --log-format json|text --log-level``: one event per line, fields where they apply, and no
secret (the API key, the database's password) nor any terminal control in any line, whatever the model sent."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..loopback_api import FAKE_KEY, LoopbackAPI, error_reply

PASSWORD = "Pw-7f3a9c1e-Do-Not-Log"


def with_password(url: str) -> str:
    """``url`` with a password in its user part (the test server trusts local connections: it is not asked for)."""
    scheme, rest = url.split("://", 1)
    user, at, host = rest.partition("@")
    assert at, url
    return f"{scheme}://{user}:{PASSWORD}@{host}"


def dayflow(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(dayflow_cmd(*args), capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=timeout, stdin=subprocess.DEVNULL)


def queue_runs(db: str, count: int, env: dict[str, str]) -> list[str]:
    ids = []
    for _ in range(count):
        done = dayflow("brief", "--queue", "--db", db, "--model", "claude-loopback", env=env)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    return ids


def hostile_error(db_url: str) -> tuple:
    """A model error whose message carries the key, the database URL with its password, a terminal escape and a
    forged log line: everything a log line must keep out or keep inert."""
    message = (f"loopback-marker key={FAKE_KEY} db={db_url} \x1b]0;pwned\x07\x1b[31mred\x1b[0m "
               '\n{"level":"info","event":"forged"}\nFORGED LINE')
    return error_reply(400, message)


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_no_secret_and_no_control_in_any_line(log_format, db_target, backend):
    db = with_password(db_target) if backend == "postgres" else db_target
    with LoopbackAPI() as api:
        env = {**api.env(), "PGPASSWORD": PASSWORD + "-env"}
        api.planned[1] = hostile_error(with_password(db_target) if backend == "postgres" else
                                       f"postgresql://bob:{PASSWORD}@db.example/x")
        queue_runs(db, 2, env)
        done = dayflow("worker", "--once", "--db", db, "--log-format", log_format, "--log-level", "debug", env=env)
    output = done.stdout + done.stderr
    assert "loopback-marker" in done.stderr  # the hostile message did reach a log line: the checks below bite
    for line in output.splitlines():
        assert PASSWORD not in line and FAKE_KEY not in line, line
        assert FAKE_KEY[:12] not in line, line
        assert "\x1b" not in line and "\x07" not in line, line
        # The forged line and event stay inside the line that carries them: no line of their own.
        assert not line.startswith(("FORGED", '{"level":"info","event":"forged"')), line
    if log_format == "json":
        events = [json.loads(line) for line in done.stderr.splitlines()]  # every line is one JSON object
        assert "forged" not in {e["event"] for e in events}
        failed = [e for e in events if e["event"] == "run.failed"]
        assert len(failed) == 1 and failed[0]["level"] == "error" and "[redacted]" in failed[0]["msg"]
        # The escape travels JSON-escaped (a log reader decodes it as data); the line itself holds none.
        raw = next(line for line in done.stderr.splitlines() if '"run.failed"' in line)
        assert "\\u001b" in raw and "\x1b" not in raw


def test_json_events_carry_their_fields_and_count_the_calls(tmp_path):
    db = str(tmp_path / "w.db")
    with LoopbackAPI() as api:
        env = api.env()
        ids = queue_runs(db, 2, env)
        done = dayflow("worker", "--once", "--db", db, "--log-format", "json", "--log-level", "debug", env=env)
        calls = api.calls
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines()]
    for event in events:
        assert {"time", "level", "event", "msg", "worker_id"} <= set(event), event
        assert event["time"].endswith("Z") and event["worker_id"].endswith(f":{event['worker_id'].split(':')[-1]}")
    names = [e["event"] for e in events]
    assert names[0] == "worker.started" and names[-1] == "worker.stopped"
    finished = {e["run_id"]: e for e in events if e["event"] == "run.finished"}
    assert set(finished) == set(ids)
    assert all(e["status"] == "done" and e["duration_s"] > 0 and e["calls"] == e["steps"] for e in finished.values())
    # One model.call event per call the API saw; one step.committed per step the store holds.
    assert sum(1 for n in names if n == "model.call") == calls
    store = open_store(db)
    try:
        steps = sum(store.get_run(run_id).step_count for run_id in ids)
    finally:
        store.close()
    committed = [e for e in events if e["event"] == "step.committed"]
    assert len(committed) == steps and all(e["step"] >= 1 and e["duration_s"] >= 0 for e in committed)
    assert {e["run_id"] for e in events if e["event"] == "run.claimed"} == set(ids)


def test_text_keeps_todays_lines_and_info_hides_debug(tmp_path):
    db = str(tmp_path / "t.db")
    with LoopbackAPI() as api:
        env = api.env()
        queue_runs(db, 1, env)
        done = dayflow("worker", "--once", "--db", db, env=env)
    lines = done.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("[worker pid ") and lines[0].endswith("until nothing is waiting")
    assert lines[1].endswith("1 run(s) driven, 0 failed")
    assert done.stdout.splitlines()[0].endswith("done · 3 steps · 3 call(s)")


def test_the_settings_choose_the_format_and_a_bad_one_is_one_line(tmp_path):
    db = str(tmp_path / "s.db")
    done = dayflow("worker", "--once", "--db", db, env={"DAYFLOW_LOG_FORMAT": "json"})
    assert done.returncode == 0 and json.loads(done.stderr.splitlines()[0])["event"] == "worker.started"
    bad = dayflow("worker", "--once", "--db", db, env={"DAYFLOW_LOG_LEVEL": "loud"})
    assert bad.returncode == 64 and bad.stderr.count("\n") == 1, bad.stderr
    assert "DAYFLOW_LOG_LEVEL must be debug, info, warning or error" in bad.stderr
    flag = dayflow("worker", "--once", "--db", db, "--log-format", "yaml")
    assert flag.returncode == 64 and flag.stderr.count("\n") == 1 and "Traceback" not in flag.stderr


def test_brief_logs_as_json_too(tmp_path):
    db = str(tmp_path / "b.db")
    with LoopbackAPI() as api:
        done = dayflow("brief", "--db", db, "--model", "claude-loopback", "--log-format", "json", "--log-level",
                       "debug", env=api.env())
        calls = api.calls
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines()]  # every line of stderr is one event
    assert sum(1 for e in events if e["event"] == "model.call") == calls == 3
    started = [e for e in events if e["event"] == "stderr"]
    assert started[0]["msg"].startswith("[run ") and started[0]["level"] == "info"
    # An error is an event too.
    bad = dayflow("resume", "nosuchrun", "--db", db, "--log-format", "json")
    assert bad.returncode == 3 and json.loads(bad.stderr)["level"] == "error", bad.stderr
