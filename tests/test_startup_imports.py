"""Commands that call no model must not import ``anthropic`` (over a second to import here).

Each case runs the real console script with ``PYTHONPROFILEIMPORTTIME`` and
reads the modules it actually imported. ``dayflow brief`` is the control: it
calls the (offline) model, so it must show ``anthropic`` in the same capture.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dayflow_tui.agent.loop import run_brief

from .conftest import dayflow_cmd


def imported_modules(argv: list[str]) -> set[str]:
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0", "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    assert "peewee" in names, "the import-time capture saw nothing"
    return names


@pytest.fixture
def finished_run(store, counting_client) -> str:
    result = run_brief(store, client=counting_client)
    assert result.status == "done"
    return result.run_id


@pytest.mark.parametrize("args", [("runs",), ("runs", "--json"), ("tasks",), ("show", "RUN")],
                         ids=["runs", "runs-json", "tasks", "show"])
def test_commands_that_call_no_model_do_not_import_anthropic(args, db_target, finished_run):
    args = tuple(finished_run if a == "RUN" else a for a in args)
    names = imported_modules(dayflow_cmd(*args, "--db", str(db_target)))
    assert not {n for n in names if n == "anthropic" or n.startswith("anthropic.")}


def test_control_brief_does_import_anthropic(db_path):
    names = imported_modules(dayflow_cmd("brief", "--db", str(db_path)))
    assert "anthropic" in names


DASHBOARD = r"""
import asyncio, pkgutil, importlib, sys
import dayflow_tui.tui
from dayflow_tui.store import open_store
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.transcript import TranscriptScreen

for module in pkgutil.walk_packages(dayflow_tui.tui.__path__, "dayflow_tui.tui."):
    if module.name != "dayflow_tui.tui.demo_data":  # builds example runs on the offline model, on purpose
        importlib.import_module(module.name)

async def main(db, run_id):
    app = DayflowApp(open_store(db, create=False))
    async with app.run_test(headless=True, size=(120, 40)) as pilot:
        await pilot.pause()
        app.open_transcript(run_id)
        for _ in range(50):
            await pilot.pause(0.05)
            if isinstance(app.screen, TranscriptScreen) and app.screen.run is not None:
                break
        assert isinstance(app.screen, TranscriptScreen) and app.screen.run.id == run_id
    print(sorted(name for name in sys.modules if name.split(".")[0] == "anthropic"))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_dashboard_list_and_transcript_do_not_import_anthropic(db_target, finished_run):
    """Every dashboard module imported, the run list painted and a transcript opened: no anthropic.

    ``demo_data`` (example databases for tests, screenshots and benchmarks) drives the offline
    model and is the one module of the package left out.
    """
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0"}
    done = subprocess.run([sys.executable, "-c", DASHBOARD, str(db_target), finished_run], capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
