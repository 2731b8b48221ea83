"""``dayflow prune`` and ``dayflow vacuum``: old finished runs go only when a person says so, tasks and unfinished
runs never, an archive brings pruned runs back, and vacuuming is safe with the dashboard and workers running."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from datetime import timedelta

import pytest

from dayflow_tui import clock
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.config.errors import ModelCallFailed
from dayflow_tui.store import StepRecord, open_store
from dayflow_tui.store.retention import prunable_runs, prune
from dayflow_tui.store.status import RunStatus

from ..conftest import CountingClient, dayflow_cmd
from ..reliability_helpers import call_count, checkpointed, cli_env
from ..travel_helpers import TABLES, dayflow, new_run, one_error_line, rows, search_index_is_whole


def _old_and_new_runs(target: str, monkeypatch) -> dict[str, str]:
    """Runs of every state last changed 60 days ago, and one done today."""
    store = open_store(target)
    made: dict[str, str] = {}
    try:
        monkeypatch.setenv("DAYFLOW_FAKE_NOW", clock.iso(clock.now() - timedelta(days=60)))
        made["old_done"] = run_brief(store, client=CountingClient()).run_id
        made["old_done_2"] = run_brief(store, client=CountingClient(), user_msg="Only the calendar.").run_id
        with new_run(store) as failed, pytest.raises(ModelCallFailed):
            run_brief(store, client=CountingClient(fail_on={2: RuntimeError("overloaded")}))
        made["old_failed"] = failed[0]
        made["old_budget"] = run_brief(store, client=CountingClient(), max_steps=1).run_id
        with new_run(store) as interrupted, pytest.raises(SystemExit):
            run_brief(store, client=CountingClient(), crash_after_step=2)
        made["old_interrupted"] = interrupted[0]
        made["old_queued"] = store.create_run("queued long ago", model="offline").id
        monkeypatch.delenv("DAYFLOW_FAKE_NOW")
        made["new_done"] = run_brief(store, client=CountingClient()).run_id
        # A resumed run: its resume record must go with it.
        with new_run(store) as made_resumed, pytest.raises(ModelCallFailed):
            run_brief(store, client=CountingClient(fail_on={2: RuntimeError("overloaded")}))
        resumed = made_resumed[0]
        assert resume(resumed, store=store, client=CountingClient()).status == "done"
    finally:
        store.close()
    made["old_resumed"] = resumed
    _age_run(target, resumed, days=45)
    return made


def _age_run(target: str, run_id: str, *, days: int) -> None:
    stamp = clock.iso(clock.now() - timedelta(days=days))
    if "://" in target:
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("UPDATE runs SET updated_at = %s WHERE id = %s", (stamp, run_id))
        return
    conn = sqlite3.connect(target)
    with conn:
        conn.execute("UPDATE runs SET updated_at = ? WHERE id = ?", (stamp, run_id))
    conn.close()


def _settled_fingerprint(db) -> str:
    """The file's pages once the log is folded in, but for the header's change counters.

    A checkpoint (a reader's last close makes one) bumps the file change
    counter and its copy (header bytes 24-27, 92-95) without a write.
    """
    checkpointed(db)
    data = bytearray(open(db, "rb").read())
    data[24:28] = data[92:96] = b"\0\0\0\0"
    return hashlib.sha256(data).hexdigest()


def _everything(target: str) -> dict[str, list[dict]]:
    return {table: rows(target, table) for table in TABLES}


def test_dry_run_shows_what_prune_then_removes_and_nothing_else(db_target, monkeypatch):
    made = _old_and_new_runs(db_target, monkeypatch)
    before = _everything(db_target)
    file_before = None if "://" in db_target else _settled_fingerprint(db_target)

    dry = dayflow("prune", "--older-than", "30d", "--dry-run", db=db_target)
    assert dry.returncode == 0, dry.stderr
    listed = [line.split()[2] for line in dry.stdout.splitlines() if line.startswith("would remove")]
    assert sorted(listed) == sorted([made["old_done"], made["old_done_2"], made["old_resumed"]])  # done only
    assert "dry run: 3 run(s)" in dry.stdout
    assert _everything(db_target) == before
    if file_before is not None:
        assert _settled_fingerprint(db_target) == file_before

    real = dayflow("prune", "--older-than", "30d", "--status", "done,failed", db=db_target)
    assert real.returncode == 0, real.stderr
    gone = {made["old_done"], made["old_done_2"], made["old_resumed"], made["old_failed"]}
    removed = [line.split()[1] for line in real.stdout.splitlines() if " last change " in line]
    assert sorted(removed) == sorted(gone)
    summary = next(line for line in real.stdout.splitlines() if line.startswith("removed 4 run(s)"))
    stored = sum(len(s["assistant"].encode()) + len((s["tool_results"] or "").encode())
                 for s in before["steps"] if s["run_id"] in gone)
    texts = sum(len((r["user_msg"] or "").encode()) + len((r["final_text"] or "").encode())
                + len((r["error"] or "").encode()) for r in before["runs"] if r["id"] in gone)
    assert f"{stored + texts:,} bytes of stored text" in summary
    assert "1 resume record(s)" in summary
    if "://" not in db_target:
        assert "bytes of the database file are now free pages" in real.stdout

    after = _everything(db_target)
    assert {r["id"] for r in after["runs"]} == {r["id"] for r in before["runs"]} - gone
    assert [r for r in after["runs"]] == [r for r in before["runs"] if r["id"] not in gone]
    assert after["steps"] == [s for s in before["steps"] if s["run_id"] not in gone]
    assert after["run_resumes"] == [r for r in before["run_resumes"] if r["run_id"] not in gone]
    # Tasks are the person's: every one stays, only its link to a removed run is cleared.
    assert [{**t, "run_id": None} for t in after["tasks"]] == [{**t, "run_id": None} for t in before["tasks"]]
    assert all(t["run_id"] is None for t in after["tasks"]
               if any(b["id"] == t["id"] and b["run_id"] in gone for b in before["tasks"]))

    # The search index forgot the removed runs in the same transaction (it equals a rebuild from the rows).
    hits = search_index_is_whole(db_target, "inbox")
    assert hits and not {run for run, _step, _where in hits} & gone

    again = dayflow("prune", "--older-than", "30d", "--status", "done,failed", db=db_target)
    assert again.returncode == 0 and "nothing to prune" in again.stderr


def test_a_cancelled_run_is_pruned_when_named_and_one_asked_to_stop_is_not(db_path):
    store = open_store(db_path)
    store.create_run("cancel me", model="offline", run_id="prune-canc-01")
    store.cancel_run("prune-canc-01", by="ana@desk", reason="old")
    _run, lease = store.create_claimed_run("still driven", model="offline", run_id="prune-canc-02")
    store.cancel_run("prune-canc-02", by="ana@desk")  # asked: it stays running until its driver sees it
    store.close()
    for run_id in ("prune-canc-01", "prune-canc-02"):
        _age_run(str(db_path), run_id, days=40)
    result = dayflow("prune", "--older-than", "30d", "--status", "cancelled", db=str(db_path))
    assert result.returncode == 0, result.stderr
    assert [r["id"] for r in rows(str(db_path), "runs")] == ["prune-canc-02"]


def test_unfinished_and_queued_runs_cannot_be_named(db_path):
    assert dayflow("brief", db=str(db_path)).returncode == 0
    before = _settled_fingerprint(db_path)
    for status in ("running", "queued", "interrupted", "done,queued", "sleeping", ","):
        result = dayflow("prune", "--older-than", "0d", "--status", status, db=str(db_path))
        assert result.returncode == 64, (status, result.stderr)
        one_error_line(result)
    for age in ("30", "thirty days", "-3d", "1y"):
        result = dayflow("prune", "--older-than", age, db=str(db_path))
        assert result.returncode == 64 and "--older-than" in one_error_line(result)  # a usage error
    missing = dayflow("prune", "--older-than", "1d", db=str(db_path.parent / "nowhere.db"))
    assert missing.returncode == 64 and not (db_path.parent / "nowhere.db").exists()
    assert _settled_fingerprint(db_path) == before


def test_archive_then_reimport_restores_the_pruned_runs(db_target, monkeypatch, tmp_path):
    made = _old_and_new_runs(db_target, monkeypatch)
    before = _everything(db_target)
    archive = tmp_path / "pruned.jsonl"
    pruned = dayflow("prune", "--older-than", "30d", "--status", "done,failed,budget", "--archive", str(archive),
                     db=db_target)
    assert pruned.returncode == 0, pruned.stderr
    assert f"archived in {archive}" in pruned.stdout
    assert made["old_budget"] not in {r["id"] for r in rows(db_target, "runs")}
    assert {made["old_interrupted"], made["old_queued"], made["new_done"]} <= {r["id"] for r in rows(db_target, "runs")}

    restored = dayflow("import", str(archive), db=db_target)
    assert restored.returncode == 0, restored.stderr
    assert "linked to their run again" in restored.stderr
    assert _everything(db_target) == before  # every row, every column, and each task's link to its run


def test_a_run_resumed_after_it_was_selected_is_kept(store, monkeypatch):
    with pytest.raises(ModelCallFailed):
        run_brief(store, client=CountingClient(fail_on={2: RuntimeError("overloaded")}))
    [run] = store.list_runs()
    candidates = prunable_runs(store, older_than=timedelta(0), statuses=[RunStatus.FAILED])
    assert [c.id for c in candidates] == [run.id]
    lease = store.claim(run.id)  # a resume starts between the selection and the delete
    try:
        report = prune(store, candidates)
    finally:
        store.release(lease)
    assert report.removed == [] and report.changed == [run.id]
    assert store.get_run(run.id).step_count == 1


def _bulky_old_runs(db: str, count: int, monkeypatch) -> None:
    """``count`` done runs 60 days old, five steps of ~40 KB each: something worth giving back."""
    store = open_store(db)
    monkeypatch.setenv("DAYFLOW_FAKE_NOW", clock.iso(clock.now() - timedelta(days=60)))
    try:
        for i in range(count):
            run, lease = store.create_claimed_run(f"old run {i}", model="offline")
            for n in range(1, 6):
                blocks = [{"type": "text", "text": f"{i}-{n} " + "lorem ipsum " * 3300}]
                final = "done" if n == 5 else None
                store.append_step(run.id, StepRecord(n=n, stop_reason="end_turn" if final else "pause_turn",
                                                     assistant=blocks, input_tokens=10, output_tokens=10),
                                  lease=lease, final_status=final, final_text="brief" if final else None)
            store.release(lease)
    finally:
        monkeypatch.delenv("DAYFLOW_FAKE_NOW")
        store.close()


def _as_a_legacy_file(db) -> None:
    """The file as Dayflow made it before incremental vacuuming (auto_vacuum NONE)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    conn.close()


def _disk_bytes(db) -> int:
    return sum(os.path.getsize(p) for p in (str(db), f"{db}-wal") if os.path.exists(p))


def test_vacuum_gives_the_pruned_space_back(db_path, monkeypatch):
    _bulky_old_runs(str(db_path), 20, monkeypatch)
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # a new file starts incremental
    conn.close()
    _as_a_legacy_file(db_path)
    assert dayflow("prune", "--older-than", "30d", "--dry-run", db=str(db_path)).returncode == 0
    first = dayflow("vacuum", db=str(db_path))  # nothing freed yet: converts the file, shrinks nothing much
    assert first.returncode == 0, first.stderr
    assert "switch it to incremental vacuuming" in first.stdout
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    conn.close()

    size_before = _disk_bytes(db_path)
    pruned = dayflow("prune", "--older-than", "30d", db=str(db_path))
    assert pruned.returncode == 0 and "removed 20 run(s), 100 step(s)" in pruned.stdout
    freed = int(next(line for line in pruned.stdout.splitlines() if "free pages" in line).split()[0].replace(",", ""))
    assert freed > 3_000_000  # 100 steps of ~40 KB

    vacuumed = dayflow("vacuum", db=str(db_path))
    assert vacuumed.returncode == 0, vacuumed.stderr
    assert "switch" not in vacuumed.stdout
    size_after = _disk_bytes(db_path)
    assert size_after < size_before - 3_000_000
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] > 0
    conn.close()


