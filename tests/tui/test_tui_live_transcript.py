"""A transcript following a live run (#17): each commit decodes only the steps read again, and the step
list changes in place (the step whose results arrived gets its new line; new steps are appended)."""

from __future__ import annotations

import pytest

from dayflow_tui.store import StepRecord, open_store
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.transcript import step_prompt

from ..tui_helpers import SIZE, open_run, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _step(store, run_id: str, n: int, *, results: bool = True, error: bool = False) -> None:
    blocks = [{"type": "text", "text": f"step {n}"},
              {"type": "tool_use", "id": f"toolu_{n:03d}", "name": "read_calendar", "input": {"range": "week"}}]
    store.append_step(run_id, StepRecord(n=n, stop_reason="tool_use", assistant=blocks, input_tokens=100 * n,
                                         output_tokens=10))
    if results:
        store.set_tool_results(run_id, n, [{"type": "tool_result", "tool_use_id": f"toolu_{n:03d}",
                                            "content": '{"error": {"code": "boom"}}' if error else '{"ok": true}',
                                            **({"is_error": True} if error else {})}])


async def _open_long_run(store, pilot, run_id: str):
    """A finished run of LONG_RUN_STEPS steps, opened from the list and read to its last step."""
    from dayflow_tui.tui.screens.transcript import LONG_RUN_STEPS

    store.create_run("long", model="offline", run_id=run_id, status="done")
    with store.db.atomic():
        for n in range(1, LONG_RUN_STEPS + 1):
            _step(store, run_id, n)
    screen = await open_run(pilot, run_id)
    await wait_for(pilot, lambda: screen.query_one("#steps").option_count == LONG_RUN_STEPS)
    return screen


async def _wait_freed(pilot, app, closed) -> None:
    """Wait for the settle that frees the closed screen; on failure, say what still holds it."""
    import gc

    try:
        await wait_for(pilot, lambda: not app.heap_to_settle and closed() is None)
    except AssertionError:
        kept = closed()
        holders = [type(r).__name__ for r in gc.get_referrers(kept)] if kept is not None else []
        raise AssertionError(f"settle pending: {app.heap_to_settle}; the closed screen is held by {holders}") from None


def _prompts(screen) -> list[str]:
    steps = screen.query_one("#steps")
    return [str(steps.get_option_at_index(i).prompt) for i in range(steps.option_count)]


async def test_new_steps_are_decoded_alone_and_listed_in_place(store, db_target):
    store.create_run("live", model="offline", run_id="run-live-0001", status="running")
    for n in (1, 2):
        _step(store, "run-live-0001", n)
    _step(store, "run-live-0001", 3, results=False)  # its tools are running
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_run(pilot, "run-live-0001")
        await wait_for(pilot, lambda: screen.query_one("#steps").option_count == 3)
        first_view = screen.views[0]
        await pilot.press("G")  # follow the newest step
        await wait_for(pilot, lambda: screen.query_one("#steps").highlighted == 2)
        assert "✖" not in _prompts(screen)[2]
        writer = open_store(db_target)  # another process's commits, as a driver makes them
        writer.set_tool_results("run-live-0001", 3, [{"type": "tool_result", "tool_use_id": "toolu_003",
                                                      "content": '{"error": {"code": "boom"}}', "is_error": True}])
        _step(writer, "run-live-0001", 4)
        writer.close()
        await wait_for(pilot, lambda: screen.query_one("#steps").option_count == 4)
        assert screen.views[0] is first_view  # not decoded again
        assert [view.n for view in screen.views] == [1, 2, 3, 4]
        assert _prompts(screen) == [str(step_prompt(view)) for view in screen.views]
        assert "✖" in _prompts(screen)[2]  # step 3's line changed in place: its result was an error
        assert [screen.query_one("#steps").get_option_at_index(i).id for i in range(4)] == [
            "step-1", "step-2", "step-3", "step-4"]
        assert screen.query_one("#steps").highlighted == 3  # following the newest step


async def test_a_long_transcript_is_frozen_out_of_full_collections_and_freed_when_closed(store):
    import gc
    import weakref

    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_long_run(store, pilot, "run-long-0001")
        await pilot.pause()
        views = screen.views
        assert gc.get_freeze_count() > 0
        assert not gc.is_tracked(views) or views not in gc.get_objects(generation=2)  # frozen, not walked
        closed = weakref.ref(screen)
        del screen, views
        await pilot.press("escape")
        await _wait_freed(pilot, app, closed)


async def test_a_closed_transcript_still_held_at_the_first_settle_is_freed_by_a_later_one(store):
    """A thread worker can hold a closed screen past its unmount; the settle then must not freeze it for good."""
    import asyncio
    import gc
    import weakref

    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_long_run(store, pilot, "run-long-0002")
        closed = weakref.ref(screen)
        held = [screen]  # as a read still running in a thread holds it
        del screen
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.heap_to_settle)  # unmounted
        await asyncio.sleep(2.5)  # the settle timer (1 s) has run with the screen still held
        held.clear()
        await _wait_freed(pilot, app, closed)
