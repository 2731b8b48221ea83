"""subagents_of: the runs a run's tool calls started (its subagents), oldest first; its forks are not among them."""

from dayflow_tui.store.tables.forks import ForkPlan

from .helpers import call, held_run, reply


def test_the_children_a_call_started_are_listed_under_their_parent_and_forks_are_not(store):
    parent, lease = held_run(store, "treeparent01")
    store.append_step(parent.id, reply(1, tool=call("tu_1")), lease=lease)
    first, first_lease = store.create_child_run(parent.id, "toolu_a", "look it up", model="offline")
    second, second_lease = store.create_child_run(parent.id, "toolu_b", "write it", model="offline")
    grandchild, grand_lease = store.create_child_run(first.id, "toolu_c", "deeper", model="offline")
    fork = store.fork_run(parent.id, ForkPlan(at=1), run_id="treefork0001")
    found = store.subagents_of([parent.id, first.id, second.id, fork.id, "no-such-run"])
    assert {k: [r.id for r in v] for k, v in found.items()} == {
        parent.id: [first.id, second.id], first.id: [grandchild.id]}  # oldest first; the fork is not a child
    assert found[parent.id][0].parent_call_id == "toolu_a"
    assert store.subagents_of([]) == {}
    many = [f"missing{n:05d}" for n in range(1200)] + [parent.id]  # more ids than one IN list takes
    assert [r.id for r in store.subagents_of(many)[parent.id]] == [first.id, second.id]
    for held in (lease, first_lease, second_lease, grand_lease):
        store.release(held)
