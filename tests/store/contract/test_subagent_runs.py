"""subagent_runs: the runs a run's calls started, oldest first; its forks are not among them."""

from dayflow_tui.store import Run, RunStatus
from dayflow_tui.store.tables.approvals import CallToAsk

from .helpers import call, held_run, reply


def test_the_runs_a_runs_calls_started_oldest_first_without_its_forks(store):
    parent = store.create_run("parent", model="offline", run_id="treeparent01")
    assert store.subagent_runs(parent.id) == []
    first, lease_a = store.create_child_run(parent.id, "toolu_a", "look it up", model="offline")
    second, lease_b = store.create_child_run(parent.id, "toolu_b", "write it", model="offline")
    store.create_run("a fork of it", model="offline", run_id="treefork0001")
    Run.update(parent_id=parent.id).where(Run.id == "treefork0001").execute()  # a fork: a parent, no call
    assert [r.id for r in store.subagent_runs(parent.id)] == sorted([first.id, second.id],
                                                                   key=lambda i: (store.get_run(i).created_at, i))
    assert store.subagent_runs(first.id) == []
    store.release(lease_a)
    store.release(lease_b)


def test_the_decision_that_frees_a_child_queues_the_parent_that_waited_only_on_it(store):
    parent, parent_lease = held_run(store, "treewait0001")
    store.append_step(parent.id, reply(1, tool=call("toolu_p", "researcher", task="x")), lease=parent_lease)
    child, child_lease = store.create_child_run(parent.id, "toolu_p", "x", model="offline")
    store.append_step(child.id, reply(1, tool=call("tu_c", "send_mail", to="a@example.com")), lease=child_lease)
    store.wait_for_approval(child.id, 1, [CallToAsk("tu_c", "send_mail", {"to": "a@example.com"}, waits=True)],
                            child_lease)
    store.wait_for_approval(parent.id, 1, [CallToAsk("toolu_p", "researcher", {"task": "x"}, waits=False)],
                            parent_lease)
    assert (store.get_run(parent.id).status, store.get_run(child.id).status) == ("waiting", "waiting")
    assert [r.id for _, r in store.pending_approvals()] == [child.id]  # the parent asks nothing itself
    store.decide(child.id, "tu_c", approve=True, by="ann", host="h")
    assert store.get_run(child.id).status == RunStatus.QUEUED.value
    assert store.get_run(parent.id).status == RunStatus.QUEUED.value


def test_runs_below_is_the_whole_tree_a_level_at_a_time_nearest_first(store):
    """runs_below: children, then their children (forks anywhere left out); a leaf has nothing below it."""
    root = store.create_run("root", model="offline", run_id="treeroot0001")
    child, lease_c = store.create_child_run(root.id, "toolu_c", "c", model="offline")
    grandchild, lease_g = store.create_child_run(child.id, "toolu_g", "g", model="offline")
    store.create_run("a fork of the child", model="offline", run_id="treefork0002")
    Run.update(parent_id=child.id).where(Run.id == "treefork0002").execute()
    assert [r.id for r in store.runs_below(root.id)] == [child.id, grandchild.id]
    assert [r.id for r in store.runs_below(child.id)] == [grandchild.id]
    assert store.runs_below(grandchild.id) == []
    store.release(lease_c)
    store.release(lease_g)