@pytest.mark.postgres
def test_vacuum_on_postgresql(pg_url, monkeypatch):
    _bulky_old_runs(pg_url, 3, monkeypatch)
    assert dayflow("prune", "--older-than", "30d", db=pg_url).returncode == 0
    result = dayflow("vacuum", db=pg_url)
    assert result.returncode == 0, result.stderr
    assert "VACUUM (ANALYZE) done" in result.stdout
    assert rows(pg_url, "runs") == [] and rows(pg_url, "tasks")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_vacuum_while_the_dashboard_and_workers_run(tmp_path, monkeypatch):
    """Prune and vacuum (the one-time full VACUUM, then the incremental kind) while a worker drives queued runs
    and the dashboard watches: no step lost or bought twice, no error anywhere, the file smaller."""
    from ..tui.test_dashboard_crash import Dashboard

    db, log = tmp_path / "dayflow.db", tmp_path / "calls.log"
    _bulky_old_runs(str(db), 30, monkeypatch)
    _as_a_legacy_file(db)
    queued = [dayflow("brief", "--queue", db=str(db)).stdout.strip() for _ in range(12)]
    # 12 runs x 3 calls x 1 s on 2 threads: the worker is still busy through the three commands below,
    # even on a loaded machine (checked from the call log's timestamps, not assumed).
    env = cli_env(DAYFLOW_CALL_LOG=str(log), DAYFLOW_OFFLINE_DELAY="1.0", TERM="xterm-256color")
    env.pop("PYTEST_XDIST_WORKER", None)
    size_before = _disk_bytes(db)

    dashboard = Dashboard(db, env)
    worker = subprocess.Popen(dayflow_cmd("worker", "--concurrency", "2", "--poll", "0.2", "--db", str(db)),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    try:
        dashboard.wait_for_screen(queued[0][:8])
        deadline = time.monotonic() + 120
        while call_count(log) < 2:
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.05)
        began = time.time()
        converted = dayflow("vacuum", db=str(db), env=env)  # the full VACUUM, with the worker mid-run
        assert converted.returncode == 0, converted.stderr
        pruned = dayflow("prune", "--older-than", "30d", db=str(db), env=env)
        assert pruned.returncode == 0 and "removed 30 run(s)" in pruned.stdout, pruned.stdout + pruned.stderr
        vacuumed = dayflow("vacuum", db=str(db), env=env)  # incremental, a megabyte per transaction
        assert vacuumed.returncode == 0, vacuumed.stderr
        ended = time.time()
        # The worker was mid-run through all three commands: it had called before them and calls after them
        # (a call every second on each of 2 threads; the commands may take less than that, so a call inside
        # the window is likely but not certain on a loaded machine).
        while call_count(log) < 3 or max(float(line.split()[2]) for line in log.read_text().splitlines()) < ended:
            assert time.monotonic() < deadline + 60 and worker.poll() is None, "the worker stopped calling"
            time.sleep(0.05)
        stamps = sorted(float(line.split()[2]) for line in log.read_text().splitlines())
        assert stamps[0] < began and stamps[-1] >= ended, (stamps, began, ended)
        while True:
            states = {r["id"]: r for r in json.loads(dayflow("runs", "--json", db=str(db)).stdout)}
            if all(states[q]["status"] == "done" for q in queued):
                break
            assert time.monotonic() < deadline + 120, states
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while "old run" in dashboard.screen() and time.monotonic() < deadline:
            time.sleep(0.1)  # the list drops the pruned runs at the next commit that touches no run
        screen = dashboard.screen()
        assert dashboard_alive(dashboard)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
        dashboard.kill()
    assert worker.returncode == 0, err
    assert "dayflow worker:" not in err, err  # the worker's error lines
    for trouble in ("Error", "locked", "reconnecting", "old run"):  # no error toast, and the pruned runs are gone
        assert trouble not in screen, screen
    steps = {q: states[q]["steps"] for q in queued}
    assert all(n == 3 for n in steps.values()), steps
    assert call_count(log) == sum(steps.values())  # not one call bought twice
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # The workers' commits after the vacuum went to the -wal (at most 4 MB on disk: journal_size_limit);
    # once everything is quiet a checkpoint folds it in, and the pruned space stays given back.
    assert os.path.getsize(f"{db}-wal") <= 4 * 1024 * 1024 + 64 * 1024 if os.path.exists(f"{db}-wal") else True
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert _disk_bytes(db) < size_before / 2


def dashboard_alive(dashboard) -> bool:
    try:
        os.kill(dashboard.pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_run_list_drops_runs_pruned_by_another_process(db_target, store, monkeypatch, anyio_backend):
    from dayflow_tui.tui.app import DayflowApp
    from dayflow_tui.tui.widgets.run_table import RunTable

    from ..tui_helpers import SIZE, screen_text, settle, wait_for

    monkeypatch.setenv("DAYFLOW_FAKE_NOW", clock.iso(clock.now() - timedelta(days=60)))
    old = [run_brief(store, client=CountingClient(), user_msg=f"old brief {i}").run_id for i in range(3)]
    monkeypatch.delenv("DAYFLOW_FAKE_NOW")
    new = [run_brief(store, client=CountingClient()).run_id for _ in range(2)]
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(RunTable)
        assert table.total == 5
        pruned = dayflow("prune", "--older-than", "30d", db=db_target)
        assert pruned.returncode == 0, pruned.stderr
        await wait_for(pilot, lambda: table.total == 2)
        assert sorted(table.row(i).id for i in range(table.total)) == sorted(new)
        assert not any(run_id in screen_text(app) for run_id in old)
