"""``X`` on the run list (issue #30): remove a run, or archive it first, by ``dayflow prune --archive``'s rules,
after a confirm that names the run; refused for a running (or waiting, queued, interrupted) run. The archive
is the file ``dayflow import`` reads: imported again, the run is back."""

from __future__ import annotations

import pytest

from dayflow_tui.config.errors import RunNotFound
from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.remove import RemoveDialog

from ..reliability_helpers import dayflow, text
from ..tui_helpers import screen_text, select_loaded, settle, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_X_archives_then_removes_a_done_run_and_refuses_a_running_one(tmp_path, size):
    path = tmp_path / "remove.db"
    store = open_store(str(path))
    lease = demo_data.every_status(store)
    tasks_before = len(store.list_tasks(include_done=True))
    archive = tmp_path / "kept.jsonl"
    app = DayflowApp(store)
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            await select_loaded(pilot, "run-live-0001")
            await pilot.press("X")
            await wait_for(pilot, lambda: any("run-live-0001 cannot be removed: it is running" in t
                                              for t in toasts(app)))
            assert not isinstance(app.screen, RemoveDialog)
            await select_loaded(pilot, "run-done-0001")
            await pilot.press("X")
            await wait_for(pilot, lambda: isinstance(app.screen, RemoveDialog))
            shown = screen_text(app)
            assert "Remove run run-done-0001?" in shown and "done  ·  3 step(s)" in shown
            await pilot.press("enter")  # the focus starts on Cancel: nothing goes
            await wait_for(pilot, lambda: not isinstance(app.screen, RemoveDialog))
            assert store.get_run("run-done-0001").status == "done"
            await pilot.press("X")
            await wait_for(pilot, lambda: isinstance(app.screen, RemoveDialog))
            app.screen.query_one("#archive-path").value = str(archive)
            app.screen.query_one("#remove-archive").press()
            await wait_for(pilot, lambda: any("run-done-0001 removed; archived in" in t for t in toasts(app)))
            with pytest.raises(RunNotFound):
                store.get_run("run-done-0001")
            await wait_for(pilot, lambda: "run-done-0001" not in screen_text(app))
            assert len(store.list_tasks(include_done=True)) == tasks_before  # the tasks stay
            # An archive is never written over: a second removal into the same file is refused, nothing goes.
            await select_loaded(pilot, "run-failed-01")
            await pilot.press("X")
            await wait_for(pilot, lambda: isinstance(app.screen, RemoveDialog))
            app.screen.query_one("#archive-path").value = str(archive)
            app.screen.query_one("#remove-archive").press()
            await wait_for(pilot, lambda: any("run-failed-01 was not removed" in t and "exists" in t
                                              for t in toasts(app)))
            assert store.get_run("run-failed-01").status == "failed"
    finally:
        store.release(lease)
        store.close()
    restored = tmp_path / "restored.db"
    assert dayflow("import", str(archive), db=restored).returncode == 0
    shown = dayflow("runs", "--json", db=restored)
    assert '"run-done-0001"' in text(shown.stdout)
