"""Real faults under a driven run: a SQLite lock held by another process, PostgreSQL sessions cut
by the server, a heartbeat that meets a dead connection. The invariant each time: the paid
response is committed, model calls == committed steps (no process died), nothing is retried in a loop.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from dayflow_tui import store as store_module
from dayflow_tui.config.errors import RunBusy, StoreError
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.store.models import Run, Step
from dayflow_tui.redaction import redact_and_cut
from dayflow_tui.store import StepRecord, open_store

from ..conftest import PG_URL, CountingClient
from ..reliability_helpers import dayflow, text


class _HookedClient(CountingClient):
    """The offline model; ``before_reply(call_number)`` runs while the call is 'in flight'."""

    def __init__(self, before_reply):
        super().__init__()
        self.before_reply = before_reply

    def create(self, **request):
        reply = super().create(**request)
        self.before_reply(self.calls)
        return reply


def _hold_sqlite_lock(path, seconds: float) -> subprocess.Popen:
    """Another process holding ``BEGIN EXCLUSIVE`` on ``path``; returns once the lock is held."""
    code = textwrap.dedent(f"""
        import sqlite3, sys, time
        con = sqlite3.connect({str(path)!r}, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        print("locked", flush=True)
        time.sleep({seconds})
        con.execute("COMMIT")
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_lock_held_past_the_busy_timeout_does_not_cost_the_paid_response(db_path):
    store = open_store(db_path)
    # A short busy timeout on this connection, so the lock outlasts it: the store must reconnect and wait.
    store.db.execute_sql("PRAGMA busy_timeout = 100")
    holders: list[subprocess.Popen] = []

    def lock_during_call(n: int) -> None:
        if n == 2:
            holders.append(_hold_sqlite_lock(db_path, 1.5))

    client = _HookedClient(lock_during_call)
    result = run_brief(store, client=client)
    for proc in holders:
        assert proc.wait(timeout=10) == 0
    assert holders, "the lock holder never ran"
    assert result.status == "done"
    assert [s.n for s in store.steps(result.run_id)] == [1, 2, 3]
    assert client.calls == 3  # calls == committed steps: the reply bought during the lock was kept
    store.close()


def _pg_url_with_app(url: str) -> tuple[str, str]:
    app = f"dftest_{uuid.uuid4().hex[:10]}"
    return f"{url}&application_name={app}" if "?" in url else f"{url}?application_name={app}", app


def _cut_sessions(app: str) -> int:
    """End every server session this test opened (by its unique application_name), never others."""
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as admin:
        rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE application_name = %s AND pid <> pg_backend_pid()", (app,)).fetchall()
    return len(rows)


@pytest.mark.postgres
def test_sessions_cut_during_every_model_call_cost_no_second_call(pg_url):
    url, app = _pg_url_with_app(pg_url)
    store = open_store(url)
    cuts: list[int] = []
    client = _HookedClient(lambda n: cuts.append(_cut_sessions(app)))
    result = run_brief(store, client=client)
    assert sum(cuts) >= 3, "the driver's sessions were not cut"
    assert result.status == "done"
    assert [s.n for s in store.steps(result.run_id)] == [1, 2, 3]
    assert client.calls == 3
    run = store.get_run(result.run_id)
    assert (run.input_tokens, run.output_tokens) == (result.input_tokens, result.output_tokens)
    store.close()


@pytest.mark.postgres
def test_chaos_cuts_every_fraction_of_a_second_with_heartbeats(pg_url, monkeypatch):
    """Sessions cut every 150 ms for a whole slowed run while the heartbeat beats every 50 ms."""
    monkeypatch.setattr(store_module.leases, "HEARTBEAT_EVERY_S", 0.05)
    url, app = _pg_url_with_app(pg_url)
    store = open_store(url)
    done = threading.Event()
    cut_count = [0]

    def chaos() -> None:
        while not done.wait(0.15):
            cut_count[0] += _cut_sessions(app)

    def slow(_n: int) -> None:
        time.sleep(0.4)

    client = _HookedClient(slow)
    killer = threading.Thread(target=chaos, daemon=True)
    killer.start()
    try:
        result = run_brief(store, client=client)
    finally:
        done.set()
        killer.join()
    assert cut_count[0] >= 5
    assert result.status == "done"
    assert [s.n for s in store.steps(result.run_id)] == [1, 2, 3]
    assert client.calls == 3
    store.close()


@pytest.mark.postgres
def test_a_heartbeat_that_meets_a_dead_connection_keeps_beating(pg_url):
    url, app = _pg_url_with_app(pg_url)
    store = open_store(url)
    run = store.create_run("hello", model="offline")
    lease = store.claim(run.id)
    watcher = open_store(pg_url)
    try:
        lease.start_heartbeat(every=0.1)
        time.sleep(0.3)
        assert _cut_sessions(app) >= 1
        cut_at = watcher.get_run(run.id).heartbeat_at
        time.sleep(1.0)
        after = watcher.get_run(run.id).heartbeat_at
        assert after > cut_at, "the heartbeat thread died with its connection"
        assert not lease.lost
        assert lease._thread.is_alive()
    finally:
        store.release(lease)
        watcher.close()
        store.close()


def test_tool_results_from_a_driver_that_lost_its_lease_say_so(store):
    run = store.create_run("hello", model="offline")
    lease = store.claim(run.id)
    step = StepRecord(n=1, stop_reason="tool_use",
                      assistant=[{"type": "tool_use", "id": "toolu_1", "name": "read_inbox", "input": {}}])
    store.append_step(run.id, step, lease=lease)
    # Another process took the run over and has already recorded the step's results.
    Run.update(lease_token="e" * 32).where(Run.id == run.id).execute()
    Step.update(tool_results="[]").where(Step.run == run.id, Step.n == 1).execute()
    with pytest.raises(RunBusy):
        store.set_tool_results(run.id, 1, [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}],
                               lease=lease)
    assert store.steps(run.id)[0].tool_results == "[]"


