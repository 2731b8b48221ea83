"""claim_next: a worker takes an interrupted run first, else the oldest queued one; never one backing off."""

from dayflow_tui.store import Run

from .helpers import held_run


def test_nothing_to_take_is_none(store):
    store.create_run("done", model="offline", run_id="next00000001", status="done")
    store.create_run("failed", model="offline", run_id="next00000002", status="failed")
    assert store.claim_next() is None


def test_the_oldest_queued_run_is_taken(store):
    store.create_run("first", model="offline", run_id="next00000003")
    store.create_run("second", model="offline", run_id="next00000004")
    lease = store.claim_next()
    assert lease.run_id == "next00000003" and store.get_run(lease.run_id).lease_token == lease.token
    assert store.claim_next().run_id == "next00000004"
    assert store.claim_next() is None


def test_an_interrupted_run_goes_before_the_queue(store):
    store.create_run("queued", model="offline", run_id="next00000005")
    run, lease = held_run(store, "next00000006")
    Run.update(owner_host="gone-host", heartbeat_at="2000-01-01T00:00:00.000Z").where(Run.id == run.id).execute()
    taken = store.claim_next()
    assert taken.run_id == run.id and taken.token != lease.token


def test_a_run_backing_off_waits_its_turn(store):
    run, lease = held_run(store, "next00000007")
    store.record_failed_attempt(run.id, lease, "boom", max_attempts=9, backoff_s=3600)
    store.release(lease)
    Run.update(status="queued").where(Run.id == run.id).execute()
    assert store.claim_next() is None
    assert 3500 < store.next_retry_at() <= 3600


def test_a_higher_priority_is_taken_first_then_the_oldest(store):
    store.create_run("old low", model="offline", run_id="prio00000001")
    store.create_run("old high", model="offline", run_id="prio00000002", priority=5)
    store.create_run("new high", model="offline", run_id="prio00000003", priority=5)
    store.create_run("below zero", model="offline", run_id="prio00000004", priority=-1)
    store.create_run("new low", model="offline", run_id="prio00000005")
    taken = [store.claim_next().run_id for _ in range(5)]
    assert taken == ["prio00000002", "prio00000003", "prio00000001", "prio00000005", "prio00000004"]
    assert store.get_run("prio00000002").priority == 5
