"""views.run_tree: a parent's subagent tree read from the store (both backends) and rolled up once for every
front end; the tree is made by really driving the agents on the loopback API (``tests/subagent_tree.py``)."""

from __future__ import annotations

from dataclasses import replace

from dayflow_tui.money.cost import run_costs
from dayflow_tui.store.tables.forks import ForkPlan
from dayflow_tui.views.run_tree import SEVERITY, read_rollups, read_tree, roll_up, worse

from ..subagent_tree import PARENT_ID, drive_tree


def test_the_tree_is_read_level_by_level_and_rolled_up_over_every_run(store, api, tmp_path):
    drive_tree(store, tmp_path, api)
    tree = read_tree(store, PARENT_ID[:8])  # a prefix finds the run, as everywhere
    shape = [(depth, node.run.agent, node.status, node.run.parent_call_id) for node, depth in tree.walk()]
    assert shape == [(0, "writer", "done", None), (1, "researcher", "done", "toolu_research01"),
                     (2, "checker", "done", "toolu_verify01"), (1, "checker", "failed", "toolu_check01")]
    ids = [node.run.id for node, _ in tree.walk()]
    costs = run_costs(store, ids)
    rollup = roll_up(tree)
    assert rollup.runs == 4 and rollup.steps == 6 == sum(store.get_run(i).step_count for i in ids)
    assert rollup.total == sum(c.total for c in costs.values()) and rollup.total > costs[PARENT_ID].total
    assert (rollup.worst, rollup.own_status, rollup.differs) == ("failed", "done", True)
    assert set(tree.child_for_call()) == {"toolu_research01", "toolu_check01"}
    # A fork of the parent is no part of its tree; a run with no subagents has no roll-up.
    fork = store.fork_run(PARENT_ID, ForkPlan(at=1))
    rollups = read_rollups(store, [store.get_run(i) for i in ids] + [fork])
    assert set(rollups) == {PARENT_ID, ids[1]}
    assert rollups[PARENT_ID] == rollup and rollups[ids[1]].runs == 2 and not rollups[ids[1]].differs
    assert read_tree(store, fork.id).children == ()


def test_the_worst_status_is_what_needs_a_person_then_what_stopped():
    assert worse("done", "waiting") == worse("failed", "waiting") == "waiting"
    assert worse("done", "failed") == "failed" and worse("running", "budget") == "budget"
    assert worse("done", "garbage[/]") == "done"  # a damaged row's word never becomes the tree's status
    assert SEVERITY[0] == "waiting" and SEVERITY[-1] == "done"


def test_a_waiting_grandchild_shows_at_the_root(store, api, tmp_path):
    drive_tree(store, tmp_path, api)
    tree = read_tree(store, PARENT_ID)
    researcher = tree.children[0]
    waiting = replace(researcher, children=(replace(researcher.children[0], status="waiting"),))
    assert roll_up(replace(tree, children=(waiting, tree.children[1]))).worst == "waiting"
