"""What the agent tells its operators (agent.telemetry): one note per claim, call and commit, with the run's numbers;
a listener that fails never fails the run, nor makes a stored reply look unstored (spooled)."""

from __future__ import annotations

import pytest

from dayflow_tui.agent import telemetry
from dayflow_tui.agent.runs import run_brief
from dayflow_tui.store import spool_files


@pytest.fixture
def heard():
    notes: list[tuple[str, dict]] = []

    def listener(event, fields):
        notes.append((event, dict(fields)))

    telemetry.listen(listener)
    yield notes
    telemetry.unlisten(listener)


def test_each_call_and_commit_is_told_once_with_its_numbers(store, counting_client, heard):
    result = run_brief(store, client=counting_client)
    calls = [f for e, f in heard if e == "model.call"]
    commits = [f for e, f in heard if e == "step.committed"]
    assert len(calls) == counting_client.calls == result.steps and all(c["outcome"] == "ok" for c in calls)
    assert [c["step"] for c in commits] == list(range(1, result.steps + 1))
    run = store.get_run(result.run_id)
    assert sum(c["input_tokens"] for c in commits) == run.input_tokens
    assert sum(c["output_tokens"] for c in commits) == run.output_tokens
    assert all(c["agent"] == "brief" and c["duration_s"] >= 0 for c in commits)


def test_a_failing_listener_never_fails_the_run(store, counting_client):
    def broken(event, fields):
        raise RuntimeError("a metrics backend that fell over")

    telemetry.listen(broken)
    try:
        result = run_brief(store, client=counting_client)
    finally:
        telemetry.unlisten(broken)
    assert result.status == "done" and counting_client.calls == result.steps
    assert spool_files() == 0  # no committed reply was taken for an unstored one
