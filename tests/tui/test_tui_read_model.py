"""The dashboard never touches the database on the UI thread (#17).

Every store method the app calls goes through a guard that records the
calls made on the main thread (where Textual's event loop runs). A user's
whole tour -- the live run list, the status filter, paging to the end of a
long list, a search, a transcript in every mode, a resume driven to its end,
a run waiting for approval -- must leave that record empty.
"""

from __future__ import annotations

import threading

import pytest

from dayflow_tui.agent import runs
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.views.reader import Reader
from dayflow_tui.views.run_list import RunFilter, RunListModel
from dayflow_tui.tui.screens.transcript import TranscriptScreen

from ..conftest import CountingClient
from ..tui_helpers import SIZE, open_run, screen_text, settle, wait_for


@pytest.fixture
def anyio_backend():
    return "asyncio"


class UIThreadGuard:
    """The store, with a note of every method called on the main thread."""

    def __init__(self, store) -> None:
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "on_ui_thread", [])

    def __getattr__(self, name: str):
        value = getattr(self._store, name)
        if not callable(value) or name.startswith("__"):
            return value

        def guarded(*args, **kwargs):
            if threading.current_thread() is threading.main_thread():
                self.on_ui_thread.append(name)
            return value(*args, **kwargs)

        return guarded

    def __setattr__(self, name: str, value) -> None:
        setattr(self._store, name, value)


@pytest.mark.anyio
async def test_a_whole_tour_of_the_dashboard_makes_no_store_call_on_the_ui_thread(store):
    lease = demo_data.every_status(store)
    demo_data.many_runs(store, 450)
    guarded = UIThreadGuard(store)
    client = CountingClient()
    app = DayflowApp(guarded, client_factory=lambda model: client)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            table = app.screen.query_one("RunTable")
            assert table.total == 456 and len(table.rows) < table.total
            await pilot.press("end")  # the last page is read off the UI thread
            await wait_for(pilot, lambda: table.current is not None and table.cursor == table.total - 1)
            await pilot.press("home", "f", "f", "f")  # status filters: done, running, interrupted
            await settle(pilot)
            assert table.filter.status == "interrupted" and table.total == 1
            await pilot.press("escape")
            await settle(pilot)
            await pilot.press("slash")
            for key in "brief":
                await pilot.press(key)
            await wait_for(pilot, lambda: app.screen.query_one("#search-results").option_count > 0)
            await app.workers.wait_for_complete()
            await pilot.press("escape")
            await settle(pilot)
            screen = await open_run(pilot, "run-crash-001")
            for key in ("v", "x", "v", "e", "dollar_sign", "j", "k"):
                await pilot.press(key)
                await settle(pilot)
            await pilot.press("r")
            await wait_for(pilot, lambda: screen.run is not None and screen.run.status == "done"
                           and not app.is_driving)
            await pilot.press("escape")
            await settle(pilot)
    finally:
        store.release(lease)
    assert isinstance(screen, TranscriptScreen)
    assert client.calls == 2  # the interrupted run's remaining steps: nothing bought twice
    assert guarded.on_ui_thread == [], sorted(set(guarded.on_ui_thread))


def test_the_run_list_model_builds_snapshots_that_never_change_under_the_reader(store):
    """Snapshots are frozen: a poll that merges a changed run builds a new one; the old one is unchanged."""
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    model = RunListModel(store, page=10)
    first = model.reload(RunFilter())
    assert [r.id for r in first.rows] == ["run-done-0001"] and first.total == 1
    assert model.poll(None) is None  # nothing committed since
    writer = threading.Thread(target=runs.queue_brief, args=(store,))  # another connection, as a worker's
    writer.start()
    writer.join()
    second = model.poll(None)
    assert second is not None and second.version > first.version and second.total == 2
    assert [r.id for r in first.rows] == ["run-done-0001"] and first.total == 1  # the old snapshot stays


def test_the_reader_coalesces_a_queue_of_polls_behind_a_slow_read(store):
    """A stalled read holds the reader; the polls asked for meanwhile collapse to one, run after it."""
    reader = Reader(store)
    gate, ran, answered = threading.Event(), [], threading.Event()

    def slow():
        gate.wait(10)
        return "slow"

    def poll(n):
        def job():
            ran.append(n)
            return n
        return job

    reader.submit("slow", slow, lambda result, error: None)
    for n in range(50):
        reader.submit("poll", poll(n), lambda result, error: answered.set())
    assert not reader.idle() and ran == []
    gate.set()
    assert answered.wait(10)
    assert ran == [49]  # only the newest poll ran
    reader.close()
