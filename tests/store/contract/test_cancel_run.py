"""cancel_run: a run ends ``cancelled`` once; a run a live process drives is asked, and no paid reply is lost."""

import pytest

from dayflow_tui.config.errors import CancelRefused, DecisionRefused, RunCancelled
from dayflow_tui.store import Run
from dayflow_tui.store.tables.approvals import CallToAsk

from .helpers import call, held_run, reply


def test_a_queued_run_is_cancelled_at_once_with_who_and_why_and_never_claimed(store):
    store.create_run("a task", model="offline", run_id="canc00000001")
    outcome = store.cancel_run("canc00000001", by="ana@desk", reason="wrong task")
    assert (outcome.asked, outcome.was) == (False, "queued")
    run = store.get_run("canc00000001")
    assert run.status == "cancelled" and run.cancelled_by == "ana@desk" and run.cancel_reason == "wrong task"
    assert run.error == "cancelled by ana@desk: wrong task" and run.cancel_at is not None
    assert store.claim_next() is None
    with pytest.raises(RunCancelled, match="cancelled by ana@desk: wrong task.*nothing ran: start a new run"):
        store.claim("canc00000001")
    assert store.get_run("canc00000001").status == "cancelled"


def test_an_ended_run_is_refused_and_left_as_it_was(store):
    for n, status in enumerate(("done", "failed", "budget"), start=2):
        store.create_run("t", model="offline", run_id=f"canc0000000{n}", status=status)
        with pytest.raises(CancelRefused, match=f"canc0000000{n}"):
            store.cancel_run(f"canc0000000{n}", by="ana@desk")
        assert store.get_run(f"canc0000000{n}").status == status
        assert store.get_run(f"canc0000000{n}").cancel_at is None
    store.create_run("t", model="offline", run_id="canc00000005")
    store.cancel_run("canc00000005", by="ana@desk", reason="first")
    with pytest.raises(CancelRefused, match=r"cancelled already \(cancelled by ana@desk: first\)"):
        store.cancel_run("canc00000005", by="bo@desk", reason="second")
    assert store.get_run("canc00000005").cancelled_by == "ana@desk"


def test_a_driven_run_is_asked_and_its_reply_in_flight_is_still_committed(store):
    run, lease = held_run(store, "canc00000006")
    outcome = store.cancel_run(run.id, by="ana@desk", reason="stop")
    assert outcome.asked and "pid" in outcome.holder
    asked = store.get_run(run.id)
    assert asked.status == "running" and asked.lease_token == lease.token and asked.cancel_at is not None
    assert lease.cancel is None  # the driver learns at its next commit or heartbeat, not before
    store.append_step(run.id, reply(1, tool=call("tu_1")), lease=lease)  # the paid reply lands
    assert lease.cancel == "cancelled by ana@desk: stop"
    assert store.step_count(run.id) == 1
    # Asking again changes nothing: one cancel, its first words.
    again = store.cancel_run(run.id, by="bo@desk", reason="me too")
    assert again.asked and store.get_run(run.id).cancelled_by == "ana@desk"
    store.finish_run(run.id, "cancelled", error=lease.cancel, lease=lease)
    assert store.get_run(run.id).status == "cancelled"


def test_a_heartbeat_and_the_tool_results_commit_see_the_cancel_too(store):
    run, lease = held_run(store, "canc00000007")
    store.append_step(run.id, reply(1, tool=call("tu_1")), lease=lease)
    store.cancel_run(run.id, by="dashboard", reason=None)
    assert store.heartbeat(lease) is True and lease.cancel == "cancelled by dashboard"
    run2, lease2 = held_run(store, "canc00000008")
    store.append_step(run2.id, reply(1, tool=call("tu_1")), lease=lease2)
    store.cancel_run(run2.id, by="dashboard", reason="x")
    store.set_tool_results(run2.id, 1, [{"type": "tool_result", "tool_use_id": "tu_1", "content": "ok"}],
                           lease=lease2)
    assert lease2.cancel == "cancelled by dashboard: x"


