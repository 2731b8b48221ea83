"""The run list at scale (#17): End/G reads the end of the list backwards instead of every run before it,
paging continues up or down from wherever the rows are, a jump lands in the middle, and the status index
serves a status filter in the list's order. Both backends; the pages are small so a few thousand runs
stand in for a million."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from peewee import fn

from dayflow_tui.store import open_store
from dayflow_tui.store.models import Run
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.views.run_list import JUMP_PAGES, RunFilter, RunListModel
from dayflow_tui.tui.widgets.run_table import RunTable

from ..tui_helpers import SIZE, screen_text, settle, wait_for

PAGE = 40
START = datetime(2025, 1, 1, tzinfo=timezone.utc)


def _stamp(i: int) -> str:
    return (START + timedelta(seconds=i)).isoformat(timespec="microseconds")


def bulk_runs(store, count: int, *, status_of=lambda i: "failed" if i % 7 == 3 else "done") -> list[str]:
    """``count`` runs, one a second (run ``i`` newer than ``i - 1``); returns their ids newest first."""
    rows = [dict(id=f"bulk-{i:05d}", user_msg=f"bulk run {i}", status=status_of(i), model="offline",
                 created_at=_stamp(i), updated_at=_stamp(i)) for i in range(count)]
    with store.db.atomic():
        for start in range(0, count, 500):
            Run.insert_many(rows[start:start + 500]).execute()
    return [row["id"] for row in reversed(rows)]


class CountingStore:
    """The store, counting the rows ``list_runs`` hands back (what paging read)."""

    def __init__(self, store) -> None:
        self._store = store
        self.rows_read = 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    def list_runs(self, **kwargs):
        found = self._store.list_runs(**kwargs)
        self.rows_read += len(found)
        return found


def _shown_ids(window, indices) -> list[str | None]:
    return [run.id if (run := window.row(i)) is not None else None for i in indices]


def test_end_reads_one_page_backwards_and_paging_up_continues_from_there(store):
    expected = bulk_runs(store, 3000)
    counting = CountingStore(store)
    model = RunListModel(counting, page=PAGE)
    window = model.reload(RunFilter())
    assert window.total == 3000 and window.offset == 0
    counting.rows_read = 0
    window = model.load_until(window.total - 1)
    assert counting.rows_read <= PAGE  # one page, not the 2,960 runs above it
    assert window.offset == 3000 - len(window.rows) and window.exhausted
    assert window.row(2999).id == expected[2999] == "bulk-00000"
    assert _shown_ids(window, range(3000 - PAGE, 3000)) == expected[-PAGE:]
    assert window.row(100) is None  # the top is no longer held
    # Up a few pages: keyset reads upwards, contiguous with what was there.
    target = 3000 - 3 * PAGE
    window = model.load_until(target)
    assert window.offset <= target and _shown_ids(window, range(target, 3000)) == expected[target:]
    assert model.load_until(2999) is None  # still loaded


def test_every_row_is_reached_in_order_whichever_way_the_list_is_walked(store):
    # Waiting runs are pinned on top: the jumps and upward pages must leave them out and join them again.
    expected = bulk_runs(store, 1500, status_of=lambda i: "waiting" if i in (5, 700, 1400) else "done")
    pinned = [rid for rid in expected if int(rid[5:]) in (5, 700, 1400)]
    order = pinned + [rid for rid in expected if rid not in pinned]
    model = RunListModel(store, page=PAGE)
    window = model.reload(RunFilter())
    assert _shown_ids(window, range(3)) == pinned
    model.load_until(1499)  # End
    seen: dict[int, str] = {}
    for index in range(1499, -1, -1):  # up, row by row, as PgUp and k would ask
        model.load_until(index)
        seen[index] = model.window.row(index).id
    assert [seen[i] for i in range(1500)] == order
    assert model.window.offset == 0 and _shown_ids(model.window, range(3)) == pinned  # back at the top
    # A jump into the middle (from a fresh list: far below its first page), then down to the end and up
    # from the middle to the top.
    model = RunListModel(store, page=PAGE)
    model.reload(RunFilter())
    middle = 750
    window = model.load_until(middle)
    assert window.offset > PAGE and window.row(middle).id == order[middle]
    for index in list(range(middle, 1500)) + list(range(middle, -1, -1)):
        model.load_until(index)
        assert model.window.row(index).id == order[index]
    assert model.window.offset == 0


def test_a_run_created_while_the_end_is_shown_moves_the_rows_down_by_one(store, db_target):
    expected = bulk_runs(store, 2000)
    model = RunListModel(store, page=PAGE)
    model.reload(RunFilter())
    window = model.load_until(1999)
    offset = window.offset
    other = open_store(db_target)  # another process's commit, as the dashboard sees one
    other.create_run("a new run", model="offline", run_id="new-run-0001", status="done")
    other.close()
    window = model.poll(keep=expected[-1])
    assert window is not None and window.total == 2001 and window.offset == offset + 1
    assert window.row(2000).id == expected[-1]  # the oldest run is still the last row
    # An old run far above the rows shown changes (another process finished it): nothing moves.
    other = open_store(db_target)
    other.finish_run(expected[5], "failed", error="late")
    other.close()
    window = model.poll(keep=expected[-1])
    assert window is not None and window.total == 2001 and window.offset == offset + 1
    assert window.row(2000).id == expected[-1] and window.row(1000) is None  # still at the end, top not read


def test_the_status_filter_pages_to_its_end_in_list_order(store):
    expected = bulk_runs(store, 2100)
    failed = [rid for rid in expected if int(rid[5:]) % 7 == 3]
    counting = CountingStore(store)
    model = RunListModel(counting, page=PAGE)
    window = model.reload(RunFilter(status="failed"))
    assert window.total == len(failed) == 300
    assert _shown_ids(window, range(PAGE)) == failed[:PAGE]
    counting.rows_read = 0
    window = model.load_until(window.total - 1)
    assert counting.rows_read <= PAGE
    assert _shown_ids(window, range(300 - PAGE, 300)) == failed[-PAGE:]


def test_status_counts_match_a_group_by(store):
    bulk_runs(store, 700, status_of=lambda i: ("done", "failed", "queued", "budget", "waiting")[i % 5])
    grouped = {status: n for status, n in Run.select(Run.status, fn.COUNT(Run.id)).group_by(Run.status).tuples()}
    assert store.count_by_status() == grouped


def test_a_status_filter_reads_the_status_index_in_list_order(db_path):
    store = open_store(db_path)
    bulk_runs(store, 300)
    sql, params = (Run.select().where(Run.status == "failed")
                   .order_by(Run.created_at.desc(), Run.id.desc()).limit(200).sql())
    plan = " ".join(str(row) for row in store.db.execute_sql("EXPLAIN QUERY PLAN " + sql, params).fetchall())
    assert "runs_status_created_at_id" in plan and "TEMP B-TREE" not in plan  # no sort of every match
    store.close()


def test_an_older_database_gets_the_status_index_in_list_order(db_path):
    store = open_store(db_path)
    store.db.execute_sql('DROP INDEX "runs_status_created_at_id"')
    store.db.execute_sql('CREATE INDEX "runs_status" ON "runs" ("status")')
    store.db.execute_sql("PRAGMA user_version = 9")
    store.close()
    reopened = open_store(db_path)
    names = {row[0] for row in reopened.db.execute_sql(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'").fetchall()}
    assert "runs_status_created_at_id" in names and "runs_status" not in names
    reopened.close()


@pytest.mark.anyio
async def test_end_in_the_dashboard_shows_the_oldest_run_without_reading_the_list(store, anyio_backend):
    expected = bulk_runs(store, 2500)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(RunTable)
        await pilot.press("G")
        await wait_for(pilot, lambda: table.cursor == 2499 and table.current is not None)
        await settle(pilot)
        assert table.current.id == "bulk-00000"
        assert len(table.window.rows) < 1000  # the end, read backwards: not the 2,500 runs above it
        await wait_for(pilot, lambda: "bulk-00000" in screen_text(app))
        for _ in range(12):
            await pilot.press("pageup")
        await wait_for(pilot, lambda: table.current is not None and "  …" not in screen_text(app))
        assert table.current.id == expected[table.cursor]
        await pilot.press("g")
        await wait_for(pilot, lambda: table.cursor == 0 and table.current is not None)
        assert table.current.id == expected[0]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def test_the_header_counts_a_run_interrupted_when_its_owner_dies_without_a_commit(store):
    import subprocess
    import sys

    from dayflow_tui import clock
    from dayflow_tui import store as store_module

    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = store.create_run("held", model="offline", run_id="run-held-0001", status="done")
        Run.update(owner_host=store_module.HOSTNAME, owner_pid=owner.pid,
                   owner_started=store_module.process_start_time(owner.pid), lease_token="f" * 32,
                   heartbeat_at=clock.iso(clock.now()), status="running").where(Run.id == run.id).execute()
        model = RunListModel(store, page=PAGE)
        window = model.reload(RunFilter())
        assert window.counts == {"running": 1}
        assert model.poll(keep=None) is None  # nothing committed, nobody died: nothing to redraw
        owner.kill()  # dies between two commits: no row changes
        owner.wait()
        window = model.poll(keep=None)
        assert window is not None and window.counts == {"interrupted": 1}
        assert model.poll(keep=None) is None
    finally:
        owner.kill()
