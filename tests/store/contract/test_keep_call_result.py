"""The per-call journal: start_call before a plain call runs, keep_call_result and answer_call after."""

import json

import pytest

from dayflow_tui.config.errors import RunBusy

from .helpers import call, held_run, reply, taken_over
from .test_wait_for_approval import waiting_run


def test_a_started_call_is_marked_before_it_runs_and_its_result_kept_once(store):
    run, lease = held_run(store, "journal00001")
    block = call("tu_1")
    store.append_step(run.id, reply(1, tool=block), lease=lease)
    store.start_call(run.id, 1, {"type": "tool_use", **block}, lease)
    [row] = store.approvals(run.id, 1)
    assert (row.state, row.result) == ("auto", None) and row.started_at
    store.keep_call_result(run.id, 1, {"type": "tool_use", **block}, {"content": "first"}, lease)
    store.keep_call_result(run.id, 1, {"type": "tool_use", **block}, {"content": "second"}, lease)
    [row] = store.approvals(run.id, 1)
    assert json.loads(row.result) == {"content": "first"}  # a kept result is never replaced


def test_a_result_is_kept_without_a_start_mark_for_an_idempotent_call(store):
    run, lease = held_run(store, "journal00002")
    block = {"type": "tool_use", **call("tu_9")}
    store.append_step(run.id, reply(1, tool=call("tu_9")), lease=lease)
    store.keep_call_result(run.id, 1, block, {"content": "r"}, lease)
    [row] = store.approvals(run.id, 1)
    assert row.started_at is None and json.loads(row.result) == {"content": "r"}


def test_a_driver_that_lost_its_lease_keeps_nothing(store):
    run, lease = held_run(store, "journal00003")
    block = {"type": "tool_use", **call("tu_1")}
    store.append_step(run.id, reply(1, tool=call("tu_1")), lease=lease)
    taken_over(store, lease)
    with pytest.raises(RunBusy):
        store.keep_call_result(run.id, 1, block, {"content": "r"}, lease)
    assert store.approvals(run.id) == []


def test_an_approved_call_is_answered_once(store):
    run, _ = waiting_run(store, "journal00004", calls=1)
    store.decide(run.id, "tu_1", approve=True, by="ann", host="h")
    lease = store.claim(run.id)
    store.answer_call(run.id, "tu_1", {"content": "sent"}, lease)
    store.answer_call(run.id, "tu_1", {"content": "again"}, lease)
    assert json.loads(store.approvals(run.id)[0].result) == {"content": "sent"}
