"""A dollar budget stops a run before the call that would cross it: fresh, after a resume, after a crash."""

from __future__ import annotations

import json
import os
import subprocess
from decimal import Decimal

import pytest
from anthropic.types import Message

from dayflow_tui.money import cost as costs
from dayflow_tui.agent.events import MAX_TOKENS
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.config.errors import UsageError
from dayflow_tui.money.cost import Usage
from dayflow_tui.store import open_store
from dayflow_tui.store.models import database_proxy

from ..conftest import CountingClient, dayflow_cmd
from ..loopback_api import LoopbackAPI

MODEL = "claude-sonnet-4-5"


@pytest.fixture
def reference(store, tmp_path) -> list[Decimal]:
    """What each of the three calls of the brief costs on MODEL with no budget (the offline model's answers).

    Measured in a database of its own: the tasks a run creates change what the next run reads.
    """
    other = open_store(tmp_path / "reference.db")
    try:
        result = run_brief(other, model=MODEL, client=CountingClient())
        assert result.status == "done" and result.calls == 3
        per_step = [costs.step_cost(step, MODEL).total for step in other.steps(result.run_id)]
        assert result.cost.total == sum(per_step) and all(c > 0 for c in per_step)
    finally:
        other.close()
        database_proxy.initialize(store.db)  # the models follow one database at a time: the test's again
    return per_step


def _spent(store, run_id: str) -> Decimal:
    return costs.run_cost(store, run_id).total


def test_a_fresh_run_stops_before_the_call_that_would_cross_its_budget(store, reference):
    c1, c2, c3 = reference
    budget = c1 + c2 + c3 / 2  # room for two calls; the third would cross it
    client = CountingClient()
    result = run_brief(store, model=MODEL, client=client, budget_usd=budget)
    assert (result.status, result.calls, client.calls) == ("budget", 2, 2)
    assert result.error.startswith("dollar budget reached: spent $")
    spent = _spent(store, result.run_id)
    assert spent == c1 + c2 <= budget < spent + c3
    run = store.get_run(result.run_id)
    assert (run.status, run.budget_usd, run.error) == ("budget", budget.quantize(Decimal("0.000001")), result.error)
    # Each call went out with a reply cap under which even a cold cache could not have crossed the budget.
    before = Decimal(0)
    for request, step, paid in zip(client.requests, store.steps(result.run_id), (c1, c2)):
        cap = request["max_tokens"]
        assert step.output_tokens <= cap < MAX_TOKENS
        worst = costs.price_call(MODEL, Usage(step.input_tokens, step.input_tokens, 0, cap))
        assert before + worst.total <= budget
        before += paid


def test_no_budget_lets_a_run_pass_it_by_a_call(store, reference):
    """Swept over budgets from a fraction of one call to the whole run: spend never passes the budget."""
    total = sum(reference)
    for tenth in range(1, 13):
        budget = total * tenth / 10
        result = run_brief(store, model=MODEL, client=CountingClient(), budget_usd=budget)
        assert _spent(store, result.run_id) <= budget, (tenth, result)
    generous = run_brief(store, model=MODEL, client=CountingClient(), budget_usd=total * 2)
    assert (generous.status, generous.calls) == ("done", 3)


def test_a_resumed_run_counts_what_it_spent_before(store, reference):
    """The budget is the whole run's: a resume checks it against the steps paid before it."""
    c1, c2, c3 = reference
    stopper = CountingClient()  # stopped between steps after one call, as Ctrl-C in the dashboard does
    first = run_brief(store, model=MODEL, client=stopper, budget_usd=c1 * 100, should_stop=lambda: stopper.calls >= 1)
    assert (first.status, first.calls) == ("running", 1)
    client = CountingClient()
    second = resume(first.run_id, store=store, client=client, budget_usd=c1 + c2 + c3 / 2)
    assert (second.status, second.calls, client.calls) == ("budget", 1, 1)
    assert second.replayed_cost.total == c1 and second.paid.total == c2
    assert _spent(store, first.run_id) == c1 + c2
    done = resume(first.run_id, store=store, client=CountingClient(), budget_usd=(c1 + c2 + c3) * 2)
    assert (done.status, done.calls, done.cost.total) == ("done", 1, c1 + c2 + c3)


def test_the_budget_survives_a_crash_and_a_resume_without_the_flag(store, reference):
    """Set once on the run (schema 4), checked by a later process that was never told."""
    c1, c2, c3 = reference
    budget = c1 + c2 + c3 / 2
    with pytest.raises(SystemExit):
        run_brief(store, model=MODEL, client=CountingClient(), budget_usd=budget, crash_after_step=2)
    [run] = [r for r in store.list_runs() if r.budget_usd is not None]
    client = CountingClient()
    result = resume(run.id, store=store, client=client)
    assert (result.status, client.calls) == ("budget", 0)  # counting only this resume's spend would have called
    assert _spent(store, run.id) == c1 + c2 <= budget


class _RunsLong(CountingClient):
    """The offline model's answers, except that the second reply runs to whatever max_tokens allows."""

    def create(self, **request):
        message = super().create(**{**request, "stream": False})  # a whole reply, edited below
        if self.calls != 2:
            return message
        payload = message.to_dict(mode="json")
        payload["stop_reason"] = "max_tokens"
        payload["content"] = [{"type": "text", "text": "so much to say " * 20}]
        payload["usage"]["output_tokens"] = request["max_tokens"]
        return Message.model_validate(payload)


def test_a_reply_that_uses_the_whole_cap_still_stays_within_the_budget(store, reference):
    c1, c2, c3 = reference
    budget = c1 + c2 + c3 / 2
    client = _RunsLong()
    result = run_brief(store, model=MODEL, client=client, budget_usd=budget)
    assert (result.status, client.calls) == ("budget", 2)
    assert "the reply used all" in result.error
    assert _spent(store, result.run_id) <= budget


def test_a_dollar_budget_on_a_model_without_a_price_is_refused_before_anything_is_written(store):
    with pytest.raises(UsageError, match="no price is known for model 'mystery-model'"):
        run_brief(store, model="mystery-model", client=CountingClient(), budget_usd=Decimal("1"))
    assert store.list_runs() == []


def test_the_cli_stops_a_real_sdk_run_before_crossing_and_shows_spent_over_budget(db_target, tmp_path, reference):
    """`dayflow brief --budget-usd` through the real SDK against a loopback server that counts calls."""
    c1, c2, c3 = reference
    budget = c1 + c2 + c3 / 2
    with LoopbackAPI() as api:
        env = {**os.environ, **api.env(), "DAYFLOW_OFFLINE_DELAY": "0"}
        done = subprocess.run(dayflow_cmd("brief", "--model", MODEL, "--budget-usd", str(budget), "--db",
                                          str(db_target)), capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 3, done.stderr
        assert "stopped (budget): dollar budget reached" in done.stderr
        assert api.calls == 2
    listed = subprocess.run(dayflow_cmd("runs", "--json", "--db", str(db_target)), capture_output=True, text=True,
                            env=env, timeout=60)
    row = next(r for r in json.loads(listed.stdout) if r["budget_usd"] is not None)
    assert row["status"] == "budget" and row["cost_usd"] <= row["budget_usd"]
    assert row["cost_usd"] == pytest.approx(float(c1 + c2), abs=1e-6)
    text = subprocess.run(dayflow_cmd("runs", "--db", str(db_target)), capture_output=True, text=True, env=env,
                          timeout=60).stdout
    assert f"budget={costs.format_usd(c1 + c2)}/{costs.format_usd(budget)}" in text
