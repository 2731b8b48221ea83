"""Money in the dashboard, driven through Pilot: the confirm step before a costly resume, a budget set from
the dashboard, what a resume saved, the spend panel and the tokens/dollars switch."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from textual.widgets import Input, OptionList, Sparkline

from dayflow_tui.money import cost as costs
from dayflow_tui.money.cost import format_usd
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.cost_view import ResumeDialog
from dayflow_tui.tui.screens.transcript import TranscriptScreen

from ..conftest import CountingClient
from ..tui_helpers import SIZE, open_run, screen_text, settle, wait_for

pytestmark = pytest.mark.anyio
PRICED_OFFLINE = '{"offline": {"input": 3, "output": 15}}'  # the offline model priced like Claude Sonnet


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(autouse=True)
def priced(monkeypatch):
    monkeypatch.setenv("DAYFLOW_PRICES", PRICED_OFFLINE)


async def _open(pilot, run_id: str) -> TranscriptScreen:
    return await open_run(pilot, run_id)


async def test_a_resume_over_the_threshold_waits_for_a_confirm_and_cancel_pays_nothing(store, monkeypatch):
    monkeypatch.setenv("DAYFLOW_RESUME_CONFIRM_USD", "0.001")
    demo_data.interrupted_run(store, "run-crash-001", demo_data.BASE_TIME, after_step=1)
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(pilot, "run-crash-001")
        await wait_for(pilot, lambda: screen.query_one("#resume-estimate").display)
        assert "next call ≈ $" in screen_text(app)
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ResumeDialog))
        assert "above the $0.0010 asked about in settings" in screen_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, TranscriptScreen))
        await pilot.pause(0.3)
        assert client.calls == 0 and not app.is_driving and store.get_run("run-crash-001").step_count == 1

        # Again, with a budget typed in: room for one more call, not two.
        c2 = Decimal("0.0147")  # step 2 costs about this; the brief's step 3 about $0.0082
        budget = costs.run_cost(store, "run-crash-001").total + c2 + Decimal("0.002")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ResumeDialog))
        app.screen.query_one("#resume-budget", Input).value = "not money"
        await pilot.click("#resume-go")
        await wait_for(pilot, lambda: "not an amount of dollars" in screen_text(app))
        await pilot.pause(0.3)  # a button ignores clicks during its 0.2 s press effect
        app.screen.query_one("#resume-budget", Input).value = f"{budget}"
        await pilot.click("#resume-go")
        await wait_for(pilot, lambda: store.get_run("run-crash-001").status == "budget" and not app.is_driving)
        run = store.get_run("run-crash-001")
        assert client.calls == 1 and run.step_count == 2
        assert run.budget_usd == budget.quantize(Decimal("0.000001"))
        spent = costs.run_cost(store, run.id).total
        assert spent <= budget
        await wait_for(pilot, lambda: screen.query_one("#saved").display)
        text = screen_text(app)
        summary = str(screen.query_one("#run-summary").render())
        assert f"budget {format_usd(spent)} / {format_usd(budget)}" in summary  # spent / budget
        assert "Resumed here: paid $" in text and "the 1 committed step ($0.0035) was not paid again" in text


async def test_a_cheap_resume_goes_ahead_without_asking(store):
    demo_data.interrupted_run(store, "run-crash-001", demo_data.BASE_TIME, after_step=1)
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("r")  # the default threshold is $0.10; this call costs about a cent
        await wait_for(pilot, lambda: store.get_run("run-crash-001").status == "done" and not app.is_driving)
        assert client.calls == 2 and not isinstance(app.screen, ResumeDialog)


async def test_the_spend_panel_and_the_tokens_or_dollars_switch(store, monkeypatch):
    monkeypatch.setenv("DAYFLOW_FAKE_NOW", demo_data.SCREEN_TIME)  # the same day as the run
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    demo_data.done_run(store, "run-done-0002", demo_data.BASE_TIME - timedelta(days=3))
    total = costs.run_cost(store, "run-done-0001").total
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: "…" not in str(app.screen.query_one("#spend").render()))
        text = screen_text(app)
        older = costs.run_cost(store, "run-done-0002").total
        assert f"spend: today {format_usd(total)} · 7 days {format_usd(total + older)}" in text
        row = next(line for line in text.splitlines() if line.lstrip().startswith("run-done-0001"))
        assert format_usd(total) in row  # the cost column
        screen = await _open(pilot, "run-done-0001")
        chart = screen.query_one(Sparkline)
        assert list(chart.data) == [v.input_tokens + v.output_tokens for v in screen.views]
        await pilot.press("$")
        assert list(chart.data) == [float(v.cost.total) for v in screen.views]
        prompt = str(screen.query_one("#steps", OptionList).get_option_at_index(0).prompt)
        assert format_usd(screen.views[0].cost) in prompt
        assert f"run {format_usd(total)}" in screen_text(app) or format_usd(total) in screen_text(app)
