"""The tasks screen (``t``): every task with the run and step that made it, filtered as you type."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import OptionList

from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.search import SearchableTranscript
from dayflow_tui.tui.screens.tasks import TasksScreen, parse_filter

from ..tui_helpers import SIZE, screen_text, settle, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def listed(app) -> list[str]:
    options = app.screen.query_one("#task-list", OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


def shows(app, count_line: str) -> bool:
    return isinstance(app.screen, TasksScreen) and app.screen.loaded and count_line in screen_text(app)


def test_the_filter_words():
    assert parse_filter("") == parse_filter("   ")
    f = parse_filter("Budget done run:run-done")
    assert (f.text, f.done, f.run_prefix) == ("Budget", True, "run-done")
    assert parse_filter("open review").done is False
    assert parse_filter("run:").text == "run:"  # no prefix given: searched as a word


def test_task_origins_and_filters_in_the_store(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    tasks, total = store.find_tasks()
    made = [t for t in tasks if t.run_id == "run-done-0001"]
    assert total == len(tasks) and len(made) == 6
    origins = store.task_origins(tasks)
    assert {origins[t.id] for t in made} == {2}  # the brief's second step created every follow-up
    assert all(t.id not in origins for t in tasks if t.run_id is None)  # the sample tasks came with the file
    assert store.find_tasks(text="offsite")[1] == 1
    assert store.find_tasks(run_prefix="run-done")[1] == 6
    assert store.find_tasks(done=True)[1] == 0
    newest, total = store.find_tasks(limit=2)
    assert [t.id for t in newest] == sorted((t.id for t in tasks), reverse=True)[:2] and total == len(tasks)


async def test_t_lists_tasks_filters_and_opens_the_step_that_made_one(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    hostile = "[bold red]not markup[/] \x1b[31mnot a colour"
    store.create_task(idempotency_key="hostile-1", title=hostile, run_id=None)
    readers: list[bool] = []
    find = store.find_tasks

    def spy(**options):
        readers.append(threading.current_thread() is threading.main_thread())
        return find(**options)

    store.find_tasks = spy
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("t")
        await wait_for(pilot, lambda: shows(app, "10 tasks"))
        rows = listed(app)
        assert rows[0].startswith("○ [bold red]not markup[/] \\x1b[31mnot a colour")  # literal, escape defused
        assert "\x1b" not in screen_text(app)
        assert sum("run-done-0001 step 2" in row for row in rows) == 6
        assert sum("not from a run" in row for row in rows) == 4

        await pilot.press("slash")
        for ch in "offsite":
            await pilot.press(ch)
        await wait_for(pilot, lambda: shows(app, "1 task ·"))
        assert len(listed(app)) == 1 and "Offsite agenda" in listed(app)[0]
        await pilot.press("enter")  # the filter hands the keys back to the list
        await pilot.press("enter")  # open the run at the step that made the task
        await wait_for(pilot, lambda: isinstance(app.screen, SearchableTranscript) and app.screen.run)
        steps = app.screen.query_one("#steps", OptionList)
        await wait_for(pilot, lambda: steps.highlighted is not None
                       and steps.get_option_at_index(steps.highlighted).id == "step-2")
        await wait_for(pilot, lambda: "Step 2" in screen_text(app) and "create_task" in screen_text(app))
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, TasksScreen))
        assert len(listed(app)) == 1  # back where it was, filter kept
    assert readers and not any(readers)  # every read on the reader thread, never the UI thread


async def test_a_task_not_made_by_a_run_says_so(store):
    app = DayflowApp(store)  # a fresh file holds only the sample tasks
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("t")
        await wait_for(pilot, lambda: shows(app, "3 tasks"))
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("not made by a run" in str(n.message) for n in app._notifications))
        assert isinstance(app.screen, TasksScreen)
        await pilot.press("slash", *"nothing-matches-this")
        await wait_for(pilot, lambda: shows(app, "No tasks match 'nothing-matches-this': words of a title"))


async def test_every_task_is_reached_a_page_at_a_time_as_the_cursor_reaches_the_end(store):
    from dayflow_tui.store import Task
    from dayflow_tui.tui.screens.tasks import SHOWN

    with store.bound(), store.db.atomic():
        Task.insert_many([{"idempotency_key": f"bulk-{i}", "title": f"bulk task {i}", "created_at": "2026-12-01T09:00:00Z"}
                          for i in range(2 * SHOWN + 40)]).execute()
    _, total = store.find_tasks()
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("t")
        await wait_for(pilot, lambda: shows(app, f"{total:,} tasks match; the newest {SHOWN} are listed"))
        screen = app.screen
        for pages in (2, 3):
            await pilot.press("end")  # the last one listed: the next page is read and appended
            await wait_for(pilot, lambda: len(screen.rows) == min(pages * SHOWN, total))
        await wait_for(pilot, lambda: shows(app, f"{total:,} tasks · Enter opens"))
        ids = [row.id for row in screen.rows]
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == total  # newest first, each once
        assert screen.query_one("#task-list", OptionList).option_count == total
        await pilot.press("end")
        await pilot.pause()
        assert len(screen.rows) == total  # nothing more to read
