"""Snapshots of the dashboard (pytest-textual-snapshot). Plain ``def``: snap_compare runs its own loop.

Deterministic: each test builds its database with fixed run ids at pinned
clock times (``demo_data``), the clock on screen is pinned (DAYFLOW_FAKE_NOW),
model-call durations are fixed, the terminal is 120x36, cursors do not
blink and no worker is left running unless the snapshot is of a run in progress.
Update with ``pytest tests/tui/test_tui_snapshots.py --snapshot-update`` and review the SVGs.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from textual.widgets import OptionList
from ..tui_helpers import SIZE, GateClient, SteadyTimer, footer_ready, reads_done, select_loaded, wait_for

from dayflow_tui.agent import driver
from dayflow_tui.agent import runs
from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp


@pytest.fixture(autouse=True)
def steady_screen(monkeypatch):
    monkeypatch.setenv("DAYFLOW_FAKE_NOW", demo_data.SCREEN_TIME)
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")
    monkeypatch.setattr(driver, "time", SteadyTimer())


@pytest.fixture
def tui_store(db_path):
    store = open_store(db_path)
    yield store
    store.close()


def _spend_read(pilot) -> bool:
    """The run list's spend panel has its numbers (a thread worker reads them)."""
    panels = pilot.app.screen.query("#spend")
    return not panels or "…" not in str(panels.first().render())


async def _list_ready(pilot) -> None:
    await wait_for(pilot, lambda: _spend_read(pilot) and reads_done(pilot.app))


def _open_run(run_id: str):
    async def run_before(pilot):
        await _list_ready(pilot)
        await select_loaded(pilot, run_id)
        await pilot.press("enter")
        await wait_for(pilot, lambda: pilot.app.screen.query("#steps")
                       and pilot.app.screen.query_one("#steps", OptionList).option_count > 0)
        await wait_for(pilot, lambda: footer_ready(pilot.app))
    return run_before


def test_run_list_every_status(snap_compare, tui_store):
    lease = demo_data.every_status(tui_store)
    try:
        assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=_list_ready)
    finally:
        tui_store.release(lease)


def test_run_list_empty_database(snap_compare, tui_store):
    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=_list_ready)


def test_transcript_three_steps(snap_compare, tui_store):
    demo_data.done_run(tui_store, "run-done-0001", demo_data.BASE_TIME)
    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=_open_run("run-done-0001"))


def test_run_waiting_for_a_decision(snap_compare, tui_store):
    """The waiting run on top of the list, its count in the title, and its transcript at the step that waits."""
    demo_data.done_run(tui_store, "run-done-0001", demo_data.BASE_TIME + timedelta(minutes=5))
    demo_data.waiting_run(tui_store, "run-wait-0001", demo_data.BASE_TIME)
    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=_open_run("run-wait-0001"))


def test_diff_of_a_run_and_its_fork(snap_compare, tui_store):
    """Two runs side by side: the shared copies, the step a person changed, what followed."""
    from dayflow_tui.agent.offline import OfflineClient
    from dayflow_tui.store.tables.forks import ForkPlan

    demo_data.done_run(tui_store, "run-done-0001", demo_data.BASE_TIME)
    with demo_data.clock_at(demo_data.BASE_TIME + timedelta(minutes=5)):
        tui_store.fork_run("run-done-0001", ForkPlan(at=2, note="Mention the dentist."), run_id="run-fork-0001")
        runs.resume("run-fork-0001", store=tui_store, client=OfflineClient(delay=0))

    async def run_before(pilot):
        from dayflow_tui.tui.screens.time_travel import DiffScreen

        await _list_ready(pilot)
        await pilot.app.push_screen(DiffScreen("run-done-0001", "run-fork-0001"))
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, DiffScreen) and pilot.app.screen.diff is not None)
        await wait_for(pilot, lambda: footer_ready(pilot.app))
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=run_before)


def test_transcript_tool_error(snap_compare, tui_store):
    demo_data.hostile_run(tui_store, "run-hostile-1", demo_data.BASE_TIME)
    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=_open_run("run-hostile-1"))


def test_transcript_mcp_calls(snap_compare, tui_store):
    """Each MCP tool call names its server, and its recorded annotations with what they made of it."""
    demo_data.mcp_run(tui_store, "run-mcp-0001", demo_data.BASE_TIME)
    opened = _open_run("run-mcp-0001")

    async def run_before(pilot):
        await opened(pilot)
        await pilot.press("home")
        await wait_for(pilot, lambda: "MCP server counting" in str(pilot.app.screen.query(".tool-call-title")
                                                                   .first().render()))
    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=run_before)


def test_run_preview_mcp_servers_and_annotations(snap_compare, tui_store):
    """The run list's preview names the run's MCP server and, per tool, its annotations and what they made of it."""
    demo_data.mcp_run(tui_store, "run-mcp-0001", demo_data.BASE_TIME)

    async def run_before(pilot):
        await _list_ready(pilot)
        await select_loaded(pilot, "run-mcp-0001")
        await wait_for(pilot, lambda: "MCP counting" in str(pilot.app.screen.query_one("#preview-text").render()))
    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=run_before)


def test_resume_in_progress(snap_compare, tui_store):
    demo_data.interrupted_run(tui_store, "run-crash-001", demo_data.BASE_TIME, after_step=1)
    gate = GateClient(free=1)
    app = DayflowApp(tui_store, client_factory=lambda model: gate)
    gate.app = app
    opened = _open_run("run-crash-001")

    async def run_before(pilot):
        await opened(pilot)
        await pilot.press("r")
        screen = pilot.app.screen
        # Step 2 committed with its tool results, step 3's model call under way.
        await wait_for(pilot, lambda: gate.waiting.is_set() and len(screen.views) == 2
                       and screen.steps[-1][1] and screen.query_one("#live").display)
        await wait_for(pilot, lambda: footer_ready(pilot.app))

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


