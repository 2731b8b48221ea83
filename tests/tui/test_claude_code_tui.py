"""Imported Claude Code sessions on the dashboard: marked in the run list, ``r`` names the command that continues
them (a note, nothing to pay, nothing written), and ``--follow-claude-code`` shows a growing session live."""

from __future__ import annotations

import time

import pytest

from dayflow_tui.claude_code.importer import import_claude_code
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.cost_view import ResumeDialog
from dayflow_tui.tui.screens.transcript import TranscriptScreen

from ..cli import claude_code_fixtures as cc
from ..tui_helpers import SIZE, open_run, screen_text, select_loaded, settle, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _main_run(store):
    (run,) = [r for r in store.list_runs(source="claude-code") if r.parent_id is None]
    return run


def _rows(store):
    with store.bound():
        return [tuple(r) for r in store.db.execute_sql('SELECT * FROM "steps" ORDER BY 1, 2')] + \
            [tuple(r) for r in store.db.execute_sql('SELECT * FROM "runs" ORDER BY 1')]


async def test_r_on_an_imported_session_names_claude_resume_and_writes_nothing(store, tmp_path):
    import_claude_code(store, cc.write_projects(tmp_path / "projects"), say=lambda line: None)
    run = _main_run(store)
    before = _rows(store)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await select_loaded(pilot, run.id)
        assert "[claude-code]" in screen_text(app)  # the run list marks where the run comes from
        await pilot.press("r")
        await wait_for(pilot, lambda: any("claude --resume" in n.message for n in app._notifications))
        note = next(n for n in app._notifications if "claude --resume" in n.message)
        assert f"cd {cc.CWD} && claude --resume {cc.SESSION}" in note.message
        assert note.severity == "information" and not isinstance(app.screen, ResumeDialog)
        screen = await open_run(pilot, run.id)  # Enter shows its transcript
        await wait_for(pilot, lambda: len(screen.views) == 10)
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, TranscriptScreen) and app.driving is None
    assert _rows(store) == before


async def test_following_shows_a_step_appended_to_a_live_session(store, tmp_path):
    root = cc.write_projects(tmp_path / "projects")
    app = DayflowApp(store, follow_claude_code=root)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: bool(store.list_runs(source="claude-code")))
        await settle(pilot)
        screen = await open_run(pilot, _main_run(store).id)
        await wait_for(pilot, lambda: len(screen.views) == 10)
        cc.write_records(cc.session_path(root), cc.appended_records(), append=True)
        appended = time.monotonic()
        await wait_for(pilot, lambda: len(screen.views) == 13, timeout=20)
        shown_after = time.monotonic() - appended
        print(f"appended step shown after {shown_after:.2f} s")
        # a second for the next import, half a second for the transcript's poll; slack for a loaded machine
        assert shown_after < 4.0, shown_after
        assert screen.views[-1].texts == ("All three wombat tests pass.",) or \
            "wombat" in " ".join(screen.views[-1].texts)


def test_following_a_directory_that_is_not_there_is_one_line(tmp_path):
    import subprocess

    from ..reliability_helpers import cli_env
    from ..tui_helpers import TUI_BIN

    db = tmp_path / "d.db"
    done = subprocess.run([str(TUI_BIN), "--db", str(db), "--follow-claude-code", str(tmp_path / "nowhere")],
                          capture_output=True, env=cli_env(), timeout=60, stdin=subprocess.DEVNULL)
    err = done.stderr.decode()
    assert done.returncode == 64 and len(err.strip().splitlines()) == 1 and "no such directory" in err, err
