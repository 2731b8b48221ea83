"""The dashboard shows compaction: the next request as compacted, and each step's estimates."""

from __future__ import annotations

import json

import pytest
from dayflow_tui.tui.widgets.json_view import JsonView

from dayflow_tui.agent import request
from dayflow_tui.agent import runs
from dayflow_tui.agent.compaction import SUMMARY_PREFIX
from dayflow_tui.tui.app import DayflowApp

from ..long_run_model import LongRunClient
from ..tui_helpers import SIZE, open_run, screen_text, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_next_request_toggle_shows_the_compacted_request_and_both_estimates(store):
    stopped = runs.run_brief(store, client=LongRunClient(), max_steps=20, compact_at=8_000, run_id="run-compact-01")
    assert stopped.status == "budget"
    preview = request.next_request_preview(store, "run-compact-01")
    assert preview.compacted
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await open_run(pilot, "run-compact-01")
        screen = app.screen
        await pilot.press("G", "k")  # the last step (G is the "stopped" entry after it): sent compacted
        await wait_for(pilot, lambda: "compacted to ~" in screen_text(app))
        last = store.steps("run-compact-01")[-1]
        assert f"request ~{last.request_est_tokens:,} tokens, compacted to ~{last.compacted_est_tokens:,}" in (
            screen_text(app))
        await pilot.press("x")
        await wait_for(pilot, lambda: screen.query_one("#request", JsonView).payloads != [])
        shown = [payload.value for payload in screen.query_one("#request", JsonView).payloads]
        assert shown == json.loads(json.dumps(preview.messages))
        assert shown[1]["content"][0]["text"].startswith(SUMMARY_PREFIX)
        title = str(screen.query_one("#request-title").render())
        assert f"~{preview.est_before:,} tokens from history, compacted to ~{preview.est_after:,} tokens" in title
