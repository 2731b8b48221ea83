"""register_worker, worker_beat, worker_stopped, workers: the workers table, on the database's clock."""

from dayflow_tui.store.models import Worker

OLD = "2000-01-01T00:00:00.000Z"


def test_a_worker_registers_beats_with_its_runs_and_stops(store):
    worker = store.register_worker(host="host-a", pid=4242, version="0.1.0", concurrency=3)
    (row,) = store.workers()
    assert (row.id, row.host, row.pid, row.concurrency, row.state, row.runs) == (worker, "host-a", 4242, 3,
                                                                                 "alive", ())
    store.worker_beat(worker, ["run-b", "run-a"], 2)
    (row,) = store.workers()
    assert row.runs == ("run-a", "run-b") and row.runs_done == 2 and row.beat_age_s < 30
    store.worker_stopped(worker, 5)
    (row,) = store.workers()
    assert (row.state, row.runs, row.runs_done) == ("stopped", (), 5)


def test_a_worker_that_stopped_beating_is_stale_and_old_rows_are_pruned(store):
    killed = store.register_worker(host="host-a", pid=1, version="0.1.0", concurrency=1)
    store.worker_beat(killed, ["run-held"], 0)
    Worker.update(beat_at=store.db_now(-600)).where(Worker.id == killed).execute()  # ten minutes without a beat
    gone = store.register_worker(host="host-b", pid=2, version="0.1.0", concurrency=1)
    Worker.update(beat_at=OLD).where(Worker.id == gone).execute()
    live = store.register_worker(host="host-c", pid=3, version="0.1.0", concurrency=2)  # prunes rows a day old
    states = {row.id: row.state for row in store.workers()}
    assert states == {live: "alive", killed: "stale"}
    assert [row.state for row in store.workers()] == ["alive", "stale"]
    assert next(r for r in store.workers() if r.id == killed).runs == ()  # a stale worker holds nothing
