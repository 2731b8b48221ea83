"""One store on two backends: URL forms, schema and versions on PostgreSQL, the change marker, the lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from dayflow_tui import clock
from dayflow_tui import store as store_module
from dayflow_tui.config.errors import RunBusy, StoreError
from dayflow_tui.store.models import Run, Step, StoreMeta, Task
from dayflow_tui.store.sample_tasks import SEED_TASKS
from dayflow_tui.store import HOSTNAME, SCHEMA_VERSION, StepRecord, dumps, is_url, open_store, safe_url

pg_only = pytest.mark.postgres


def test_paths_and_sqlite_urls_open_sqlite_files(tmp_path, monkeypatch):
    absolute = tmp_path / "abs.db"
    opened = open_store(f"sqlite:///{absolute}")  # sqlite:// + /abs/path
    assert opened.dialect.name == "sqlite" and opened.label == str(absolute) and absolute.exists()
    opened.close()
    monkeypatch.chdir(tmp_path)
    open_store("sqlite:///relative.db").close()
    assert (tmp_path / "relative.db").exists()
    monkeypatch.setenv("DAYFLOW_DB", "sqlite:///from-env.db")
    open_store().close()
    assert (tmp_path / "from-env.db").exists()
    assert not is_url(str(absolute)) and is_url("postgresql://h/db") and is_url("sqlite:///x")


def test_unsupported_url_and_unreachable_server_are_one_line_without_the_password():
    with pytest.raises(StoreError, match="unsupported database URL scheme 'mysql'") as bad:
        open_store("mysql://root:hunter2@localhost/db")
    assert "hunter2" not in str(bad.value)
    with pytest.raises(StoreError) as down:
        open_store("postgresql://bob:hunter2@127.0.0.1:1/nodb?connect_timeout=3")
    text = str(down.value)
    assert "\n" not in text and "hunter2" not in text
    assert text.startswith("postgresql://bob:***@127.0.0.1:1/nodb")
    assert safe_url("postgresql://u@h/d?password=x&sslmode=require") == "postgresql://u@h/d?password=***&sslmode=require"


@pg_only
def test_postgres_schema_is_created_once_with_its_version(pg_url):
    opened = open_store(pg_url)
    assert opened.dialect.name == "postgres"
    tables = set(opened.db.get_tables())
    assert {"runs", "steps", "tasks", "dayflow_meta", "dayflow_changes"} <= tables
    assert StoreMeta.get(StoreMeta.key == "schema_version").value == SCHEMA_VERSION
    assert Task.select().count() == len(SEED_TASKS)
    opened.close()
    again = open_store(pg_url)  # the second open migrates nothing and seeds nothing
    assert Task.select().count() == len(SEED_TASKS)
    again.close()


@pg_only
def test_postgres_newer_schema_is_refused_and_left_untouched(pg_url):
    opened = open_store(pg_url)
    StoreMeta.update(value=99).where(StoreMeta.key == "schema_version").execute()
    run = opened.create_run("keep me", model="offline")
    opened.close()
    with pytest.raises(StoreError, match="newer Dayflow"):
        open_store(pg_url)
    import psycopg

    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT value FROM dayflow_meta").fetchall() == [(99,)]
        assert conn.execute("SELECT id FROM runs").fetchall() == [(run.id,)]


@pg_only
def test_postgres_with_foreign_tables_or_no_tables_is_refused(pg_url):
    with pytest.raises(StoreError, match="no Dayflow tables"):
        open_store(pg_url, create=False)
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
        with pytest.raises(StoreError, match="not Dayflow's"):
            open_store(pg_url)
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
    assert tables == ["invoices"]


_OPEN_AND_COUNT = textwrap.dedent("""
    import sys
    from dayflow_tui.store.models import Task
    from dayflow_tui.store import open_store
    store = open_store(sys.argv[1])
    print(Task.select().count())
