"""The dashboard's defects of issue #30, each driven as a user would (Pilot, at 80x24 and 160x50)."""

from __future__ import annotations

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.widgets.fitting_footer import FittingFooter

from ..tui_helpers import footer_ready, open_run, screen_text, settle, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def footer_actions(app) -> list[str]:
    return [key.action for key in app.screen.query_one(FittingFooter).query("FooterKey")]


def footer_line(app) -> str:
    return screen_text(app).rstrip("\n").splitlines()[-1]


async def test_the_footer_offers_the_keys_that_apply_on_a_waiting_run_at_80x24(tmp_path):
    store = open_store(str(tmp_path / "wait.db"))
    demo_data.waiting_run(store, "run-wait-0001", demo_data.BASE_TIME)
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await open_run(pilot, "run-wait-0001")
            await wait_for(pilot, lambda: footer_ready(app) and "approve" in footer_actions(app))
            actions = footer_actions(app)
            assert {"approve", "deny", "edit_call"} <= set(actions) and "resume" not in actions, actions
            line = footer_line(app)
            assert "a Approve" in line and "A Approve all" in line and "d Deny" in line, line
            assert "E Edit" in line and "space Mark" in line, line
            assert "Resume" not in line and line.rstrip().endswith("^p palette"), line  # whole, not cut
            await pilot.press("escape")
            await open_run(pilot, "run-done-0001")
            await wait_for(pilot, lambda: footer_ready(app) and "back" in footer_actions(app))
            await pilot.pause(0.2)
            assert not {"resume", "approve", "deny", "edit_call"} & set(footer_actions(app))
            assert "Resume" not in footer_line(app)
    finally:
        store.close()


def task_cell_width(app) -> int:
    """The task column's width as drawn: from its title to the preview's edge (or the line's end)."""
    header = next(line for line in screen_text(app).splitlines() if "title / error" in line)
    start = header.index("title / error")
    end = header.find("▏", start)
    return (end if end >= 0 else len(header.rstrip()) + 1) - start


