"""record_failed_attempt: an attempt without a step backs off, and gives up after max_attempts in a row."""

from .helpers import held_run


def test_an_attempt_under_the_limit_backs_off_with_its_reason(store):
    run, lease = held_run(store, "failed000001")
    assert store.record_failed_attempt(run.id, lease, "API 500", max_attempts=3, backoff_s=60) is False
    after = store.get_run(run.id)
    assert after.status == "running" and after.error == "API 500" and after.not_before > store.db_now()


def test_the_last_attempt_fails_the_run_with_the_count(store):
    run, lease = held_run(store, "failed000002")
    for attempt in range(1, 3):
        assert store.record_failed_attempt(run.id, lease, "API 500", max_attempts=3, backoff_s=0) is False
        store.release(lease)
        lease = store.claim(run.id)
    assert store.record_failed_attempt(run.id, lease, "API 500", max_attempts=3, backoff_s=0) is True
    after = store.get_run(run.id)
    assert after.status == "failed" and after.error == "gave up after 3 attempts: API 500"
    assert after.not_before is None
