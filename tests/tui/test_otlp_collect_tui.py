"""Runs received by ``dayflow collect`` on the dashboard: marked ``[otel AGENT]`` in the run list, ``r`` is a note
(read-only, nothing written), and a run written while the dashboard is open appears in its list."""

from __future__ import annotations

import time

import pytest

from dayflow_tui.otel.collect import Collector
from dayflow_tui.otel.receive import Span
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.cost_view import ResumeDialog

from ..tui_helpers import SIZE, screen_text, select_loaded, settle, wait_for

pytestmark = pytest.mark.anyio
T0 = 1_760_000_000_000_000_000


@pytest.fixture
def anyio_backend():
    return "asyncio"


def agent_turn(trace: str, agent: str) -> list[Span]:
    root = Span(trace, "a" * 16, None, f"invoke_agent {agent}", T0, T0 + 5_000_000_000,
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent})
    chat = Span(trace, "b" * 16, root.span_id, "chat gpt-4o", T0 + 10**9, T0 + 2 * 10**9,
                {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 4,
                 "gen_ai.output.messages": '[{"role":"assistant","parts":[{"type":"text","content":"hi"}]}]'})
    return [chat, root]


def _rows(store):
    with store.bound():
        return [tuple(r) for r in store.db.execute_sql('SELECT * FROM "steps" ORDER BY 1, 2')] + \
            [tuple(r) for r in store.db.execute_sql('SELECT * FROM "runs" ORDER BY 1')]


async def test_a_collected_run_is_marked_read_only_and_a_new_one_shows_live(store):
    collector = Collector(store, hold_s=60)
    collector.take(agent_turn("1" * 32, "Weather agent"))
    (run,) = store.list_runs(source="otel")
    before = _rows(store)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await select_loaded(pilot, run.id)
        assert "[otel Weather agent]" in screen_text(app)
        await pilot.press("r")
        await wait_for(pilot, lambda: any("OpenTelemetry trace" in n.message for n in app._notifications))
        note = next(n for n in app._notifications if "OpenTelemetry trace" in n.message)
        assert "read-only" in note.message and note.severity == "information"
        assert not isinstance(app.screen, ResumeDialog) and app.driving is None
        assert _rows(store) == before
        sent = time.monotonic()
        collector.take(agent_turn("2" * 32, "Second agent"))  # as a running `dayflow collect` would write it
        await wait_for(pilot, lambda: "[otel Second agent]" in screen_text(app), timeout=20)
        print(f"collected run shown after {time.monotonic() - sent:.2f} s")


async def test_a_live_run_grows_on_screen_and_its_nested_agent_is_listed_under_it(store):
    """A trace arriving span by span while the dashboard is open: the run shows running with its first step, the
    agent it calls as a tool appears nested under it (``└─ ↳``), and the agent span's end shows it done."""
    from ..agent.test_collect_live import the_trace

    spans = the_trace()  # c1, t1, h1, helper, t2, c2, c3, outer: the order an SDK ends them
    collector = Collector(store, hold_s=60)
    collector.take(spans[:2])
    (outer,) = store.list_runs(source="otel")
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await select_loaded(pilot, outer.id)

        def row(run_id):  # the run list's line (left of the preview pane; the id cut to its column)
            lines = [line.split("▏")[0] for line in screen_text(app).splitlines()]
            return next((line for line in lines if line.startswith(f" {run_id[:13]}")), "")

        assert "running" in row(outer.id) and "[otel otel]" in row(outer.id)
        collector.take(spans[2:5])  # the helper's chat, its span (failed), the tool span above it
        helper = next(r for r in store.list_runs(source="otel") if r.id != outer.id)
        await wait_for(pilot, lambda: "└─ ↳ [otel helper]" in row(helper.id), timeout=20)
        assert "failed" in row(helper.id)
        collector.take(spans[5:])
        await wait_for(pilot, lambda: "[otel planner]" in row(outer.id) and "done" in row(outer.id), timeout=20)
