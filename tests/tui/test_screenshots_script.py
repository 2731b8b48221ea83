"""The README's screenshots: ``screenshots/make_screenshots.py`` runs (a real process, into a temporary folder) and
draws the database it builds, and the run list that scrolls at 80x24 has no horizontal scrollbar (issue #30)."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.widgets.run_table import RunTable

from ..tui_helpers import settle, wait_for

SCRIPT = Path(__file__).resolve().parents[2] / "screenshots" / "make_screenshots.py"
SHOTS = ("run-list.svg", "run-list-80x24.svg", "search.svg", "transcript.svg", "json-view.svg", "tasks.svg",
         "resume.svg", "reply-streaming.svg", "claude-code.svg", "otel-collect.svg", "subagents.svg")


def svg_text(path: Path) -> str:
    """The words an SVG screenshot shows (its text runs, entities decoded)."""
    return html.unescape(" ".join(re.findall(r">([^<>]+)</text>", path.read_text(encoding="utf-8"))))


def test_the_screenshot_script_draws_a_realistic_database(tmp_path):
    out = tmp_path / "shots"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(SHOTS)
    run_list = svg_text(out / "run-list.svg")
    for status in ("done", "running", "interrupted", "failed", "budget", "queued", "waiting", "cancelled"):
        assert status in run_list, status
    assert "31\xa0runs" in run_list or "31 runs" in run_list  # 29 of Dayflow's own, a Claude Code session, a trace
    for title in ("Postgres\xa0replication,\xa02\xa0TB", "[triage]\xa0Queue\xa0ACME", "2\xa0forks"):
        assert title in run_list or title.replace("\xa0", " ") in run_list, title
    costs = re.findall(r"\$(\d+\.\d{4})", run_list)
    assert len(costs) >= 20 and max(float(c) for c in costs) > 0.1  # priced as claude-sonnet-4-5, not $0.00
    assert "arriving" in svg_text(out / "reply-streaming.svg")
    assert "set_title" in svg_text(out / "transcript.svg") and "fetch_page" in svg_text(out / "transcript.svg")
    assert "Bash" in svg_text(out / "claude-code.svg") and "Read-only" in svg_text(out / "claude-code.svg")
    assert "lookup_order" in svg_text(out / "otel-collect.svg") and "Read-only" in svg_text(out / "otel-collect.svg")
    team = svg_text(out / "subagents.svg").replace("\xa0", " ")
    assert "subagent run" in team and "researcher" in team and "critic" in team and "tree 3 runs" in team


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_run_list_that_scrolls_has_no_horizontal_scrollbar(tmp_path, anyio_backend):
    store = open_store(tmp_path / "many.db")
    demo_data.many_runs(store, 60)
    try:
        app = DayflowApp(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            table = app.screen.query_one(RunTable)
            await wait_for(pilot, lambda: table.virtual_size.width > 0)  # laid out at the terminal's width
            await pilot.pause(0.1)
            assert table.total == 60 and table.show_vertical_scrollbar
            assert not table.show_horizontal_scrollbar
    finally:
        store.close()
