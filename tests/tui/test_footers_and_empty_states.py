"""Every screen and dialog says its own keys in a footer that fits, and every filter that finds nothing says
what was filtered and how to widen it (issue #30). Driven through Pilot at 80x24 and 160x50."""

from __future__ import annotations

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.widgets.fitting_footer import FittingFooter, key_width

from ..tui_helpers import open_run, screen_text, select_loaded, settle, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def footer_keys(app) -> list[str]:
    footers = app.screen.query(FittingFooter)
    return [key.key_display or key.key for key in footers.first().query("FooterKey")] if footers else []


def fits(app) -> bool:
    footer = app.screen.query_one(FittingFooter)
    keys = list(footer.query("FooterKey"))
    return bool(keys) and sum(key_width(k, footer.compact) for k in keys) <= app.size.width


async def shows_keys(pilot, *keys: str) -> None:
    """The screen on top has a footer of its own, it fits, and it offers ``keys``."""
    app = pilot.app
    await wait_for(pilot, lambda: bool(app.screen.query(FittingFooter)) and fits(app)
                   and all(key in footer_keys(app) for key in keys))


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_every_screen_and_dialog_has_a_footer_with_its_own_keys(tmp_path, size):
    store = open_store(str(tmp_path / "keys.db"))
    lease = demo_data.every_status(store)
    demo_data.waiting_run(store, "run-wait-0001", demo_data.BASE_TIME + demo_data.timedelta(hours=3))
    app = DayflowApp(store)
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            await shows_keys(pilot, "f", "/")
            for key, expected in (("c", ("⏎", "space", "esc")), ("question_mark", ("esc",)), ("slash", ("esc",)),
                                  ("t", ("esc", "/"))):
                await pilot.press(key)
                await shows_keys(pilot, *expected)
                await pilot.press("escape")
                await shows_keys(pilot, "f")
            await select_loaded(pilot, "run-done-0001")
            await pilot.press("X")
            await shows_keys(pilot, "esc")
            assert "Remove run run-done-0001?" in screen_text(app)
            await pilot.press("escape")
            await open_run(pilot, "run-wait-0001")
            await shows_keys(pilot, "space", "a", "A", "d", "E")
            for key, expected in (("A", ("esc",)), ("d", ("esc",)), ("E", ("esc", "^e", "^s")), ("F", ("esc",))):
                await pilot.press(key)
                await shows_keys(pilot, *expected)
                await pilot.press("escape")
                await shows_keys(pilot, "a")
    finally:
        store.release(lease)
        store.close()


async def test_every_filter_that_finds_nothing_says_so_and_how_to_widen_it(tmp_path):
    store = open_store(str(tmp_path / "empty.db"))
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("f", "f")  # done, then running: none
            await wait_for(pilot, lambda: "No runs in status running." in screen_text(app))
            await pilot.press("escape", "slash")
            for ch in "zzqx":
                await pilot.press(ch)
            await wait_for(pilot, lambda: "No matches for 'zzqx'" in screen_text(app))
            for _ in "zzqx":
                await pilot.press("backspace")
            for ch in "status:budget":
                await pilot.press(ch)
            await wait_for(pilot, lambda: "No budget runs." in screen_text(app))
            await pilot.press("escape", "t", "slash")
            for ch in "zzqx":
                await pilot.press(ch)
            await wait_for(pilot, lambda: "No tasks match 'zzqx'" in screen_text(app))
    finally:
        store.close()
