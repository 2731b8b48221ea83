"""Snapshots of the screens issue #30 added, at 80x24 and 160x50: a waiting run's calls to decide, the
approve-all confirm, the column picker, the remove confirm, and the run list sorted by status.

Deterministic as ``test_tui_snapshots.py`` is (fixed ids, pinned clocks, no animation); looked at as PNG
before they were committed. Update with ``--snapshot-update`` and look again.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.columns import ColumnsDialog
from dayflow_tui.tui.screens.decide import ApproveAllDialog
from dayflow_tui.tui.screens.remove import RemoveDialog
from dayflow_tui.tui.widgets.pending_calls import PendingCalls
from dayflow_tui.tui.widgets.run_table import RunTable

from .test_tui_snapshots import _list_ready, steady_screen  # noqa: F401 - the autouse fixture, shared
from ..tui_helpers import footer_ready, select_loaded, wait_for

SIZES = [(80, 24), (160, 50)]


@pytest.fixture
def waiting_store(db_path, monkeypatch):
    monkeypatch.chdir("/")  # the remove dialog offers an archive in the current folder: the same path each time
    store = open_store(db_path)
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME + timedelta(minutes=5))
    demo_data.waiting_run(store, "run-wait-0001", demo_data.BASE_TIME)
    yield store
    store.close()


def _waiting_calls(*keys: str):
    async def run_before(pilot):
        await _list_ready(pilot)
        await select_loaded(pilot, "run-wait-0001")
        await pilot.press("enter")
        await wait_for(pilot, lambda: bool(pilot.app.screen.query(PendingCalls))
                       and len(pilot.app.screen.query_one(PendingCalls).calls) == 6)
        await pilot.press(*keys)
        await wait_for(pilot, lambda: footer_ready(pilot.app))
    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_waiting_calls_two_marked(snap_compare, waiting_store, size):
    assert snap_compare(DayflowApp(waiting_store), terminal_size=size,
                        run_before=_waiting_calls("space", "j", "j", "space"))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_approve_all_confirm(snap_compare, waiting_store, size):
    async def run_before(pilot):
        await _waiting_calls("A")(pilot)
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ApproveAllDialog) and footer_ready(pilot.app))
    assert snap_compare(DayflowApp(waiting_store), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_column_picker(snap_compare, waiting_store, size):
    async def columns(pilot):
        await _list_ready(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ColumnsDialog) and footer_ready(pilot.app))
    assert snap_compare(DayflowApp(waiting_store), terminal_size=size, run_before=columns)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_remove_confirm(snap_compare, waiting_store, size):
    async def remove(pilot):
        await _list_ready(pilot)
        await select_loaded(pilot, "run-done-0001")
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, RemoveDialog) and footer_ready(pilot.app))
    assert snap_compare(DayflowApp(waiting_store), terminal_size=size, run_before=remove)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_run_list_sorted_by_status(snap_compare, db_path, size):
    store = open_store(db_path)
    lease = demo_data.every_status(store)
    try:
        async def sorted_list(pilot):
            await _list_ready(pilot)
            await pilot.press("s", "s", "s")
            await wait_for(pilot, lambda: pilot.app.screen.query_one(RunTable).window.filter.sort == "status")
            await _list_ready(pilot)
        assert snap_compare(DayflowApp(store), terminal_size=size, run_before=sorted_list)
    finally:
        store.release(lease)
        store.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_workers_screen(snap_compare, waiting_store, size):
    """`w`: one worker alive holding two runs, one stale (killed: no beat for ten minutes), one stopped."""
    from dayflow_tui.store.models import Worker

    alive = waiting_store.register_worker(host="build-7", pid=4242, version="0.1.0", concurrency=4)
    waiting_store.worker_beat(alive, ["run-wait-0001", "run-done-0001"], 12)
    stale = waiting_store.register_worker(host="build-3", pid=977, version="0.1.0", concurrency=2)
    Worker.update(beat_at=waiting_store.db_now(-600), id="w-stale").where(Worker.id == stale).execute()
    stopped = waiting_store.register_worker(host="laptop", pid=31337, version="0.0.9", concurrency=1)
    waiting_store.worker_stopped(stopped, 3)
    Worker.update(id="w-alive").where(Worker.id == alive).execute()
    Worker.update(id="w-stopped").where(Worker.id == stopped).execute()

    async def run_before(pilot):
        await _list_ready(pilot)
        await pilot.press("w")
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "loaded", False))
        await wait_for(pilot, lambda: footer_ready(pilot.app))

    assert snap_compare(DayflowApp(waiting_store), terminal_size=size, run_before=run_before)
