"""The run readers: list_runs (keyset pages), count_runs, count_by_status, runs_updated_since, latest_unfinished."""

from dayflow_tui.store import Run

from .helpers import held_run


def _runs(store, n=5):
    for i in range(n):
        store.create_run(f"list {i}", model="offline", run_id=f"list000000{i}", status="done" if i % 2 else "queued")
        Run.update(created_at=f"2030-01-01T00:00:0{i}.000Z").where(Run.id == f"list000000{i}").execute()


def test_runs_come_newest_first_a_keyset_page_at_a_time(store):
    _runs(store)
    page = store.list_runs(limit=2)
    assert [r.id for r in page] == ["list0000004", "list0000003"]
    below = store.list_runs(limit=2, before=(page[-1].created_at, page[-1].id))
    assert [r.id for r in below] == ["list0000002", "list0000001"]
    above = store.list_runs(limit=2, after=(below[0].created_at, below[0].id))
    assert [r.id for r in above] == ["list0000003", "list0000004"]
    assert [r.id for r in store.list_runs(limit=1, oldest_first=True)] == ["list0000000"]


def test_filters_and_counts_agree(store):
    _runs(store)
    assert [r.id for r in store.list_runs(status=["done"])] == ["list0000003", "list0000001"]
    assert store.count_runs(status=["done"]) == 2 and store.count_runs(search="list 4") == 1
    assert store.count_by_status() == {"done": 2, "queued": 3}


def test_a_live_view_reads_only_what_changed(store):
    _runs(store, 2)
    mark = max(r.updated_at for r in store.list_runs())
    store.update_limits("list0000000", max_steps=3)
    assert [r.id for r in store.runs_updated_since(mark)] == ["list0000000"]


def test_latest_unfinished_skips_runs_a_live_process_drives(store):
    store.create_run("old", model="offline", run_id="unfin0000001", status="failed")
    held_run(store, "unfin0000002")
    assert store.latest_unfinished().id == "unfin0000001"
