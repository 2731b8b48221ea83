"""set_tool_results: a step's tool results are recorded once, under the lease."""

import json

import pytest

from dayflow_tui.config.errors import RunBusy, StoreError

from .helpers import call, held_run, reply, taken_over


def test_results_are_kept_with_the_step_they_answer(store):
    run, lease = held_run(store, "results00001")
    store.append_step(run.id, reply(1, tool=call("tu_1")), lease=lease)
    results = [{"type": "tool_result", "tool_use_id": "tu_1", "content": "made"}]
    store.set_tool_results(run.id, 1, results, lease=lease)
    step = store.step_at(run.id, 1)
    assert json.loads(step.tool_results) == results and step.tools_done_at


def test_results_are_recorded_once(store):
    run, lease = held_run(store, "results00002")
    store.append_step(run.id, reply(1, tool=call("tu_1")), lease=lease)
    store.set_tool_results(run.id, 1, [], lease=lease)
    with pytest.raises(StoreError, match="already recorded"):
        store.set_tool_results(run.id, 1, [{"type": "text", "text": "other"}], lease=lease)
    assert store.step_at(run.id, 1).tool_results == "[]"


def test_a_driver_that_lost_its_lease_records_nothing(store):
    run, lease = held_run(store, "results00003")
    store.append_step(run.id, reply(1, tool=call("tu_1")), lease=lease)
    taken_over(store, lease)
    with pytest.raises(RunBusy):
        store.set_tool_results(run.id, 1, [], lease=lease)
    assert store.step_at(run.id, 1).tool_results is None
