"""heartbeat: the owner keeps its lease fresh; a beat on a lease taken over says so."""

from dayflow_tui.store import Run

from .helpers import held_run, taken_over


def test_a_beat_moves_the_heartbeat(store):
    run, lease = held_run(store, "beat00000001")
    Run.update(heartbeat_at="2000-01-01T00:00:00.000Z").where(Run.id == run.id).execute()
    assert store.heartbeat(lease) is True
    assert store.get_run(run.id).heartbeat_at > "2000-01-01T00:00:00.000Z"


def test_a_beat_on_a_lost_lease_is_false_and_changes_nothing(store):
    run, lease = held_run(store, "beat00000002")
    new = taken_over(store, lease)
    before = store.get_run(run.id).heartbeat_at
    assert store.heartbeat(lease) is False
    after = store.get_run(run.id)
    assert after.lease_token == new.token and after.heartbeat_at == before
