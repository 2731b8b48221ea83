"""wait_for_approval: the step's calls are recorded and the run waits, its lease given up, in one commit."""

from dayflow_tui.store.tables.approvals import CallToAsk, input_hash

from .helpers import call, held_run, reply


def waiting_run(store, run_id, *, calls=2):
    run, lease = held_run(store, run_id)
    blocks = [call(f"tu_{i}", "send_mail", to=f"p{i}@example.com") for i in range(1, calls + 1)]
    store.append_step(run.id, reply(1, tool=blocks[0]), lease=lease)
    asks = [CallToAsk(b["id"], b["name"], b["input"], waits=True) for b in blocks]
    asks.append(CallToAsk("tu_auto", "lookup", {"q": "x"}, waits=False, result={"content": "found"}))
    store.wait_for_approval(run.id, 1, asks, lease)
    return run, lease


def test_the_run_waits_without_an_owner_and_its_calls_are_pending(store):
    run, lease = waiting_run(store, "wait00000001")
    after = store.get_run(run.id)
    assert after.status == "waiting" and after.lease_token is None and after.owner_pid is None
    rows = store.approvals(run.id, 1)
    assert [(r.tool_use_id, r.state) for r in rows] == [("tu_1", "pending"), ("tu_2", "pending"), ("tu_auto", "auto")]
    assert rows[0].input_hash == input_hash({"to": "p1@example.com"})
    assert store.waiting_count() == 1
    assert [(a.tool_use_id, r.id) for a, r in store.pending_approvals()] == [("tu_1", run.id), ("tu_2", run.id)]
    assert store.heartbeat(lease) is False  # the lease was given up with the wait
