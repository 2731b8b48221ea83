"""Toasts carry run ids and errors from the database: they are shown as text, never as markup (#17)."""

from __future__ import annotations

import pytest

from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp

from ..tui_helpers import SIZE, select_loaded, settle, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_a_hostile_run_id_in_a_toast_is_text(store):
    hostile = "[@click=app.quit]q[/] [bold]x"
    demo_data.done_run(store, hostile, demo_data.BASE_TIME)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await select_loaded(pilot, hostile)
        await pilot.press("r")  # a done run: the toast says why it cannot be resumed, naming the run
        await wait_for(pilot, lambda: any("cannot be resumed" in n.message for n in app._notifications))
        toast = next(n for n in app._notifications if "cannot be resumed" in n.message)
        assert hostile in toast.message and toast.markup is False  # drawn as text, brackets and all
        # Every toast the dashboard raises is text unless it says otherwise.
        app.notify("[bold]plain[/]")
        assert list(app._notifications)[-1].markup is False
        assert app.is_running
