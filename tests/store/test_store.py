"""The store: schema, pragmas, permissions, atomic step commits, rebuild, idempotent tasks."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap

import pytest

from dayflow_tui.agent.messages import rebuild_messages
from dayflow_tui import clock

from dayflow_tui.config.errors import RunBusy, StoreError
from dayflow_tui.store.models import Run, Step
from dayflow_tui.store import SCHEMA_VERSION, StepRecord, open_store


def _step(n: int, tokens: int = 10) -> StepRecord:
    return StepRecord(n=n, stop_reason="end_turn", assistant=[{"type": "text", "text": f"step {n}"}],
                      input_tokens=tokens, output_tokens=tokens // 2, cache_read_input_tokens=1)


def test_new_database_is_owner_only_with_the_durability_pragmas(db_path):
    store = open_store(db_path)
    run = store.create_run("hello", model="offline")
    store.append_step(run.id, _step(1))  # a write while open: -wal and -shm exist now
    for suffix in ("", "-wal", "-shm"):
        mode = stat.S_IMODE(os.stat(f"{db_path}{suffix}").st_mode)
        assert mode == 0o600, (suffix, oct(mode))
    pragma = lambda name: store.db.execute_sql(f"PRAGMA {name}").fetchone()[0]  # noqa: E731
    assert pragma("journal_mode") == "wal"
    assert pragma("synchronous") == 2  # FULL
    assert pragma("foreign_keys") == 1
    assert pragma("busy_timeout") == 10_000  # the sqlite_busy_timeout_s setting's default
    assert pragma("user_version") == SCHEMA_VERSION
    store.close()


def test_the_busy_timeout_is_the_sqlite_busy_timeout_setting_and_a_bad_one_is_one_line(db_path, monkeypatch):
    from ..reliability_helpers import assert_one_error_line, cli_env, dayflow

    monkeypatch.setenv("DAYFLOW_SQLITE_BUSY_TIMEOUT", "2.5")
    store = open_store(db_path)
    assert store.db.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 2500
    store.db.close()  # a reconnect (as the store's retries do) keeps it
    assert store.db.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 2500
    store.close()
    refused = dayflow("runs", db=db_path, env=cli_env(DAYFLOW_SQLITE_BUSY_TIMEOUT="soon"))
    assert refused.returncode == 64
    assert_one_error_line(refused, "DAYFLOW_SQLITE_BUSY_TIMEOUT", "seconds")


def test_steps_table_has_the_designed_columns(store):
    columns = [c.name for c in store.db.get_columns("steps")]
    for name in ("run_id", "n", "stop_reason", "assistant", "tool_results", "input_tokens", "output_tokens",
                 "created_at"):
        assert name in columns
    assert [c for c in store.db.get_primary_keys("steps")] == ["run_id", "n"]
    assert any(i.unique and i.columns == ["idempotency_key"] for i in store.db.get_indexes("tasks"))


def test_a_newer_schema_is_refused_and_left_untouched(db_path):
    open_store(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA user_version = 99")
    before = db_path.read_bytes()
    with pytest.raises(StoreError, match="newer Dayflow"):
        open_store(db_path)
    assert db_path.read_bytes() == before


def test_step_and_totals_commit_together(store):
    run = store.create_run("t", model="offline")
    store.append_step(run.id, _step(1, 100))
    # The step insert fails (step 1 exists): the run's totals must not move.
    with pytest.raises(StoreError):
        store.append_step(run.id, _step(1, 999))
    row = store.get_run(run.id)
    assert (row.input_tokens, row.output_tokens, row.step_count) == (100, 50, 1)


def test_totals_update_failing_rolls_the_step_back(store):
    run, lease = store.create_claimed_run("u", model="offline")
    lease.token = "not-the-owner"  # as if another process had taken the run over
    with pytest.raises(RunBusy):
        store.append_step(run.id, _step(1), lease=lease)
    assert store.steps(run.id) == []
    row = store.get_run(run.id)
    assert (row.input_tokens, row.step_count) == (0, 0)


def test_rebuild_leaves_out_a_step_whose_tools_have_not_run(store):
    run = store.create_run("the task", model="offline")
    use = {"type": "tool_use", "id": "t1", "name": "read_inbox", "input": {}}
    store.append_step(run.id, StepRecord(n=1, stop_reason="tool_use", assistant=[use]))
    assert rebuild_messages(store, run.id) == [{"role": "user", "content": "the task"}]
    results = [{"type": "tool_result", "tool_use_id": "t1", "content": "{}"}]
    store.set_tool_results(run.id, 1, results)
    assert rebuild_messages(store, run.id) == [{"role": "user", "content": "the task"},
                                              {"role": "assistant", "content": [use]},
                                              {"role": "user", "content": results}]
    with pytest.raises(StoreError, match="already recorded"):
        store.set_tool_results(run.id, 1, results)


def test_stored_blocks_round_trip_exactly(store):
    run = store.create_run("t", model="offline")
    blocks = [{"type": "thinking", "thinking": "ünïcode ✓ [bold]x[/] \u202eRTL", "signature": "a/b+c=="},
              {"type": "text", "text": "\x1b]0;title\x07 emoji 🚀", "citations": None}]
    store.append_step(run.id, StepRecord(n=1, stop_reason="end_turn", assistant=blocks))
    assert rebuild_messages(store, run.id)[1]["content"] == blocks


def test_malformed_json_row_is_one_clear_error(store):
    run = store.create_run("t", model="offline")
    store.append_step(run.id, _step(1))
    Step.update(assistant="{not json").where(Step.run == run.id).execute()
    with pytest.raises(StoreError, match=f"run {run.id} step 1: stored assistant JSON is malformed"):
        rebuild_messages(store, run.id)


def test_not_a_database_is_refused_without_changing_it(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a readable Dayflow database"):
        open_store(path)
    assert path.read_bytes() == before


def test_run_id_prefix_lookup_and_unknown_id(store):
    from dayflow_tui.config.errors import RunNotFound

    run = store.create_run("t", model="offline", run_id="abcdef012345")
    assert store.get_run("abcdef").id == run.id
    with pytest.raises(RunNotFound):
        store.get_run("ffffffffffff")


def test_list_runs_is_windowed_newest_first(store):
    for i in range(7):
        Run.create(id=f"run{i:09d}", user_msg=f"task {i}", status="done", model="offline",
                   created_at=f"2026-12-0{i + 1}T00:00:00.000Z", updated_at="2026-12-01T00:00:00.000Z")
    first = store.list_runs(limit=3)
    assert [r.id for r in first] == ["run000000006", "run000000005", "run000000004"]
    after = store.list_runs(limit=3, before=(first[-1].created_at, first[-1].id))
    assert [r.id for r in after] == ["run000000003", "run000000002", "run000000001"]
    assert [r.id for r in store.list_runs(search="task 2")] == ["run000000002"]


_CREATE_TASKS = textwrap.dedent("""
    import json, sys
    from dayflow_tui.store import open_store
    store = open_store(sys.argv[1])
    created = []
    for i in range(40):
        task, new = store.create_task(idempotency_key=f"key-{i}", title=f"task {i}")
        created.append([task.id, new])
    print(json.dumps(created))
