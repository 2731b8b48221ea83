"""claim: one compare-and-swap on the lease; a live owner or a waiting run refuses it."""

import pytest

from dayflow_tui.config.errors import RunBusy

from .helpers import held_run, taken_over


def test_a_queued_run_is_claimed_and_counts_an_attempt(store):
    run = store.create_run("t", model="offline", run_id="claim0000001")
    lease = store.claim(run.id)
    after = store.get_run(run.id)
    assert (after.status, after.lease_token, after.attempts) == ("running", lease.token, 1)


def test_a_run_held_by_a_live_owner_is_refused(store):
    run, lease = held_run(store, "claim0000002")
    with pytest.raises(RunBusy, match="being driven by"):
        store.claim(run.id)
    assert store.get_run(run.id).lease_token == lease.token


def test_a_lease_whose_owner_is_gone_is_taken_over_and_the_resume_recorded(store):
    run, old = held_run(store, "claim0000003")
    new = taken_over(store, old)
    assert new.token != old.token and store.get_run(run.id).lease_token == new.token
    assert store.heartbeat(old) is False
    [resume] = store.run_resumes(run.id)
    assert (resume.previous_status, resume.after_step) == ("interrupted", 0)


def test_a_person_resuming_starts_the_attempt_count_again(store):
    run, lease = held_run(store, "claim0000004")
    store.record_failed_attempt(run.id, lease, "boom", max_attempts=9, backoff_s=0)
    store.release(lease)
    again = store.claim(run.id)
    assert store.get_run(run.id).attempts == 2
    store.release(again)
    store.claim(run.id, fresh_attempts=True)
    assert store.get_run(run.id).attempts == 1


def test_a_finished_or_waiting_run_is_not_claimed(store):
    run = store.create_run("t", model="offline", run_id="claim0000005", status="waiting")
    with pytest.raises(RunBusy, match="waits for a decision"):
        store.claim(run.id)
    assert store.get_run(run.id).lease_token is None