def test_a_resume_that_fails_before_driving_releases_its_lease(store):
    run = store.create_run("hello", model="offline")

    def boom(_run_id: str) -> None:
        raise RuntimeError("failed between claim and drive")

    with pytest.raises(RuntimeError):
        resume(run.id, store=store, client=CountingClient(), on_start=boom)
    after = store.get_run(run.id)
    assert after.lease_token is None and after.owner_pid is None
    resumed = resume(run.id, store=store, client=CountingClient())  # nobody holds it: it can go on at once
    assert resumed.status == "done"


@pytest.mark.parametrize("command", [["show", "abcd1234"], ["resume", "abcd1234"], ["runs"], ["tasks"]])
def test_reading_commands_never_create_tables_in_an_empty_file(tmp_path, command):
    empty = tmp_path / "empty.db"
    empty.touch()
    result = dayflow(*command, db=str(empty))
    assert result.returncode == 2
    lines = text(result.stderr).strip().splitlines()
    assert len(lines) == 1 and "no Dayflow tables" in lines[0]
    assert empty.stat().st_size == 0


def test_a_key_straddling_the_cut_never_survives_in_part(monkeypatch):
    key = "sk-ant-api03-" + "Zq7" * 30
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    for offset in range(0, 320, 3):
        message = "x" * offset + key + " tail"
        cut = redact_and_cut(message, 300)
        assert len(cut) <= 300
        for i in range(len(key) - 11):
            assert key[i:i + 12] not in cut, (offset, cut[-40:])


def test_a_store_error_never_carries_the_key(monkeypatch, db_path):
    key = "sk-ant-api03-" + "Qw9" * 30
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    db_path.write_bytes(b"not a database " + key.encode() * 20)
    with pytest.raises(StoreError) as caught:
        open_store(db_path)
    for i in range(len(key) - 11):
        assert key[i:i + 12] not in str(caught.value)


