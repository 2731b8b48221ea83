"""The dashboard's parts that need no screen: the step buffer, the store queries it added, the stylesheets."""

from __future__ import annotations

import threading
import time

import pytest

from dayflow_tui.agent.events import StepEvent
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import STYLE_FILES, DayflowApp, styles_dir
from dayflow_tui.tui.messages import StepCommitted
from dayflow_tui.tui.step_buffer import StepBuffer


def _event(run_id: str, n: int, phase: str = "response") -> StepEvent:
    return StepEvent(run_id, n, phase, "tool_use", [], None, 1, 1, n, n)


def test_step_buffer_coalesces_a_burst_into_one_message():
    posted: list[StepCommitted] = []
    buffer = StepBuffer(posted.append, window=0.2)
    for n in range(1, 4):
        buffer.add(_event("r1", n))
    buffer.flush()
    assert len(posted) == 1 and [e.n for e in posted[0].events] == [1, 2, 3]
    buffer.flush()
    assert len(posted) == 1  # nothing buffered, nothing posted


def test_step_buffer_delivers_a_lone_event_without_a_flush():
    delivered = threading.Event()
    posted: list[StepCommitted] = []

    def post(message):
        posted.append(message)
        delivered.set()

    buffer = StepBuffer(post, window=0.05)
    started = time.monotonic()
    buffer.add(_event("r1", 1, "tools"))
    assert delivered.wait(10), "a lone event must reach the UI without waiting for the next one"
    assert time.monotonic() - started >= 0.04
    assert posted[0].run_id == "r1" and posted[0].events[0].phase == "tools"


def test_count_runs_pages_with_the_same_filters_as_list_runs(store):
    demo_data.many_runs(store, 30)
    demo_data.failed_run(store, "run-failed-01", demo_data.BASE_TIME)
    assert store.count_runs() == 31
    assert store.count_runs(status=["failed"]) == 1 == len(store.list_runs(status=["failed"]))
    assert store.count_runs(search="bulk run 2") == 11 == len(store.list_runs(search="bulk run 2", limit=100))
    assert store.count_runs(search="overloaded") == 1  # the error text is searched too
    pages, before = [], None
    while True:
        page = store.list_runs(limit=7, before=before)
        if not page:
            break
        pages.extend(page)
        before = (page[-1].created_at, page[-1].id)
    assert len(pages) == 31 and len({r.id for r in pages}) == 31


def test_steps_from_n_returns_the_tail(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    assert [s.n for s in store.steps("run-done-0001")] == [1, 2, 3]
    assert [s.n for s in store.steps("run-done-0001", from_n=2)] == [2, 3]


def test_every_stylesheet_is_found():
    assert all((styles_dir() / name).is_file() for name in STYLE_FILES)
    assert all(path.is_file() for path in DayflowApp.CSS_PATH)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_command_palette_starts_a_new_run(store, anyio_backend):
    from ..conftest import CountingClient

    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
        await pilot.press(*"new run")
        await pilot.pause(0.5)
        await pilot.press("enter")
        deadline = time.monotonic() + 30
        while client.calls < 3 or app.is_driving:
            assert time.monotonic() < deadline
            await pilot.pause(0.05)
    assert [r.status for r in store.list_runs()] == ["done"]
