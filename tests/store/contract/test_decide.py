"""decide: one person's decision on one waiting call, bound to its arguments; never a second one."""

import pytest

from dayflow_tui.config.errors import UsageError
from dayflow_tui.config.errors import DecisionRefused

from .test_wait_for_approval import waiting_run


def test_each_call_is_decided_once_and_the_last_decision_queues_the_run(store):
    run, _ = waiting_run(store, "decide000001")
    with pytest.raises(UsageError, match="2 calls waiting"):
        store.decide(run.id, None, approve=True, by="ann", host="h")
    first = store.decide(run.id, "tu_1", approve=True, by="ann", host="h")
    assert (first.state, first.decided_by) == ("approved", "ann") and store.get_run(run.id).status == "waiting"
    with pytest.raises(DecisionRefused, match="already approved by ann"):
        store.decide(run.id, "tu_1", approve=False, by="bob", host="h")
    second = store.decide(run.id, None, approve=False, by="bob", host="h", reason="no")
    assert (second.tool_use_id, second.state, second.reason) == ("tu_2", "denied", "no")
    assert store.get_run(run.id).status == "queued" and store.waiting_count() == 0


def test_a_decision_is_bound_to_the_arguments_seen(store):
    run, _ = waiting_run(store, "decide000002", calls=1)
    with pytest.raises(DecisionRefused, match="look again"):
        store.decide(run.id, "tu_1", approve=True, by="ann", host="h", expect_hash="00000000")
    row = store.approvals(run.id)[0]
    assert row.state == "pending"
    decided = store.decide(run.id, "tu_1", approve=True, by="ann", host="h", expect_hash=row.input_hash[:8],
                           edited_input={"to": "other@example.com"})
    assert decided.edited_input == '{"to":"other@example.com"}'


def test_a_run_with_nothing_waiting_refuses(store):
    run = store.create_run("t", model="offline", run_id="decide000003")
    with pytest.raises(DecisionRefused, match="no tool call waiting"):
        store.decide(run.id, None, approve=True, by="ann", host="h")
