"""release and release_backing_off: the lease is given up; the status stays, or turns queued for later."""

from .helpers import held_run, taken_over


def test_release_clears_the_owner_and_keeps_the_status(store):
    run, lease = held_run(store, "release00001")
    store.release(lease)
    after = store.get_run(run.id)
    assert after.status == "running" and after.lease_token is None and after.owner_pid is None
    assert after.heartbeat_at is None
    store.release(lease)  # a second release changes nothing and does not fail


def test_a_release_by_a_driver_that_lost_the_run_leaves_the_new_owner(store):
    run, old = held_run(store, "release00002")
    new = taken_over(store, old)
    store.release(old)
    assert store.get_run(run.id).lease_token == new.token


def test_back_pressure_queues_the_run_for_later_without_spending_an_attempt(store):
    run, lease = held_run(store, "release00003")
    store.release_backing_off(lease, "rate limited (429)", wait_s=600)
    after = store.get_run(run.id)
    assert (after.status, after.lease_token, after.attempts, after.error) == ("queued", None, 0, "rate limited (429)")
    assert store.claim_next() is None and 500 < store.next_retry_at() <= 600
