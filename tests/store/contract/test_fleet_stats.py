"""fleet_stats: runs by status, the queue a worker may take now and its oldest age, runs backing off, and the
stalest heartbeat of the runs held, read on the database's clock (the metrics' database-derived gauges)."""

from dayflow_tui.store import Run, RunStatus

from .helpers import held_run

OLD = "2000-01-01T00:00:00.000Z"
FUTURE = "2999-01-01T00:00:00.000Z"


def test_an_empty_database_has_every_status_at_zero(store):
    stats = store.fleet_stats()
    assert set(stats.by_status) == {s.value for s in RunStatus} - {"interrupted"}
    assert not any(stats.by_status.values())
    assert stats.queue_ready == stats.queue_backing_off == stats.held == 0
    assert stats.oldest_ready_age_s is None and stats.oldest_heartbeat_age_s is None


def test_the_numbers_follow_the_rows(store):
    store.create_run("ready, oldest", model="offline", run_id="flee00000001")
    store.create_run("ready", model="offline", run_id="flee00000002")
    store.create_run("backing off", model="offline", run_id="flee00000003")
    store.create_run("finished", model="offline", run_id="flee00000004", status="done")
    run, _lease = held_run(store, "flee00000005")
    Run.update(created_at=OLD).where(Run.id == "flee00000001").execute()
    Run.update(not_before=FUTURE).where(Run.id == "flee00000003").execute()
    Run.update(heartbeat_at=OLD).where(Run.id == run.id).execute()

    stats = store.fleet_stats()
    assert stats.by_status["queued"] == 3 and stats.by_status["done"] == 1 and stats.by_status["running"] == 1
    assert stats.queue_ready == 2 and stats.queue_backing_off == 1
    assert stats.held == 1
    # Ages on the database's clock: the year-2000 rows are decades old, never negative.
    assert stats.oldest_ready_age_s > 20 * 365 * 86400
    assert stats.oldest_heartbeat_age_s > 20 * 365 * 86400


def test_a_released_run_is_not_held(store):
    run, lease = held_run(store, "flee00000006")
    assert store.fleet_stats().held == 1
    store.release(lease)
    stats = store.fleet_stats()
    assert stats.held == 0 and stats.by_status["running"] == 1 and stats.oldest_heartbeat_age_s is None
