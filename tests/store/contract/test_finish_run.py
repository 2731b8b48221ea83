"""finish_run, mark_running, update_limits, record_agent_change: the run's own columns, under the lease."""

import pytest

from dayflow_tui.config.errors import RunBusy

from .helpers import held_run, taken_over


def test_a_run_finishes_with_its_text_or_error(store):
    run, lease = held_run(store, "finish000001")
    store.finish_run(run.id, "failed", error="the API said no", lease=lease)
    after = store.get_run(run.id)
    assert (after.status, after.error, after.final_text) == ("failed", "the API said no", None)


def test_a_driver_that_lost_its_lease_changes_nothing(store):
    run, lease = held_run(store, "finish000002")
    taken_over(store, lease)
    with pytest.raises(RunBusy):
        store.finish_run(run.id, "done", final_text="x", lease=lease)
    with pytest.raises(RunBusy):
        store.mark_running(run.id, lease)
    assert store.get_run(run.id).status == "running"


def test_mark_running_clears_the_last_error(store):
    run, lease = held_run(store, "finish000003")
    store.record_failed_attempt(run.id, lease, "boom", max_attempts=5, backoff_s=0)
    store.mark_running(run.id, lease)
    assert store.get_run(run.id).error is None


def test_limits_change_only_where_given(store):
    run = store.create_run("t", model="offline", run_id="finish000004", max_steps=5, compact_at=1000)
    store.update_limits(run.id, budget_tokens=900)
    store.update_limits(run.id, compact_at=0)
    after = store.get_run(run.id)
    assert (after.max_steps, after.budget_tokens, after.compact_at) == (5, 900, None)


def test_a_new_agent_definition_is_recorded(store):
    run, lease = held_run(store, "finish000005")
    store.record_agent_change(run.id, {"agent_fingerprint": "f" * 16, "status": "done"}, lease)
    after = store.get_run(run.id)
    assert after.agent_fingerprint == "f" * 16 and after.status == "running"  # only the agent's columns
