"""The run list's sort and columns (issue #30, as k9s and Harlequin have them), remembered with the theme,
and ``y``/``Y`` copying a run's id or its resume command (OSC 52) with a toast. Driven through Pilot at
80x24 and 160x50."""

from __future__ import annotations

import json

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data, ui_state
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.columns import ColumnsDialog
from dayflow_tui.tui.widgets.run_table import RunTable

from ..tui_helpers import open_run, screen_text, select_loaded, settle, wait_for

pytestmark = pytest.mark.anyio
PRICED_OFFLINE = '{"offline": {"input": 3, "output": 15}}'


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def runs_db(tmp_path, monkeypatch):
    """Every status (the done run has 3 steps and costs most), and a run of another agent (``zeta``)."""
    monkeypatch.setenv("DAYFLOW_PRICES", PRICED_OFFLINE)
    path = str(tmp_path / "sort.db")
    store = open_store(path)
    lease = demo_data.every_status(store)  # the running run: held by this process while the test runs
    with demo_data.clock_at(demo_data.BASE_TIME + demo_data.timedelta(hours=2)):
        store.create_run("Sort the mail", model="offline", run_id="run-zeta-0001", status="failed",
                         agent={"agent": "zeta"})
    yield path
    store.release(lease)
    store.close()


def order(app) -> list[str]:
    table = app.screen.query_one(RunTable)
    return [table.window.row(i).id for i in range(table.total)]


def header(app) -> str:
    return next(line for line in screen_text(app).splitlines() if line.lstrip().startswith("id "))


async def sorted_by(pilot, sort: str, ascending: bool = False) -> None:
    app = pilot.app
    await wait_for(pilot, lambda: app.screen.query_one(RunTable).window.filter.sort == sort
                   and app.screen.query_one(RunTable).window.filter.ascending == ascending)
    await settle(pilot)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_s_cycles_the_sort_S_reverses_it_the_header_marks_it_and_the_next_start_remembers(runs_db, size):
    store = open_store(runs_db)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            assert order(app)[0] == "run-zeta-0001"  # started: the newest first
            await pilot.press("s")
            await sorted_by(pilot, "cost")
            assert order(app)[0] == "run-done-0001" and "cost ▼" in header(app)
            assert "sorted by cost ▼" in screen_text(app)
            await pilot.press("s")
            await sorted_by(pilot, "steps")
            assert order(app)[0] == "run-done-0001" and "▼ste" in header(app)
            await pilot.press("s")
            await sorted_by(pilot, "status")
            assert order(app)[:2] == ["run-live-0001", "run-crash-001"] and "status ▼" in header(app)
            await pilot.press("s")
            await sorted_by(pilot, "agent")
            assert order(app)[-1] == "run-zeta-0001"  # brief before zeta
            await pilot.press("S")
            await sorted_by(pilot, "agent", ascending=True)
            assert order(app)[0] == "run-zeta-0001"
            assert "sorted by agent ▲" in screen_text(app)
        saved = json.loads(ui_state.state_path().read_text())
        assert saved["sort"] == "agent" and saved["ascending"] is True
        again = DayflowApp(store)
        async with again.run_test(size=size) as pilot:
            await sorted_by(pilot, "agent", ascending=True)
            assert order(again)[0] == "run-zeta-0001"
    finally:
        store.close()


async def test_c_hides_a_column_and_the_next_start_remembers(runs_db):
    store = open_store(runs_db)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot)
            assert "tokens in/out" in header(app) and "agent" not in header(app)  # agent: hidden unless chosen
            await pilot.press("c")
            await wait_for(pilot, lambda: isinstance(app.screen, ColumnsDialog))
            # status, started UTC, steps, tokens in/out, cost, model, agent, activity: tokens off, agent on.
            await pilot.press("down", "down", "down", "space", "down", "down", "down", "space", "enter")
            await wait_for(pilot, lambda: not isinstance(app.screen, ColumnsDialog))
            await wait_for(pilot, lambda: "agent" in header(app) and "tokens" not in header(app))
            assert "zeta" in screen_text(app)
        saved = json.loads(ui_state.state_path().read_text())
        assert set(saved["hidden_columns"]) == {"tokens in/out", "source"}  # source: hidden unless chosen
        again = DayflowApp(store)
        async with again.run_test(size=(160, 50)) as pilot:
            await settle(pilot)
            assert "agent" in header(again) and "tokens" not in header(again)
    finally:
        store.close()


async def test_y_copies_the_id_and_Y_the_resume_command_from_the_list_and_the_transcript(runs_db):
    store = open_store(runs_db)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await select_loaded(pilot, "run-crash-001")
            await pilot.press("y")
            assert app.clipboard == "run-crash-001"
            await pilot.press("Y")
            assert app.clipboard == f"dayflow resume run-crash-001 --db {runs_db}"
            toasts = [str(n.message) for n in app._notifications]
            assert "run-crash-001" in toasts and f"dayflow resume run-crash-001 --db {runs_db}" in toasts
            await open_run(pilot, "run-done-0001")
            await pilot.press("y")
            assert app.clipboard == "run-done-0001"
    finally:
        store.close()


@pytest.mark.parametrize("damage", ['{"sort": 3}', '{"ascending": "yes"}', '{"hidden_columns": "model"}',
                                    '{"hidden_columns": [1]}'])
def test_a_damaged_sort_or_columns_entry_is_the_defaults_and_a_warning(tmp_path, damage):
    path = tmp_path / "dashboard.json"
    path.write_text(damage, encoding="utf-8")
    state, warning = ui_state.load(path)
    assert state == ui_state.UiState() and "damaged" in warning


def test_sort_and_columns_survive_a_save_and_a_load(tmp_path):
    path = tmp_path / "dashboard.json"
    ui_state.save(ui_state.UiState(theme="nord", sort="cost", ascending=True, hidden_columns=("model",)), path)
    assert ui_state.load(path) == (ui_state.UiState("nord", None, "cost", True, ("model",)), None)


def rows(app) -> list[str]:
    return [run.id for run in app.screen.query_one(RunTable).rows]


async def click_title(pilot, title: str) -> None:
    """Click the middle of ``title`` in the column header, where it is drawn at this width."""
    widget = pilot.app.screen.query_one("#table-header")
    line = widget.render().plain
    x = line.index(title) + len(title) // 2
    await pilot.click("#table-header", offset=(x, 0))


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_clicking_a_column_title_sorts_by_it_and_clicking_it_again_reverses(runs_db, size):
    store = open_store(runs_db)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            newest_first = rows(app)
            assert newest_first[0] == "run-zeta-0001"
            await click_title(pilot, "cost")
            await sorted_by(pilot, "cost")
            assert rows(app)[0] == "run-done-0001" and "cost ▼" in header(app)
            await click_title(pilot, "cost")  # the sorted column again: the other way round
            await sorted_by(pilot, "cost", ascending=True)
            assert rows(app)[-1] == "run-done-0001" and "cost ▲" in header(app)
            await click_title(pilot, "status")  # another column: largest first again
            await sorted_by(pilot, "status")
            assert rows(app)[:2] == ["run-live-0001", "run-crash-001"]
            await click_title(pilot, "id")  # the id sorts nothing: the order stays
            await settle(pilot)
            assert app.screen.run_filter.sort == "status" and rows(app)[:2] == ["run-live-0001", "run-crash-001"]
            await click_title(pilot, "steps")
            await sorted_by(pilot, "steps")
            assert rows(app)[0] == "run-done-0001" and "▼ste" in header(app)
        assert json.loads(ui_state.state_path().read_text())["sort"] == "steps"  # remembered like ``s``
    finally:
        store.close()