def _record_owner(store, run_id: str, *, pid: int, started: int | None, heartbeat_age_s: float) -> None:
    from datetime import timedelta

    from dayflow_tui import clock

    beat = clock.iso(clock.now() - timedelta(seconds=heartbeat_age_s))
    Run.update(owner_host=store_module.HOSTNAME, owner_pid=pid, owner_started=started, lease_token="f" * 32,
               heartbeat_at=beat, status="running").where(Run.id == run_id).execute()


def test_a_reused_pid_does_not_pin_a_run(store):
    """The recorded owner died and its pid now belongs to an unrelated live process (a real one)."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        real_start = store_module.process_start_time(other.pid)
        assert real_start is not None
        run = store.create_run("hello", model="offline")
        _record_owner(store, run.id, pid=other.pid, started=real_start - 1, heartbeat_age_s=1)
        assert store_module.effective_status(store.get_run(run.id)) == "interrupted"
        client = CountingClient()
        assert resume(run.id, store=store, client=client).status == "done"
        assert client.calls == 3
        # The same pid with its true start time and a fresh beat is a live owner: refused.
        run2 = store.create_run("hello", model="offline")
        _record_owner(store, run2.id, pid=other.pid, started=real_start, heartbeat_age_s=1)
        with pytest.raises(RunBusy):
            resume(run2.id, store=store, client=CountingClient())
        # ... and a live pid silent past the stale time is a hung owner: taken over.
        _record_owner(store, run2.id, pid=other.pid, started=real_start, heartbeat_age_s=store_module.STALE_AFTER_S + 5)
        assert resume(run2.id, store=store, client=CountingClient()).status == "done"
    finally:
        other.kill()
        other.wait()


def test_a_schema_1_file_migrates_in_place_keeping_its_runs(db_path):
    store = open_store(db_path)
    run_brief(store, client=CountingClient())
    before = [(r.id, r.status, r.step_count) for r in store.list_runs()]
    store.db.execute_sql('ALTER TABLE "runs" DROP COLUMN "owner_started"')
    store.db.execute_sql('DROP TABLE "run_resumes"')  # schema 4's
    store.db.execute_sql('ALTER TABLE "runs" DROP COLUMN "budget_usd"')  # schema 6's
    store.db.execute_sql('DROP TABLE "approvals"')  # schema 7's
    store.db.execute_sql('ALTER TABLE "runs" DROP COLUMN "approval_tools"')
    store.db.execute_sql("PRAGMA user_version = 1")
    store.close()
    reopened = open_store(db_path)
    assert reopened.db.execute_sql("PRAGMA user_version").fetchone()[0] == store_module.SCHEMA_VERSION
    assert "run_resumes" in reopened.db.get_tables()
    assert "budget_usd" in {c.name for c in reopened.db.get_columns("runs")}
    assert "approvals" in reopened.db.get_tables()
    assert "approval_tools" in {c.name for c in reopened.db.get_columns("runs")}
    assert [(r.id, r.status, r.step_count) for r in reopened.list_runs()] == before
    assert len(reopened.list_tasks(include_done=True)) == len(store_module.SEED_TASKS) + 6  # not seeded twice
    reopened.close()


@pytest.mark.parametrize("damage", ["move", "replace", "delete-wal"])
def test_a_database_moved_or_replaced_mid_run_stops_before_the_next_paid_call(db_path, damage):
    store = open_store(db_path)
    moved = db_path.with_name("moved.db")

    def damage_during_call(n: int) -> None:
        if n != 1:
            return
        if damage == "move":
            db_path.rename(moved)
        elif damage == "replace":
            db_path.rename(moved)
            db_path.write_bytes(b"")
        else:
            db_path.with_name(db_path.name + "-wal").unlink()

    client = _HookedClient(damage_during_call)
    with pytest.raises(StoreError) as caught:
        run_brief(store, client=client)
    assert "stopping before another paid call" in str(caught.value)
    assert client.calls == 1  # the reply bought during the damage was committed; nothing more was bought
    [run] = store.list_runs()
    assert [s.n for s in store.steps(run.id)] == [1]
    store.close()


# The chaos pool of `dayflow worker` processes (sessions cut, workers killed) is tests/faults/test_chaos.py.
