"""fork_run: a new run holding a copy of the parent's first K steps; the parent untouched."""

import json

import pytest

from dayflow_tui.config.errors import UsageError
from dayflow_tui.store.tables.forks import ForkPlan

from .helpers import call, held_run, reply


def _parent(store, run_id):
    run, lease = held_run(store, run_id)
    store.append_step(run.id, reply(1, tool=call("tu_1"), input_tokens=100), lease=lease)
    store.set_tool_results(run.id, 1, [{"type": "tool_result", "tool_use_id": "tu_1", "content": "a"}], lease=lease)
    store.append_step(run.id, reply(2, "end", input_tokens=50), lease=lease, final_status="done", final_text="end")
    return run


def test_a_fork_copies_the_first_k_steps_byte_for_byte(store):
    parent = _parent(store, "forkparent01")
    fork = store.fork_run(parent.id, ForkPlan(at=1), run_id="forkchild001")
    assert (fork.status, fork.parent_id, fork.forked_at, fork.step_count) == ("forked", parent.id, 1, 1)
    [copied] = store.steps(fork.id)
    [original, _] = store.steps(parent.id)
    assert (copied.assistant, copied.tool_results) == (original.assistant, original.tool_results)
    assert fork.input_tokens == 100
    assert store.forks_of([parent.id]) == {parent.id: [store.get_run(fork.id)]}


def test_a_changed_result_lands_in_the_fork_only(store):
    parent = _parent(store, "forkparent02")
    fork = store.fork_run(parent.id, ForkPlan(at=1, results={(1, "tu_1"): "changed"}))
    assert json.loads(store.step_at(fork.id, 1).tool_results)[0]["content"] == "changed"
    assert json.loads(store.step_at(parent.id, 1).tool_results)[0]["content"] == "a"


def test_a_fork_point_out_of_range_writes_nothing(store):
    parent = _parent(store, "forkparent03")
    with pytest.raises(UsageError, match="nothing was written"):
        store.fork_run(parent.id, ForkPlan(at=3), run_id="forkchild003")
    assert store.count_runs(search="forkchild003") == 0


def test_copied_steps_are_not_spent_twice(store):
    parent = _parent(store, "forkparent04")
    store.fork_run(parent.id, ForkPlan(at=2), run_id="forkchild004")
    spent = sum(g.input_tokens for g in store.token_groups())
    assert spent == 150  # the parent's two calls; the fork's copies were paid for once


def test_a_fork_of_a_fork_carries_a_call_its_grandparent_started(store):
    # Found by the simulation (seed 20261205:postgres:512): F1 is forked from A at the step of a plain call,
    # A then starts that call (and may have done it), and F2 is forked from F1: the call is the same call
    # (step 1 of F1 is A's), so F2 must answer "outcome unknown" rather than run it a second time.
    a, lease = held_run(store, "forkgrand001")
    block = {"type": "tool_use", **call("tu_1")}
    store.append_step(a.id, reply(1, tool=call("tu_1")), lease=lease)
    first = store.fork_run(a.id, ForkPlan(at=1), run_id="forkgrand002")
    store.start_call(a.id, 1, block, lease)
    second = store.fork_run(first.id, ForkPlan(at=1), run_id="forkgrand003")
    assert [r.tool_use_id for r in store.approvals(first.id, 1) if r.started_at] == []  # made before the start
    assert [r.tool_use_id for r in store.approvals(second.id, 1) if r.started_at] == ["tu_1"]


def test_a_fork_is_titled_as_its_parent_was_at_the_fork_point(store):
    from .helpers import call, held_run, reply


    run, lease = held_run(store, "ftitle000001")
    store.append_step(run.id, reply(1, tool=call("tu_1", name="set_title", title="First title")), lease=lease)
    store.append_step(run.id, reply(2), lease=lease)
    store.append_step(run.id, reply(3, tool=call("tu_3", name="set_title", title="Second title")), lease=lease)
    store.set_title(run.id, "Second title")
    assert store.fork_run(run.id, ForkPlan(at=2), run_id="ftitle000002").title == "First title"
    assert store.fork_run(run.id, ForkPlan(at=3), run_id="ftitle000003").title == "Second title"
    # Given by the agent at creation and never changed by a call: the fork keeps it.
    other = store.create_run("task", model="offline", run_id="ftitle000004", agent={"title": "Agent's title"})
    assert store.fork_run(other.id, ForkPlan(at=0), run_id="ftitle000005").title == "Agent's title"
    # Set by a call after the fork point only: the fork has none (its title is made from the task).
    assert store.fork_run(run.id, ForkPlan(at=0), run_id="ftitle000006").title is None
