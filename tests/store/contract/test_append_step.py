"""append_step: a paid reply and the run's counters in one transaction, under the lease, never twice."""

import pytest

from dayflow_tui.config.errors import RunBusy

from .helpers import held_run, reply, taken_over


def test_a_step_is_stored_as_sent_and_adds_its_tokens_to_the_run(store):
    run, lease = held_run(store, "append000001")
    store.append_step(run.id, reply(1, "hello", input_tokens=100, output_tokens=20), lease=lease)
    store.append_step(run.id, reply(2, "again", input_tokens=7, output_tokens=3), lease=lease)
    [first, second] = store.steps(run.id)
    assert first.assistant == '[{"type":"text","text":"hello"}]'  # the compact bytes, exactly
    after = store.get_run(run.id)
    assert (after.step_count, after.input_tokens, after.output_tokens) == (2, 107, 23)
    assert second.n == 2 and second.created_at


def test_a_final_step_finishes_the_run_in_the_same_commit(store):
    run, lease = held_run(store, "append000002")
    store.append_step(run.id, reply(1, "done"), lease=lease, final_status="done", final_text="done")
    after = store.get_run(run.id)
    assert (after.status, after.final_text, after.attempts) == ("done", "done", 0)


def test_a_committed_step_restarts_the_attempt_count(store):
    run, lease = held_run(store, "append000003")
    store.record_failed_attempt(run.id, lease, "boom", max_attempts=5, backoff_s=0)
    store.append_step(run.id, reply(1), lease=lease)
    after = store.get_run(run.id)
    assert after.attempts == 1 and after.not_before is None


def test_a_driver_that_lost_its_lease_commits_nothing(store):
    run, lease = held_run(store, "append000004")
    stolen = taken_over(store, lease)
    with pytest.raises(RunBusy):
        store.append_step(run.id, reply(1), lease=lease)
    assert store.steps(run.id) == [] and store.get_run(run.id).lease_token == stolen.token


def test_a_step_number_is_stored_once(store):
    run, lease = held_run(store, "append000005")
    store.append_step(run.id, reply(1), lease=lease)
    with pytest.raises(Exception):
        store.append_step(run.id, reply(1, "other"), lease=lease)
    assert [s.assistant for s in store.steps(run.id)] == ['[{"type":"text","text":"ok"}]']
    assert store.get_run(run.id).step_count == 1  # the refused insert took its counter update with it