async def test_the_task_column_takes_the_width_the_terminal_gives(tmp_path):
    store = open_store(str(tmp_path / "wide.db"))
    demo_data.waiting_run(store, "run-wait-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    widths = {}
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            for size in ((80, 24), (120, 40), (160, 50), (200, 50)):
                await pilot.resize_terminal(*size)
                await settle(pilot)
                await pilot.pause(0.2)
                widths[size] = task_cell_width(app)
                row = next(line for line in screen_text(app).splitlines() if line.startswith(" run-wait-0001"))
                if size[0] >= 120:
                    assert "Read my inbox, calendar and" in row, (size, row)
    finally:
        store.close()
    assert widths[(160, 50)] >= 36 and widths[(160, 50)] >= widths[(120, 40)], widths  # it was 16 at 160x50
    assert widths[(200, 50)] >= widths[(160, 50)], widths


async def test_an_empty_filter_says_what_is_filtered_and_F_steps_back(tmp_path):
    store = open_store(str(tmp_path / "empty.db"))
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("f", "f")  # all -> done -> running: no run is running
            await settle(pilot)
            await wait_for(pilot, lambda: "No runs in status running." in screen_text(app))
            text = screen_text(app)
            assert "Esc to clear the filter" in text and "F for the previous one" in text
            assert "run-done-0001" not in text
            await pilot.press("F")  # back to done, as drawn (no resize needed to show it)
            await settle(pilot)
            await wait_for(pilot, lambda: "run-done-0001" in screen_text(app))
            assert app.screen.run_filter.status == "done" and "No runs" not in screen_text(app)
            await pilot.press("F")
            await settle(pilot)
            assert app.screen.run_filter.status is None
            await pilot.press("F")  # from all, backwards: the last status
            await settle(pilot)
            await wait_for(pilot, lambda: "No runs in status cancelled." in screen_text(app))
            await pilot.press("escape")
            await settle(pilot)
            await wait_for(pilot, lambda: "run-done-0001" in screen_text(app))
    finally:
        store.close()


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_e_at_the_top_of_step_1_keeps_the_line_being_read(tmp_path, size):
    """At the top of step 1 (four tool calls), ``e`` jumped into the fourth tool's payload."""
    from dayflow_tui.tui.widgets.step_detail import StepDetail, ToolCallView

    store = open_store(str(tmp_path / "fold.db"))
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            screen = await open_run(pilot, "run-done-0001")
            await pilot.press("g")  # step 1, at its top
            await wait_for(pilot, lambda: len(screen.query(ToolCallView)) == 4)
            await settle(pilot)
            detail = screen.query_one(StepDetail)
            assert detail.scroll_y == 0
            top_line = next(line for line in screen_text(app).splitlines() if "Step 1" in line)
            for _ in range(3):  # unfold, fold, unfold: the top of the step stays on top
                await pilot.press("e")
                await pilot.pause(0.6)  # longer than a scroll animation
                await settle(pilot)
                assert detail.scroll_y == 0, detail.scroll_y
                assert top_line in screen_text(app)
            assert not any(c.collapsed for c in detail.query("Collapsible"))  # they did unfold
    finally:
        store.close()


async def test_notifications_have_their_own_place_at_80x24(tmp_path):
    """Toasts covered the run list and the help box; now the screen makes room for them."""
    from textual.widgets._toast import Toast

    from dayflow_tui.tui.widgets.run_table import RunTable

    store = open_store(str(tmp_path / "toasts.db"))
    for i in range(12):
        demo_data.queued_run(store, f"run-queued-{i:02d}", demo_data.BASE_TIME)
    app = DayflowApp(store)

    def toasts():
        return [toast.region for toast in app.screen.query(Toast) if toast.region.height]

    try:
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await settle(pilot)
            for n in range(3):
                app.notify(f"Notice number {n}: something happened to run run-queued-0{n}.", title="Note")
            await wait_for(pilot, lambda: len(toasts()) >= 1)
            await pilot.pause(0.3)
            table = app.screen.query_one(RunTable).region
            assert table.height > 3
            for region in toasts():
                assert not region.overlaps(table), (region, table)
            text = screen_text(app)
            assert "Notice number 2" in text  # the newest shows
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: app.screen.query("#help-box") or app.screen.query("VerticalScroll"))
            await pilot.pause(0.3)
            app.notify("One more while the help is open.", title="Note")
            await wait_for(pilot, lambda: "One more while the help" in screen_text(app))
            box = next(w for w in app.screen.query("*") if w.parent is app.screen and w.region.height > 5).region
            for region in toasts():
                assert not region.overlaps(box), (region, box)
    finally:
        store.close()


async def test_the_step_list_ends_with_brief_for_the_brief_and_answer_for_a_user_agent(tmp_path):
    from textual.widgets import OptionList

    from dayflow_tui.store import StepRecord

    store = open_store(str(tmp_path / "answer.db"))
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    with demo_data.clock_at(demo_data.BASE_TIME):
        store.create_run("Compare two CDNs", model="offline", run_id="run-research-1", status="running",
                         agent={"agent": "research"})
        store.append_step("run-research-1", StepRecord(
            n=1, stop_reason="end_turn", assistant=[{"type": "text", "text": "Use the cheaper one."}],
            input_tokens=900, output_tokens=40, model="offline"), final_status="done", final_text="Use the cheaper one.")
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            for run_id, word in (("run-research-1", "answer"), ("run-done-0001", "brief")):
                screen = await open_run(pilot, run_id)
                steps = screen.query_one("#steps", OptionList)
                await wait_for(pilot, lambda: steps.option_count > 1)
                assert str(steps.get_option_at_index(steps.option_count - 1).prompt).strip() == word
                await pilot.press("escape")
                await settle(pilot)
    finally:
        store.close()
