"""Snapshots of a subagent tree in the dashboard (80x24 and 160x50): the run list with the tree unfolded and
folded (z), and the parent's transcript on the step whose call started a child.

Deterministic: the tree is really driven on the loopback API (``tests/subagent_tree.py``) at a pinned clock,
with a fixed parent id (the children's ids follow from it and the calls' ids), fixed model-call durations and
the screen's clock pinned, as ``test_tui_snapshots`` does.
Update with ``pytest tests/tui/test_subagent_tree_snapshots.py --snapshot-update`` and review the SVGs.
"""

from __future__ import annotations

import pytest
from textual.widgets import OptionList

from dayflow_tui.agent import driver
from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.widgets.run_table import RunTable

from ..subagent_tree import PARENT_ID, drive_tree
from ..tui_helpers import SteadyTimer, footer_ready, reads_done, select_loaded, wait_for

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 50), id="160x50")]


@pytest.fixture(autouse=True)
def steady_screen(monkeypatch):
    monkeypatch.setenv("DAYFLOW_FAKE_NOW", demo_data.SCREEN_TIME)
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")
    monkeypatch.setattr(driver, "time", SteadyTimer())


@pytest.fixture
def tree_store(db_path, api, tmp_path):
    store = open_store(db_path)
    drive_tree(store, tmp_path, api, at=demo_data.BASE_TIME)
    yield store
    store.close()


async def _list_ready(pilot) -> None:
    await wait_for(pilot, lambda: reads_done(pilot.app) and footer_ready(pilot.app))


async def _folded(pilot) -> None:
    await _list_ready(pilot)
    await select_loaded(pilot, PARENT_ID)
    await pilot.press("z")
    await wait_for(pilot, lambda: PARENT_ID in pilot.app.screen.query_one(RunTable).window.folded)
    await _list_ready(pilot)


async def _parent_at_its_first_call(pilot) -> None:
    await _list_ready(pilot)
    await select_loaded(pilot, PARENT_ID)
    await pilot.press("enter")
    await wait_for(pilot, lambda: pilot.app.screen.query("#steps")
                   and pilot.app.screen.query_one("#steps", OptionList).option_count > 0)
    pilot.app.screen.query_one("#steps", OptionList).highlighted = 0
    await wait_for(pilot, lambda: reads_done(pilot.app) and footer_ready(pilot.app)
                   and pilot.app.screen.query(".subagent-run"))


@pytest.mark.parametrize("size", SIZES)
def test_run_list_with_a_subagent_tree_unfolded(snap_compare, tree_store, size):
    assert snap_compare(DayflowApp(tree_store), terminal_size=size, run_before=_list_ready)


@pytest.mark.parametrize("size", SIZES)
def test_run_list_with_a_subagent_tree_folded(snap_compare, tree_store, size):
    assert snap_compare(DayflowApp(tree_store), terminal_size=size, run_before=_folded)


@pytest.mark.parametrize("size", SIZES)
def test_transcript_on_a_subagent_call(snap_compare, tree_store, size):
    assert snap_compare(DayflowApp(tree_store), terminal_size=size, run_before=_parent_at_its_first_call)