class _HeldMidStream(GateClient):
    """The offline model; after the first ``free`` calls, a reply streams its first ``held_at`` events and then
    holds until the app stops (a reply half-way in, for the snapshot)."""

    held_at = 14

    def create(self, **request):
        self.calls += 1
        events = self._offline.messages.create(**request)
        if self.calls <= self.free:
            return events

        def held():
            for number, event in enumerate(events):
                if number == self.held_at:
                    self.waiting.set()
                    deadline = time.monotonic() + 60
                    while self.app is not None and self.app.is_running and time.monotonic() < deadline:
                        time.sleep(0.02)
                yield event

        return held()


def test_reply_arriving_mid_stream(snap_compare, tui_store):
    """Step 2's reply half-way in: the live line shows its text and the tool call forming (issue #26)."""
    demo_data.interrupted_run(tui_store, "run-crash-001", demo_data.BASE_TIME, after_step=1)
    gate = _HeldMidStream(free=0)
    app = DayflowApp(tui_store, client_factory=lambda model: gate)
    gate.app = app
    opened = _open_run("run-crash-001")

    async def run_before(pilot):
        await opened(pilot)
        await pilot.press("r")
        live = pilot.app.screen.query_one("#live")
        await wait_for(pilot, lambda: gate.waiting.is_set() and "arriving" in str(live.render()))
        await pilot.pause(0.2)  # the last pieces' message (posted at most every 50 ms) is drawn
        await wait_for(pilot, lambda: footer_ready(pilot.app))

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_run_list_cost_column(snap_compare, tui_store, monkeypatch):
    """Dollars per run and the spend panel, with the offline model priced like a paid one (settings)."""
    monkeypatch.setenv("DAYFLOW_PRICES", '{"offline": {"input": 3, "output": 15}}')
    lease = demo_data.every_status(tui_store)
    try:
        assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=_list_ready)
    finally:
        tui_store.release(lease)


def test_resume_estimate_line(snap_compare, tui_store, monkeypatch):
    """An interrupted run's transcript: what pressing r will cost, warm and cold, and why."""
    monkeypatch.setenv("DAYFLOW_PRICES", '{"offline": {"input": 3, "output": 15}}')
    demo_data.interrupted_run(tui_store, "run-crash-001", demo_data.BASE_TIME, after_step=2)
    opened = _open_run("run-crash-001")

    async def run_before(pilot):
        await opened(pilot)
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#resume-estimate").display)

    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=run_before)


def test_help_screen(snap_compare, tui_store):
    demo_data.done_run(tui_store, "run-done-0001", demo_data.BASE_TIME + timedelta(minutes=1))
    async def run_before(pilot):
        await _list_ready(pilot)
        await pilot.press("question_mark")

    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=run_before)


# The layout from a small terminal to a large one: columns shrink by priority (a stopped run's reason stays,
# in the preview line when its column goes), the transcript's step list narrows, footers and help fit.
LAYOUT_SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40"),
                pytest.param((160, 50), id="160x50")]


@pytest.mark.parametrize("size", LAYOUT_SIZES)
def test_layout_run_list(snap_compare, tui_store, size):
    lease = demo_data.every_status(tui_store)
    try:
        assert snap_compare(DayflowApp(tui_store), terminal_size=size, run_before=_list_ready)
    finally:
        tui_store.release(lease)


@pytest.mark.parametrize("size", LAYOUT_SIZES)
def test_layout_transcript(snap_compare, tui_store, size):
    demo_data.failed_run(tui_store, "run-failed-01", demo_data.BASE_TIME)
    assert snap_compare(DayflowApp(tui_store), terminal_size=size, run_before=_open_run("run-failed-01"))


@pytest.mark.parametrize("size", LAYOUT_SIZES)
def test_layout_help(snap_compare, tui_store, size):
    demo_data.done_run(tui_store, "run-done-0001", demo_data.BASE_TIME)

    async def run_before(pilot):
        await _list_ready(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: bool(pilot.app.screen.query("#help-keys")))

    assert snap_compare(DayflowApp(tui_store), terminal_size=size, run_before=run_before)


def test_tasks_screen(snap_compare, tui_store):
    """``t``: the tasks with the run and step that made each (the sample tasks came with the file)."""
    demo_data.done_run(tui_store, "run-done-0001", demo_data.BASE_TIME)

    async def run_before(pilot):
        await _list_ready(pilot)
        await pilot.press("t")
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "loaded", False) and reads_done(pilot.app))
        await wait_for(pilot, lambda: footer_ready(pilot.app))

    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=run_before)


def test_json_view(snap_compare, tui_store):
    """``v``: the stored JSON block by block, highlighted; the second block folded from the keyboard."""
    demo_data.done_run(tui_store, "run-done-0001", demo_data.BASE_TIME)
    opened = _open_run("run-done-0001")

    async def run_before(pilot):
        await opened(pilot)
        await pilot.press("v")
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#raw").payloads != [])
        await pilot.press("right_square_bracket", "enter")
        await wait_for(pilot, lambda: footer_ready(pilot.app))

    assert snap_compare(DayflowApp(tui_store), terminal_size=SIZE, run_before=run_before)
