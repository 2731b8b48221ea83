"""The dashboard on a subagent tree really run on the loopback API (``tests/subagent_tree.py``): Enter on the
call opens the child's transcript, Esc comes back at the same step; z folds a tree and the parent row then
stands for it (the tree's dollars, its worst status)."""

from __future__ import annotations

import pytest
from textual.widgets import OptionList

from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.transcript import TranscriptScreen
from dayflow_tui.tui.widgets.run_table import RunTable
from dayflow_tui.views.costs import cost_text
from dayflow_tui.views.run_tree import read_tree, roll_up

from ..subagent_tree import PARENT_ID, drive_tree
from ..tui_helpers import SIZE, open_run, screen_text, settle, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_enter_on_a_subagent_call_opens_the_child_and_escape_comes_back_to_the_step(store, api, tmp_path):
    drive_tree(store, tmp_path, api)
    tree = read_tree(store, PARENT_ID)
    researcher, checker = tree.children
    async with DayflowApp(store).run_test(size=SIZE) as pilot:
        parent = await open_run(pilot, PARENT_ID)
        await settle(pilot)
        steps = parent.query_one("#steps", OptionList)
        assert set(parent.subagents) == {"toolu_research01", "toolu_check01"}
        steps.highlighted = 1  # step 2: the call to the checker that failed
        await settle(pilot)
        shown = screen_text(pilot.app)
        assert f"↳ subagent run {checker.run.id}  checker  ✖ failed  ·  0 steps" in shown
        assert f"tree 4 runs {cost_text(roll_up(tree).total)}" in shown and "✖ failed" in shown
        steps.highlighted = 0  # step 1: the researcher's call
        await settle(pilot)
        assert f"↳ subagent run {researcher.run.id}  researcher  ✔ done  ·  2 steps" in screen_text(pilot.app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, TranscriptScreen)
                       and pilot.app.screen is not parent and pilot.app.screen.run is not None)
        child = pilot.app.screen
        await settle(pilot)
        assert child.run.id == researcher.run.id
        shown = screen_text(pilot.app)
        assert "↳ subagent of" in shown and PARENT_ID in shown and "Lisbon's weather today" in shown
        assert "⏎ Open subagent" in shown  # the footer offers it on a step whose call started a child
        child.query_one("#steps", OptionList).highlighted = 2  # the child's answer
        await settle(pilot)
        shown = screen_text(pilot.app)
        assert "[bold]21 C[/]" in shown and "\\x1b[31m" in shown and "\x1b" not in shown  # shown, never obeyed
        assert "⏎ Open subagent" not in shown
        await pilot.press("enter")  # on a step that started no child: nothing opens
        await settle(pilot)
        assert pilot.app.screen is child
        # The grandchild opens from the child the same way; Esc goes back one level at a time.
        child.query_one("#steps", OptionList).highlighted = 0
        await settle(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: pilot.app.screen is not child and isinstance(pilot.app.screen, TranscriptScreen)
                       and pilot.app.screen.run is not None)
        assert pilot.app.screen.run.parent_id == researcher.run.id
        await pilot.press("escape")
        await wait_for(pilot, lambda: pilot.app.screen is child)
        await pilot.press("escape")
        await wait_for(pilot, lambda: pilot.app.screen is parent)
        assert parent.query_one("#steps", OptionList).highlighted == 0  # the same step as before
        assert api.calls == 7  # reading the tree made no call


async def test_z_folds_a_tree_and_the_parent_row_shows_its_dollars_and_worst_status(store, api, tmp_path):
    drive_tree(store, tmp_path, api)
    tree = read_tree(store, PARENT_ID)
    ids = [node.run.id for node, _depth in tree.walk()]
    async with DayflowApp(store).run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        table = pilot.app.screen.query_one(RunTable)
        assert [run.id for run in table.rows] == ids  # parent, researcher, its checker, the failed checker
        assert table.window.depth == {ids[1]: 1, ids[2]: 2, ids[3]: 1}
        table.select_run(PARENT_ID)
        await pilot.press("z")
        await wait_for(pilot, lambda: PARENT_ID in table.window.folded)
        await settle(pilot)
        assert [run.id for run in table.rows] == [PARENT_ID]
        row = screen_text(pilot.app).splitlines()
        line = next(text for text in row if PARENT_ID in text)
        assert "✖ failed" in line and "Σ" + cost_text(roll_up(tree).total) in line
        assert "▸ +3 (z) · own ✔ done" in line
        await pilot.press("z")
        await wait_for(pilot, lambda: PARENT_ID not in table.window.folded)
        await settle(pilot)
        assert [run.id for run in table.rows] == ids
        line = next(text for text in screen_text(pilot.app).splitlines() if PARENT_ID in text)
        assert f"▾ +3 Σ{cost_text(roll_up(tree).total)} · ✖ failed below" in line and "✔ done" in line


async def test_enter_on_a_step_that_started_two_children_asks_which_one(store, api, tmp_path):
    from dayflow_tui.tui.screens.subagent_choice import SubagentChoice

    drive_tree(store, tmp_path, api, name="planner")
    by_call = read_tree(store, PARENT_ID).child_for_call()  # (children run side by side may start in any order)
    researcher, checker = by_call["toolu_plan_r"], by_call["toolu_plan_c"]
    async with DayflowApp(store).run_test(size=SIZE) as pilot:
        parent = await open_run(pilot, PARENT_ID)
        await settle(pilot)
        parent.query_one("#steps", OptionList).highlighted = 0
        await settle(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, SubagentChoice))
        shown = screen_text(pilot.app)
        assert researcher.run.id in shown and checker.run.id in shown
        await pilot.press("escape")  # nothing chosen: back where it was
        await wait_for(pilot, lambda: pilot.app.screen is parent)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, SubagentChoice))
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, TranscriptScreen)
                       and pilot.app.screen is not parent and pilot.app.screen.run is not None)
        assert pilot.app.screen.run.id == checker.run.id
        await pilot.press("escape")
        await wait_for(pilot, lambda: pilot.app.screen is parent)
