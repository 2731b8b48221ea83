"""change_marker and db_now: what a live view polls, and the clock leases are judged on."""

from datetime import datetime

from dayflow_tui.store import open_store


def test_the_marker_moves_when_another_connection_commits(store, db_target):
    before = store.change_marker()
    assert store.change_marker() == before
    other = open_store(db_target, create=False)
    try:
        other.create_run("t", model="offline", run_id="marker000001")
    finally:
        other.close()
    with store.bound():
        assert store.change_marker() != before


def test_the_database_clock_reads_as_stored_text(store):
    now = datetime.fromisoformat(store.db_now().replace("Z", "+00:00"))
    later = datetime.fromisoformat(store.db_now(plus_seconds=60).replace("Z", "+00:00"))
    assert 59 <= (later - now).total_seconds() <= 61