""")


def test_create_task_is_idempotent_across_processes(db_target):
    open_store(db_target).close()
    procs = [subprocess.Popen([sys.executable, "-c", _CREATE_TASKS, str(db_target)], stdout=subprocess.PIPE,
                              text=True) for _ in range(4)]
    outputs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    for i in range(40):
        ids = {out[i][0] for out in outputs}
        assert len(ids) == 1, f"key-{i} got several rows: {ids}"
        assert sum(out[i][1] for out in outputs) == 1, f"key-{i} reported created more than once"
    store = open_store(db_target)
    assert len([t for t in store.list_tasks() if t.idempotency_key.startswith("key-")]) == 40


def test_latest_unfinished_skips_runs_driven_by_a_live_process(store):
    import os

    from dayflow_tui.store import HOSTNAME

    Run.create(id="older0000000", user_msg="t", status="failed", model="offline",
               created_at="2026-12-01T00:00:00.000Z", updated_at="2026-12-01T00:00:00.000Z")
    Run.create(id="newer0000000", user_msg="t", status="running", model="offline", owner_host=HOSTNAME,
               owner_pid=os.getppid(), lease_token="y" * 32, heartbeat_at=clock.iso(),
               created_at="2026-12-02T00:00:00.000Z",
               updated_at="2026-12-02T00:00:00.000Z")
    assert store.latest_unfinished().id == "older0000000"
