"""Helpers shared by the dashboard tests (imported by tests/test_tui_*.py)."""

from __future__ import annotations

import io
import itertools
import sys
import threading
import time
from pathlib import Path

from rich.console import Console

from dayflow_tui.agent.offline import OfflineClient
from dayflow_tui.tui.pilot_support import wait_until

TUI_BIN = Path(sys.executable).parent / "dayflow-tui"
SIZE = (120, 36)


def screen_text(app) -> str:
    """What the terminal shows right now, as plain text (no colours)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens,
                                                       simplify=True))
    return console.export_text()


async def wait_for(pilot, condition, timeout: float = 30.0, step: float = 0.05) -> None:
    """Let the app run until ``condition()`` holds (generous: the machines are shared and slow)."""
    try:
        await wait_until(pilot, condition, timeout=timeout, step=step)
    except TimeoutError as exc:
        # What the screen showed when the wait gave up is what a reader of a failed CI log needs.
        try:
            shown = screen_text(pilot.app)
        except Exception as render_error:  # noqa: BLE001 - the diagnosis must not hide the failure
            shown = f"(screen could not be rendered: {render_error!r})"
        raise AssertionError(f"{exc}\nscreen ({type(pilot.app.screen).__name__}):\n{shown}") from None


def reads_done(app) -> bool:
    """The dashboard's reader has answered everything asked of it, and the run list has its rows."""
    from dayflow_tui.tui.widgets.run_table import RunTable

    from dayflow_tui.tui.widgets.run_preview import RunPreview

    if not app.reader.idle():
        return False
    tables = app.screen.query(RunTable)
    previews = app.screen.query(RunPreview)
    if previews and previews.first().display and not previews.first().settled:
        return False
    return not tables or tables.first().loaded_once


async def settle(pilot) -> None:
    """Wait until the reads the screen asked for are answered and applied."""
    await wait_for(pilot, lambda: reads_done(pilot.app))
    await pilot.pause()
    await wait_for(pilot, lambda: reads_done(pilot.app))


async def select_loaded(pilot, run_id: str) -> None:
    """Put the run list's cursor on ``run_id`` once the reader has loaded its row."""
    from dayflow_tui.tui.widgets.run_table import RunTable

    def loaded() -> bool:
        tables = pilot.app.screen.query(RunTable)
        return bool(tables) and run_id in tables.first().window.positions

    await wait_for(pilot, loaded)
    pilot.app.screen.query_one(RunTable).select_run(run_id)


async def open_run(pilot, run_id: str):
    """Open ``run_id`` from the run list, as a user would, and wait for its transcript to be read."""
    from dayflow_tui.tui.screens.transcript import TranscriptScreen

    await select_loaded(pilot, run_id)
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, TranscriptScreen) and pilot.app.screen.run)
    return pilot.app.screen


def footer_ready(app) -> bool:
    """The footer has drawn its keys (it rebuilds itself after a screen change)."""
    return bool(app.screen.query("FooterKey"))


class SteadyTimer:
    """Stands in for the driver's ``time`` module (``agent.driver``): every model call takes exactly 700 ms."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def monotonic(self) -> float:
        return next(self._ticks) * 0.7


class GateClient:
    """The offline model whose calls after the first ``free`` wait until the app stops running.

    Holds a resume "in progress" for a snapshot, then lets the worker finish
    cleanly when the app shuts down (the loop sees the cancel and stops).
    """

    def __init__(self, free: int) -> None:
        self._offline = OfflineClient(delay=0)
        self.free = free
        self.calls = 0
        self.waiting = threading.Event()
        self.app = None
        self.messages = self

    def create(self, **request):
        self.calls += 1
        if self.calls > self.free:
            self.waiting.set()
            deadline = time.monotonic() + 60
            while self.app is not None and self.app.is_running and time.monotonic() < deadline:
                time.sleep(0.02)
        return self._offline.messages.create(**request)
