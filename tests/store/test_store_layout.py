"""The store rebuilt around real faults (issue #10): its own handle per store, the spool for a paid
reply the database will not take, one clock across hosts, reading commands that never alter a file,
and the layering rule (the core never imports Textual)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from dayflow_tui import clock
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.store import ReplySpooled, open_store, owner_alive, pending_spool
from dayflow_tui.store.models import Run

from ..conftest import BIN, CountingClient
from ..faults.test_faults import _HookedClient

ROOT = Path(__file__).resolve().parents[2]


def test_two_stores_in_one_process_never_redirect_each_other(tmp_path, db_target):
    first = open_store(tmp_path / "first.db")
    second = open_store(db_target)  # opened after: Peewee's one global proxy would now point here
    run = first.create_run("only in the first", model="offline")
    assert [r.id for r in first.list_runs()] == [run.id]
    assert run.id not in [r.id for r in second.list_runs()]
    result = run_brief(first, client=CountingClient())
    assert first.get_run(result.run_id).status == "done" and len(first.steps(result.run_id)) == 3
    assert result.run_id not in [r.id for r in second.list_runs()]
    first.close()
    second.close()


def test_a_reply_the_database_will_not_take_waits_in_the_spool_and_is_never_bought_again(db_path, monkeypatch,
                                                                                      tmp_path):
    state = tmp_path / "state"
    monkeypatch.setenv("DAYFLOW_STATE_DIR", str(state))
    monkeypatch.setenv("DAYFLOW_COMMIT_RETRY_S", "0.5")  # the commit gives up long before the lock goes
    # A short busy timeout on every connection (a reconnect's too, and the heartbeat's): the lock outlasts it.
    monkeypatch.setenv("DAYFLOW_SQLITE_BUSY_TIMEOUT", "0.1")
    store = open_store(db_path)
    holders: list[subprocess.Popen] = []

    def lock_during_call(n: int) -> None:
        if n == 2:
            holders.append(_hold_sqlite_lock_until_told(db_path))  # held until the reply is spooled

    client = _HookedClient(lock_during_call)
    try:
        with pytest.raises(ReplySpooled) as spooled:
            run_brief(store, client=client)
    finally:
        for proc in holders:
            proc.stdin.close()  # let go of the lock
    assert spooled.value.exit_code == 75 and "\n" not in str(spooled.value)
    [path] = pending_spool(store, store.list_runs()[0].id)
    assert str(path) in str(spooled.value)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert client.calls == 2 and store.list_runs()[0].step_count == 1
    for proc in holders:
        proc.wait(timeout=15)
    run_id = store.list_runs()[0].id
    again = CountingClient()
    result = resume(run_id, store=store, client=again)
    assert result.status == "done" and [s.n for s in store.steps(run_id)] == [1, 2, 3]
    assert client.calls + again.calls == 3  # calls == committed steps: step 2 was stored from the spool
    assert not pending_spool(store, run_id)
    store.close()


def _hold_sqlite_lock_until_told(path) -> subprocess.Popen:
    """Another process holding ``BEGIN EXCLUSIVE`` on ``path`` until its stdin is closed."""
    code = ("import sqlite3, sys\n"
            f"con = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            "con.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n"
            "con.execute('COMMIT')\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_spooled_reply_whose_commit_did_land_is_dropped_not_stored_twice(db_path, monkeypatch, tmp_path):
    from dayflow_tui.store import spool_reply

    monkeypatch.setenv("DAYFLOW_STATE_DIR", str(tmp_path / "state"))
    store = open_store(db_path)
    stopped = run_brief(store, client=CountingClient(), max_steps=1)
    step = store.steps(stopped.run_id)[0]
    from dayflow_tui.store import StepRecord

    record = StepRecord(n=1, stop_reason=step.stop_reason, assistant=json.loads(step.assistant))
    spool_reply(store, stopped.run_id, record, None, "the answer to the commit was lost")
    again = CountingClient()
    result = resume(stopped.run_id, store=store, client=again, max_steps=12)
    assert result.status == "done" and [s.n for s in store.steps(stopped.run_id)] == [1, 2, 3]
    assert again.calls == 2 and not pending_spool(store, stopped.run_id)


@pytest.mark.postgres
def test_heartbeat_ages_are_judged_on_the_database_clock_not_a_skewed_host(pg_url, monkeypatch):
    monkeypatch.delenv("DAYFLOW_FAKE_NOW", raising=False)
    store = open_store(pg_url)
    run = store.create_run("t", model="offline")
    lease = store.claim(run.id)
    with store.bound():
        Run.update(owner_host="another-host").where(Run.id == run.id).execute()  # a driver on another host
    real_now = clock.now
    monkeypatch.setattr(clock, "now", lambda: real_now() + timedelta(hours=2))  # this host's clock is 2 h fast
    assert owner_alive(store.get_run(run.id))  # its heartbeat is seconds old on the server's clock
    assert store.claim_next() is None  # and no worker here takes the run over
    monkeypatch.setattr(clock, "now", lambda: real_now() - timedelta(hours=2))  # or 2 h slow
    stamp = store.get_run(run.id).heartbeat_at
    store.heartbeat(lease)
    assert store.get_run(run.id).heartbeat_at >= stamp  # stamped by the server, not the slow host
    store.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reading_commands_never_upgrade_an_older_file_and_migrate_does(db_path):
    store = open_store(db_path)
    run_brief(store, client=CountingClient())
    store.db.execute_sql('ALTER TABLE "steps" DROP COLUMN "raw"')
    store.db.execute_sql('ALTER TABLE "runs" DROP COLUMN "attempts"')
    store.db.execute_sql('ALTER TABLE "runs" DROP COLUMN "not_before"')
    store.db.execute_sql("PRAGMA user_version = 2")
    store.db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    before = _digest(db_path)
    for command in (["runs"], ["tasks"], ["show", "x" * 12]):
        result = subprocess.run([str(BIN / "dayflow"), *command, "--db", str(db_path)], capture_output=True,
                                text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 2 and "dayflow migrate" in result.stderr, (command, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
    assert _digest(db_path) == before
    upgraded = subprocess.run([str(BIN / "dayflow"), "migrate", "--db", str(db_path)], capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert upgraded.returncode == 0, upgraded.stderr
    listed = subprocess.run([str(BIN / "dayflow"), "runs", "--json", "--db", str(db_path)], capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["status"] == "done"


def test_the_core_never_imports_textual(tmp_path):
    """The import-linter contracts in pyproject.toml: store and agent stay free of any front end."""
    result = subprocess.run([str(BIN / "lint-imports")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert len(contracts) >= 5 and f"Contracts: {len(contracts)} kept, 0 broken" in result.stdout  # every one ran
    # And at run time: starting and driving a run loads no Textual module.
    code = ("import sys; from dayflow_tui.store import open_store; from dayflow_tui.agent.runs import run_brief; "
            "s = open_store(sys.argv[1]); run_brief(s, model='offline'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.db")], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "DAYFLOW_OFFLINE_DELAY": "0"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_module_hands_a_value_on_through_the_environment():
    """One settings object (#12 item 7): flags reach the code through ``settings.apply_flags``, never by
    writing ``os.environ`` for another module to read. (The demo data pins the fake clock while it seeds:
    a fixture, not a setting.)"""
    import re
    from pathlib import Path

    import dayflow_tui

    root = Path(dayflow_tui.__file__).parent
    writes = re.compile(r"os\.environ\[[^\]]+\]\s*=|os\.environ\.(setdefault|update|pop)\(|os\.putenv\(")
    found = [f"{path.relative_to(root)}:{n}" for path in root.rglob("*.py") if path.name != "demo_data.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if writes.search(line)]
    assert found == []


def test_a_delay_flag_reaches_the_offline_model_through_the_settings(monkeypatch):
    from dayflow_tui.config import settings
    from dayflow_tui.agent.offline import OfflineClient

    monkeypatch.setattr(settings, "_flags", {})
    monkeypatch.setattr(settings, "_cached", None)
    monkeypatch.delenv("DAYFLOW_OFFLINE_DELAY", raising=False)
    assert OfflineClient().delay == 0
    settings.apply_flags(offline_delay_s=0.25)
    assert OfflineClient().delay == 0.25 and "DAYFLOW_OFFLINE_DELAY" not in __import__("os").environ
