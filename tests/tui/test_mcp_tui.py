"""An MCP tool's call in the dashboard (issue #27): its server in the step view, and what its server's
annotations made of it (kind, approval) under the call's heading, read from the run's recorded agent shape on
the reader thread."""

from __future__ import annotations

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.views.transcript import read_transcript

from ..tui_helpers import open_run, settle, wait_for


@pytest.fixture
def anyio_backend():
    return "asyncio"


def test_the_transcript_read_gives_each_mcp_call_its_server_and_hints(tmp_path):
    store = open_store(str(tmp_path / "mcp.db"))
    try:
        demo_data.mcp_run(store, "run-mcp-0001", demo_data.BASE_TIME)
        demo_data.hostile_run(store, "run-hostile-1", demo_data.BASE_TIME)
        calls = {c.name: c for c in read_transcript(store, "run-mcp-0001").views[0].calls}
        assert calls["counting__look"].server == "counting"
        assert calls["counting__look"].hints == "readOnlyHint true -> read_only, never asks"
        assert calls["counting__wipe"].hints == "destructiveHint true -> plain, asks a person"
        assert calls["counting__send"].hints == "no annotations -> plain, never asks"
        plain = read_transcript(store, "run-hostile-1").views[0].calls  # a Python tool's call: no server
        assert plain and all(c.server is None and c.hints is None for c in plain)
    finally:
        store.close()


@pytest.mark.anyio
async def test_the_step_view_shows_an_mcp_calls_server_and_annotations(tmp_path):
    from dayflow_tui.tui.widgets.step_detail import ToolCallView

    store = open_store(str(tmp_path / "mcp.db"))
    demo_data.mcp_run(store, "run-mcp-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot)
            screen = await open_run(pilot, "run-mcp-0001")
            await pilot.press("home")
            await wait_for(pilot, lambda: len(screen.query(ToolCallView)) == 3)
            shown = [" ".join(str(s.render()) for s in view.query("Static")) for view in screen.query(ToolCallView)]
            assert "MCP server counting" in shown[0] and "readOnlyHint true -> read_only, never asks" in shown[0]
            assert "destructiveHint true -> plain, asks a person" in shown[1]
            assert "outcome_unknown" in shown[2] and "no annotations -> plain, never asks" in shown[2]
    finally:
        store.close()