def test_a_run_whose_owner_is_gone_is_cancelled_at_once_and_its_lease_cleared(store):
    run, lease = held_run(store, "canc00000009")
    Run.update(owner_host="gone-host", heartbeat_at="2000-01-01T00:00:00.000Z").where(Run.id == run.id).execute()
    outcome = store.cancel_run(run.id, by="ana@desk", reason="stuck")
    assert (outcome.asked, outcome.was) == (False, "running")
    after = store.get_run(run.id)
    assert after.status == "cancelled" and after.lease_token is None and after.owner_host is None
    assert store.heartbeat(lease) is False  # the old owner, were it alive, has lost the run


def test_a_request_whose_driver_died_is_ended_by_the_next_claim(store):
    run, lease = held_run(store, "canc00000010")
    store.cancel_run(run.id, by="ana@desk", reason="stop")
    store.release(lease)  # its driver gave the run up before it saw the cancel (a stop, a crash)
    taken = store.claim_next()
    assert taken.run_id == run.id and taken.cancel == "cancelled by ana@desk: stop"


def test_a_waiting_run_is_cancelled_and_its_calls_are_no_longer_decided(store):
    run, lease = held_run(store, "canc00000011")
    block = call("tu_1", "send_mail", to="p@example.com")
    store.append_step(run.id, reply(1, tool=block), lease=lease)
    store.wait_for_approval(run.id, 1, [CallToAsk("tu_1", "send_mail", block["input"], waits=True)], lease)
    assert store.pending_approvals()
    assert not store.cancel_run(run.id, by="ana@desk", reason="no mail").asked
    assert store.get_run(run.id).status == "cancelled"
    assert store.pending_approvals() == []
    with pytest.raises(DecisionRefused, match="cancelled by ana@desk: no mail"):
        store.decide(run.id, "tu_1", approve=True, by="bo", host="desk")
    assert store.approvals(run.id, 1)[0].state == "pending"


def test_a_fork_is_cancelled_and_a_fork_of_a_cancelled_run_is_a_new_run(store):
    from dayflow_tui.store.tables.forks import ForkPlan

    run, lease = held_run(store, "canc00000012")
    store.append_step(run.id, reply(1, tool=call("tu_1")), lease=lease)
    store.cancel_run(run.id, by="ana@desk")
    store.finish_run(run.id, "cancelled", error=lease.cancel, lease=lease)
    store.release(lease)
    fork = store.fork_run(run.id, ForkPlan(at=1), run_id="canc00000013")
    assert fork.status == "forked" and fork.cancel_at is None
    assert not store.cancel_run(fork.id, by="ana@desk").asked
    assert store.get_run(fork.id).status == "cancelled"


def test_a_cancelled_parent_cancels_the_subagents_runs_under_it_and_leaves_ended_ones(store):
    parent, lease = held_run(store, "canctree0001")
    store.append_step(parent.id, reply(1, tool=call("toolu_a", "researcher", task="x")), lease=lease)
    waiting, child_lease = store.create_child_run(parent.id, "toolu_a", "x", model="offline")
    store.append_step(waiting.id, reply(1, tool=call("tu_c", "send_mail", to="a@example.com")), lease=child_lease)
    store.wait_for_approval(waiting.id, 1, [CallToAsk("tu_c", "send_mail", {"to": "a@example.com"}, waits=True)],
                            child_lease)
    finished, done_lease = store.create_child_run(parent.id, "toolu_b", "y", model="offline")
    store.finish_run(finished.id, "done", final_text="y", lease=done_lease)
    store.wait_for_approval(parent.id, 1, [CallToAsk("toolu_a", "researcher", {"task": "x"}, waits=False)], lease)
    store.cancel_run(parent.id, by="ana@desk", reason="enough")
    assert store.get_run(parent.id).status == "cancelled"
    assert store.get_run(waiting.id).status == "cancelled" and store.pending_approvals() == []
    assert store.get_run(finished.id).status == "done"
    with pytest.raises(DecisionRefused):
        store.decide(waiting.id, "tu_c", approve=True, by="ann", host="h")
