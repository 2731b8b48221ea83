"""prune (store.retention): finished runs older than a cutoff go with their steps; live work never does."""

from datetime import timedelta

from dayflow_tui.search.query import parse
from dayflow_tui.store import Run
from dayflow_tui.store.retention import prunable_runs, prune

from .helpers import held_run, reply

OLD = "2000-01-01T00:00:00.000Z"


def test_only_old_finished_runs_are_pruned_with_their_steps(store):
    run, lease = held_run(store, "prune0000001", task="prunable walrus")
    store.append_step(run.id, reply(1), lease=lease, final_status="done", final_text="end")
    store.create_run("queued", model="offline", run_id="prune0000002")
    store.create_run("recent", model="offline", run_id="prune0000003", status="done")
    Run.update(updated_at=OLD).where(Run.id.in_(["prune0000001", "prune0000002"])).execute()
    candidates = prunable_runs(store, older_than=timedelta(days=1))
    assert [(c.id, c.steps) for c in candidates] == [("prune0000001", 1)]
    report = prune(store, candidates)
    assert [c.id for c in report.removed] == ["prune0000001"] and report.steps == 1
    assert store.steps("prune0000001") == [] and store.count_runs(search="prune0000001") == 0
    assert store.search(parse("walrus")).hits == ()  # its index rows went with it
    assert {r.id for r in store.list_runs()} >= {"prune0000002", "prune0000003"}


def test_a_run_changed_after_it_was_selected_is_kept(store):
    run = store.create_run("t", model="offline", run_id="prune0000004", status="done")
    Run.update(updated_at=OLD).where(Run.id == run.id).execute()
    candidates = prunable_runs(store, older_than=timedelta(days=1))
    store.update_limits(run.id, max_steps=30)  # resumed or changed meanwhile
    report = prune(store, candidates)
    assert report.removed == [] and report.changed == [run.id]
    assert store.get_run(run.id).max_steps == 30
