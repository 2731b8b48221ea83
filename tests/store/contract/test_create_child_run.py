"""create_child_run: a subagent's run for a parent's call, made once whatever is retried or crashes."""

from dayflow_tui.store import RunStatus


def test_one_call_has_one_child_made_and_leased_once(store):
    parent = store.create_run("parent", model="offline", run_id="parent000001")
    child, lease = store.create_child_run(parent.id, "toolu_a", "look it up", model="offline", max_steps=4)
    assert lease is not None and lease.run_id == child.id
    assert (child.parent_id, child.parent_call_id, child.status, child.max_steps) == (
        parent.id, "toolu_a", RunStatus.RUNNING.value, 4)
    again, no_lease = store.create_child_run(parent.id, "toolu_a", "look it up", model="offline")
    assert again.id == child.id and no_lease is None  # the same call: the same child, not claimed twice
    other, other_lease = store.create_child_run(parent.id, "toolu_b", "something else", model="offline")
    assert other.id != child.id and other_lease is not None
    store.release(lease)
    store.release(other_lease)
