"""``C`` cancels a run from the dashboard: a confirm naming the run, the cancel in a thread worker, the footer
offering ``C`` only where it applies (run list and transcript), and a snapshot of the confirm at 80x24."""

from __future__ import annotations

import threading

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.cancel import CancelDialog
from dayflow_tui.tui.widgets.fitting_footer import FittingFooter

from ..tui_helpers import footer_ready, open_run, reads_done, screen_text, select_loaded, settle, wait_for


def footer_actions(app) -> list[str]:
    return [key.action for key in app.screen.query_one(FittingFooter).query("FooterKey")]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
async def test_C_asks_then_cancels_in_a_worker_and_is_offered_only_where_it_applies(tmp_path, size):
    store = open_store(str(tmp_path / "cancel.db"))
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    demo_data.waiting_run(store, "run-wait-0001", demo_data.BASE_TIME)
    demo_data.queued_run(store, "run-queued-01", demo_data.BASE_TIME)
    threads = []
    cancel_run = store.cancel_run

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread())
        return cancel_run(*args, **kwargs)

    store.cancel_run = recorded
    app = DayflowApp(store)
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            await select_loaded(pilot, "run-done-0001")
            await wait_for(pilot, lambda: footer_ready(app) and "cancel_run" not in footer_actions(app))
            await pilot.press("C")  # a done run: nothing happens
            await pilot.pause(0.2)
            assert not isinstance(app.screen, CancelDialog)
            await select_loaded(pilot, "run-queued-01")
            await wait_for(pilot, lambda: footer_ready(app) and "cancel_run" in footer_actions(app))
            await wait_for(pilot, lambda: "C Cancel run" in screen_text(app))
            await pilot.press("C")
            await wait_for(pilot, lambda: isinstance(app.screen, CancelDialog))
            assert "Cancel run run-queued-01?" in screen_text(app)
            await pilot.press("escape")  # kept
            await wait_for(pilot, lambda: not isinstance(app.screen, CancelDialog))
            assert store.get_run("run-queued-01").status == "queued" and not threads
            await pilot.press("C")
            await wait_for(pilot, lambda: isinstance(app.screen, CancelDialog))
            await pilot.press(*"not needed", "enter")
            await wait_for(pilot, lambda: store.get_run("run-queued-01").status == "cancelled")
            assert threads and all(t is not threading.main_thread() for t in threads)
            run = store.get_run("run-queued-01")
            assert (run.cancelled_by, run.cancel_reason) == ("dashboard", "not needed")
            await wait_for(pilot, lambda: reads_done(app) and "cancel_run" not in footer_actions(app))
            await wait_for(pilot, lambda: "⊘ cancelled" in screen_text(app))
            # In a transcript: it applies to a waiting run (in the footer where there is room: at 80x24 a, D and
            # E take it, and C is in the help), and it cancels there too.
            await open_run(pilot, "run-wait-0001")
            await wait_for(pilot, lambda: footer_ready(app) and "approve" in footer_actions(app))
            assert app.screen.check_action("cancel_run", ()) is True
            assert ("cancel_run" in footer_actions(app)) == (size[0] >= 100), footer_actions(app)
            await pilot.press("C")
            await wait_for(pilot, lambda: isinstance(app.screen, CancelDialog))
            await pilot.press("enter")
            await wait_for(pilot, lambda: store.get_run("run-wait-0001").status == "cancelled")
            assert store.get_run("run-wait-0001").cancel_reason is None
            await wait_for(pilot, lambda: footer_ready(app) and "approve" not in footer_actions(app))
            assert app.screen.check_action("cancel_run", ()) is False and "cancel_run" not in footer_actions(app)
    finally:
        store.close()


def test_snapshot_the_cancel_confirm_at_80x24(snap_compare, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYFLOW_FAKE_NOW", demo_data.SCREEN_TIME)
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")
    store = open_store(str(tmp_path / "confirm.db"))
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    demo_data.queued_run(store, "run-queued-01", demo_data.BASE_TIME)

    async def run_before(pilot):
        await settle(pilot)
        await wait_for(pilot, lambda: "…" not in str(pilot.app.screen.query_one("#spend").render()))
        await select_loaded(pilot, "run-queued-01")
        await wait_for(pilot, lambda: footer_ready(pilot.app) and "cancel_run" in footer_actions(pilot.app))
        await pilot.press("C")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, CancelDialog))
        await wait_for(pilot, lambda: reads_done(pilot.app))
        await pilot.pause(0.2)

    try:
        assert snap_compare(DayflowApp(store), terminal_size=(80, 24), run_before=run_before)
    finally:
        store.close()