""")


@pg_only
def test_first_opens_racing_from_four_processes_migrate_once(pg_url):
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN_AND_COUNT, pg_url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _out, err in outs]
    assert {out.strip() for out, _err in outs} == {str(len(SEED_TASKS))}


def test_stored_json_text_is_kept_byte_for_byte(store):
    blocks = [{"type": "text", "text": "zé \u2028 \\u0000 \"q\" 🚀", "z": 1, "a": [1.5, None, True]}]
    run = store.create_run("t", model="offline")
    store.append_step(run.id, StepRecord(n=1, stop_reason="end_turn", assistant=blocks))
    [step] = store.steps(run.id)
    assert step.assistant == dumps(blocks)  # TEXT, not jsonb: key order and spacing are what was sent
    assert list(json.loads(step.assistant)[0]) == ["type", "text", "z", "a"]


def test_change_marker_moves_exactly_when_another_connection_commits(store):
    marker = store.change_marker()
    assert store.change_marker() == marker  # reading changes nothing
    store.list_runs()
    assert store.change_marker() == marker

    def other_connection() -> None:  # Peewee gives each thread its own connection
        try:
            store.create_run("from elsewhere", model="offline", run_id="feedfeedfeed")
        finally:
            store.close_thread_connection()

    writer = threading.Thread(target=other_connection)
    writer.start()
    writer.join()
    after = store.change_marker()
    assert after != marker
    assert store.change_marker() == after
    assert store.get_run("feedfeedfeed").user_msg == "from elsewhere"


@pg_only
def test_change_marker_on_postgres_is_a_tiny_table_read(pg_url):
    opened = open_store(pg_url)
    plan = opened.db.execute_sql("EXPLAIN SELECT SUM(n) FROM dayflow_changes").fetchall()
    assert "dayflow_changes" in " ".join(row[0] for row in plan)
    for _ in range(30):
        opened.create_run("t", model="offline")
    assert opened.change_marker()[0] >= 30  # migration + one bump per write transaction
    opened.close()


def test_concurrent_claims_of_one_run_have_exactly_one_winner(store):
    run = store.create_run("t", model="offline", status="running", run_id="race00000000")
    Run.update(owner_host="gone-host", owner_pid=1, lease_token="o" * 32,
               heartbeat_at="2000-01-01T00:00:00.000Z").where(Run.id == run.id).execute()
    start = threading.Barrier(6)
    outcomes: list[str] = []

    def claimant() -> None:
        try:
            start.wait()
            lease = store.claim(run.id)
            outcomes.append(lease.token)
        except RunBusy:
            outcomes.append("busy")
        finally:
            store.close_thread_connection()

    threads = [threading.Thread(target=claimant) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o != "busy"]
    assert len(outcomes) == 6 and len(winners) == 1
    assert store.get_run(run.id).lease_token == winners[0]


def test_a_claim_loses_to_an_owner_that_heartbeats_after_the_read(store, monkeypatch):
    run = store.create_run("t", model="offline", status="running", run_id="slow00000000")
    Run.update(owner_host="other-host", owner_pid=7, lease_token="s" * 32,
               heartbeat_at="2000-01-01T00:00:00.000Z").where(Run.id == run.id).execute()
    real_owner_alive = store_module.owner_alive

    def stale_then_beats(row, stale_after=store_module.STALE_AFTER_S):
        verdict = real_owner_alive(row, stale_after)
        # The owner was only slow: its heartbeat lands between our read and our claim.
        Run.update(heartbeat_at=clock.iso()).where(Run.id == row.id).execute()
        return verdict

    monkeypatch.setattr(store_module.tables.claims, "owner_alive", stale_then_beats)
    with pytest.raises(RunBusy, match="other-host"):
        store.claim(run.id)
    assert store.get_run(run.id).lease_token == "s" * 32


def test_racing_workers_claim_every_queued_run_exactly_once(store):
    ids = [store.create_run(f"t{i}", model="offline", run_id=f"q{i:011d}").id for i in range(24)]
    claimed: list[list[str]] = [[] for _ in range(6)]
    start = threading.Barrier(6)

    def worker(k: int) -> None:
        try:
            start.wait()
            while (lease := store.claim_next()) is not None:
                claimed[k].append(lease.run_id)
        finally:
            store.close_thread_connection()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [rid for ids_ in claimed for rid in ids_]
    assert sorted(flat) == ids  # every run once, none twice
    assert all(r.status == "running" and r.owner_pid == os.getpid() for r in store.list_runs())


def test_claim_next_takes_orphans_first_and_leaves_live_stopped_and_finished_runs(store):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        def make(rid, status, **lease):
            store.create_run("t", model="offline", status=status, run_id=rid)
            if lease:
                Run.update(**lease).where(Run.id == rid).execute()

        recent, old = clock.iso(), "2000-01-01T00:00:00.000Z"
        make("queued000000", "queued")
        make("failed000000", "failed")
        make("budget000000", "budget")
        make("done00000000", "done")
        make("livepid00000", "running", owner_host=HOSTNAME, owner_pid=live.pid, lease_token="l" * 32,
             heartbeat_at=recent)
        # The same live pid silent since 2000: a hung owner, whose run is taken over (issue #10).
        make("hungpid00000", "running", owner_host=HOSTNAME, owner_pid=live.pid, lease_token="g" * 32,
             heartbeat_at=old)
        make("livehost0000", "running", owner_host="far-host", owner_pid=1, lease_token="h" * 32,
             heartbeat_at=recent)
        make("deadpid00000", "running", owner_host=HOSTNAME, owner_pid=dead.pid, lease_token="d" * 32,
             heartbeat_at=recent)
        make("stalehost000", "running", owner_host="far-host", owner_pid=1, lease_token="f" * 32,
             heartbeat_at=old)
        make("released0000", "running")  # stopped by its worker at a step boundary
        order = []
        while (lease := store.claim_next()) is not None:
            order.append(lease.run_id)
        assert sorted(order[:4]) == ["deadpid00000", "hungpid00000", "released0000", "stalehost000"]
        assert order[4:] == ["queued000000"]
    finally:
        live.kill()
        live.wait()


def test_a_nul_in_a_tool_argument_is_an_error_result_on_both_backends(store):
    from dayflow_tui.agent.tools import ToolContext, run_tools

    run = store.create_run("t", model="offline", run_id="nul000000000")
    call = {"type": "tool_use", "id": "t1", "name": "create_task",
            "input": {"title": "pay\x00rent", "idempotency_key": "mail-nul"}}
    from dayflow_tui.agent.brief import AGENT

    [result] = run_tools(ToolContext(store, run.id, clock.today(), AGENT), [call])
    assert result["is_error"] and "NUL" in result["content"]
    assert store.list_tasks(run_id=run.id) == []
