"""Search in the dashboard, driven through Pilot on both backends, and snapshots of what it shows."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import Collapsible, Input, OptionList

from dayflow_tui.agent import driver
from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens import search as search_screen
from dayflow_tui.tui.screens.run_list import RunListScreen
from dayflow_tui.tui.screens.search import SearchableTranscript, SearchScreen

from ..tui_helpers import SIZE, SteadyTimer, footer_ready, screen_text, select_loaded, settle, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


class SearchSpy:
    """Wraps ``store.search``: which threads searched, and for which words."""

    def __init__(self, store) -> None:
        self.calls: list[tuple[str, bool]] = []
        self._search = store.search
        store.search = self

    def __call__(self, query, **options):
        self.calls.append((query.source, threading.current_thread() is threading.main_thread()))
        return self._search(query, **options)


async def type_text(pilot, text: str) -> None:
    for ch in text:
        await pilot.press("space" if ch == " " else ch)


def searched(app) -> bool:
    screen = app.screen
    return isinstance(screen, SearchScreen) and "hit" in str(screen.query_one("#search-status").content)


def options_text(option_list: OptionList) -> list[str]:
    return [str(option_list.get_option_at_index(i).prompt) for i in range(option_list.option_count)]


async def test_search_as_you_type_then_the_match_then_back_where_you_were(store, monkeypatch):
    # A loaded machine can take longer than the real 250 ms pause between two key presses of one burst;
    # a longer pause keeps the burst one burst (what is checked is that a burst is searched once).
    monkeypatch.setattr(search_screen, "DEBOUNCE_S", 1.5)
    lease = demo_data.every_status(store)
    demo_data.hostile_run(store, "run-hostile-1", demo_data.BASE_TIME + demo_data.timedelta(hours=1))
    spy = SearchSpy(store)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await select_loaded(pilot, "run-failed-01")
            table = app.screen.query_one("RunTable")
            row_before = table.cursor
            await pilot.press("slash")
            assert isinstance(app.screen, SearchScreen)
            await type_text(pilot, "calend")  # a prefix: the word being typed is not finished
            await wait_for(pilot, lambda: searched(app))
            results = app.screen.query_one("#search-results", OptionList)
            prompts = options_text(results)
            # One entry per run with a hit, newest run first, each with its count and its best place.
            assert [p.split()[0] for p in prompts] == ["run-live-0001", "run-queued-01", "run-crash-001",
                                                      "run-failed-01", "run-budget-01", "run-done-0001"]
            # Each run named by its title after where it matched (views.titles: here made from the task).
            assert prompts[1].startswith("run-queued-01  … queued  1 hit  task  ·  Read my inbox, calendar and")
            assert "\n    Read my inbox, calendar" in prompts[1]
            assert prompts[2].startswith("run-crash-001  ⚠ interrupted  3 hits  step 1 · tool result · read_inbox")
            # Typed in one burst: one search (and one for runs whose id starts so), on a worker thread, never
            # on the UI thread.
            assert spy.calls == [("calend", False), ("run:calend in:task", False)]

            await pilot.press(*["backspace"] * 6)
            await type_text(pilot, "priya")
            await wait_for(pilot, lambda: searched(app) and ("priya", False) in spy.calls)
            assert all(not on_ui for _words, on_ui in spy.calls)
            assert [p.split()[0] for p in options_text(results)] == ["run-crash-001", "run-failed-01",
                                                                    "run-budget-01", "run-done-0001"]
            await pilot.press("down", "down", "down")  # the list moves while the words stay in the field
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, SearchableTranscript) and app.screen.matches)
            screen = app.screen
            assert screen.run_id == "run-done-0001"
            assert [(h.step, h.column, h.tool) for h in screen.matches] == [
                (1, "result", "read_inbox"), (2, "args", "create_task"), (2, "result", "create_task"),
                (3, "final", None)]
            steps = screen.query_one("#steps", OptionList)

            def on_step() -> str:
                return steps.get_option_at_index(steps.highlighted).id

            # It opens at the run's best hit (the newest place holding the most of the query): the brief.
            assert screen.match_index == 3 and on_step() == "step-3"
            assert str(screen.query_one("#match-bar").content).startswith("match 4 of 4  step 3 · final  …")
            await pilot.press("n")  # wraps around to the first
            await wait_for(pilot, lambda: screen.match_index == 0 and on_step() == "step-1")
            # The payloads that hold the word (the inbox, both calendars: a 1:1 with Priya) are unfolded, the
            # tasks' stays folded; the view scrolls to the first.
            await wait_for(pilot, lambda: [c.collapsed for c in screen.query(Collapsible)] == [False, False, False,
                                                                                                True])
            await wait_for(pilot, lambda: "Priya" in screen_text(app))
            await pilot.press("N", "N")
            await wait_for(pilot, lambda: screen.match_index == 2 and on_step() == "step-2")
            assert str(screen.query_one("#match-bar").content).startswith(
                "match 3 of 4  step 2 · tool result · create_task  …")

            await pilot.press("escape")  # back to the results, as they were
            await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
            assert app.screen.query_one("#search-query", Input).value == "priya"
            await pilot.press("escape")  # back to the list, where it was
            await wait_for(pilot, lambda: isinstance(app.screen, RunListScreen))
            assert app.screen.query_one("RunTable").cursor == row_before
            assert app.screen.query_one("RunTable").current.id == "run-failed-01"
    finally:
        store.release(lease)
    assert all(not on_ui for _words, on_ui in spy.calls)


async def test_slash_in_a_transcript_searches_that_run(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    demo_data.done_run(store, "run-done-0002", demo_data.BASE_TIME + demo_data.timedelta(minutes=5))
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await select_loaded(pilot, "run-done-0001")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchableTranscript) and app.screen.run)
        screen = app.screen
        await pilot.press("slash")
        await type_text(pilot, "dentist")
        await wait_for(pilot, lambda: screen.matches)
        assert {hit.run_id for hit in screen.matches} == {"run-done-0001"}  # this run only
        assert [(hit.step, hit.label) for hit in screen.matches] == [(1, "tool result"), (3, "final")]
        await pilot.press("enter")  # done typing: the keys move between matches again
        await pilot.press("n")
        await wait_for(pilot, lambda: screen.match_index == 1)
        steps = screen.query_one("#steps", OptionList)
        assert steps.get_option_at_index(steps.highlighted).id == "step-3"
        await pilot.press("escape")  # a search made here: Escape clears it first
        await wait_for(pilot, lambda: not screen.matches)
        assert not screen.query_one("#match-bar").display
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, RunListScreen))


async def test_a_bad_query_says_why_and_keeps_the_screen(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        await type_text(pilot, 'in:nowhere "open')
        await wait_for(pilot, lambda: "unclosed quote" in str(app.screen.query_one("#search-status").content))
        await pilot.press("backspace", *["backspace"] * 5)
        await type_text(pilot, "today")
        await wait_for(pilot, lambda: "unknown place" in str(app.screen.query_one("#search-status").content))


# -- snapshots (plain def: snap_compare runs its own loop) ---------------------------------------------


@pytest.fixture
def steady(monkeypatch):
    monkeypatch.setenv("DAYFLOW_FAKE_NOW", demo_data.SCREEN_TIME)
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")
    monkeypatch.setattr(driver, "time", SteadyTimer())


@pytest.fixture
def snap_store(db_path, steady):
    store = open_store(db_path)
    lease = demo_data.every_status(store)
    demo_data.hostile_run(store, "run-hostile-1", demo_data.BASE_TIME + demo_data.timedelta(hours=1))
    yield store
    store.release(lease)
    store.close()


def _search_for(text: str, *, open_first: bool = False):
    async def run_before(pilot):
        await pilot.press("slash")
        await type_text(pilot, text)
        # The answer to the whole text, not to a prefix typed on the way (each keystroke searches).
        await wait_for(pilot, lambda: searched(pilot.app) and pilot.app.screen.search_query is not None
                       and pilot.app.screen.search_query.source.strip() == text)
        if open_first:
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(pilot.app.screen, SearchableTranscript)
                           and pilot.app.screen.matches)
            await pilot.pause(0.3)
        await wait_for(pilot, lambda: footer_ready(pilot.app))
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
    return run_before


def test_snapshot_search_results(snap_compare, snap_store):
    assert snap_compare(DayflowApp(snap_store), terminal_size=SIZE, run_before=_search_for("mail"))


def test_snapshot_transcript_at_a_match(snap_compare, snap_store):
    assert snap_compare(DayflowApp(snap_store), terminal_size=SIZE,
                        run_before=_search_for("idempotency", open_first=True))


async def test_the_beginning_of_a_run_id_finds_that_run_first(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    demo_data.failed_run(store, "run-failed-01", demo_data.BASE_TIME + demo_data.timedelta(minutes=5))
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        await type_text(pilot, "run-fai")
        await wait_for(pilot, lambda: "by id" in str(app.screen.query_one("#search-status").content))
        results = app.screen.query_one("#search-results", OptionList)
        assert [p.split()[0] for p in options_text(results)] == ["run-failed-01"]
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchableTranscript) and app.screen.run)
        assert app.screen.run_id == "run-failed-01"
