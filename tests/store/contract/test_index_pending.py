"""index_pending: a step is indexed after its commit, and found from its commit on.

Required on every backend: a step commit writes the step and marks it, nothing in the index; a search
finds a marked step from its rows at once; ``index_pending`` brings the index level once (a second call,
or a step whose tool results came later, leaves one copy of each part); a run's end and a release bring
its steps level by themselves. Optional: the index itself (FTS5 on SQLite).
"""

import pytest

from dayflow_tui.search.query import parse
from dayflow_tui.store.search import DOCS

from .helpers import call, held_run, reply, sqlite_has_fts5


@pytest.fixture
def indexed(store, backend):
    if backend == "sqlite" and not sqlite_has_fts5():
        pytest.skip("optional capability: this SQLite build has no FTS5 (search scans instead)")
    return store


def _marked(store, run_id):
    return [n for (n,) in store.db.execute_sql(
        f'SELECT n FROM "steps" WHERE run_id = {store.db.param} AND index_pending = 1 ORDER BY n', (run_id,))]


def _docs(store, run_id):
    return sorted(store.db.execute_sql(f'SELECT n, part FROM "{DOCS}" WHERE run_id = {store.db.param} AND n > 0',
                                       (run_id,)).fetchall())


def test_a_step_commit_writes_no_index_and_is_found_at_once(indexed):
    store = indexed
    run, lease = held_run(store, "pending00001", task="the task")
    store.append_step(run.id, reply(1, "looking for the okapi", tool=call("tu_1")), lease=lease)
    assert _docs(store, run.id) == [] and _marked(store, run.id) == [1]
    first = store.search(parse("okapi"))
    assert [(h.run_id, h.step, h.doc_id) for h in first.hits] == [(run.id, 1, 0)]  # read from the step's row
    assert store.index_pending(run.id) == 1
    assert _marked(store, run.id) == [] and len(_docs(store, run.id)) == 1
    second = store.search(parse("okapi"))
    assert [(h.run_id, h.step) for h in second.hits] == [(run.id, 1)] and second.hits[0].doc_id > 0


def test_tool_results_after_the_turn_was_indexed_are_marked_and_indexed_once(indexed):
    store = indexed
    run, lease = held_run(store, "pending00002")
    store.append_step(run.id, reply(1, "reading the axolotl", tool=call("tu_1")), lease=lease)
    store.index_pending(run.id)
    store.set_tool_results(run.id, 1, [{"type": "tool_result", "tool_use_id": "tu_1", "content": "pangolin"}],
                           lease=lease)
    assert _marked(store, run.id) == [1]
    hits = store.search(parse("pangolin")).hits
    assert [(h.step, h.column) for h in hits] == [(1, "result")]
    # The turn is matched once while the step is marked (not from the index and its row both).
    assert [h.step for h in store.search(parse("axolotl")).hits] == [1]
    assert store.index_pending(run.id) == 1 and store.index_pending(run.id) == 0
    assert _docs(store, run.id) == sorted([(1, 1), (1, 3)])  # the turn and the results, one row each
    assert [h.step for h in store.search(parse("pangolin")).hits] == [1]


def test_indexing_twice_leaves_one_copy(indexed):
    store = indexed
    run, lease = held_run(store, "pending00003")
    store.append_step(run.id, reply(1, "the wombat", tool=call("tu_1")), lease=lease)
    store.set_tool_results(run.id, 1, [{"type": "tool_result", "tool_use_id": "tu_1", "content": "x"}],
                           lease=lease)
    # A second process bringing the same step level (it was marked again meanwhile) writes nothing twice.
    store.index_pending()
    store.db.execute_sql(f'UPDATE "steps" SET index_pending = 1 WHERE run_id = {store.db.param}', (run.id,))
    store.index_pending()
    assert _docs(store, run.id) == sorted([(1, 1), (1, 3)])
    assert [h.step for h in store.search(parse("wombat")).hits] == [1]


def test_a_run_that_ends_and_a_release_bring_the_index_level(indexed):
    store = indexed
    run, lease = held_run(store, "pending00004")
    store.append_step(run.id, reply(1, "the quetzal", tool=call("tu_1")), lease=lease)
    store.set_tool_results(run.id, 1, [{"type": "tool_result", "tool_use_id": "tu_1", "content": "x"}],
                           lease=lease)
    store.release(lease)
    assert _marked(store, run.id) == []
    other, lease = held_run(store, "pending00005")
    store.append_step(other.id, reply(1, "the final narwhal"), lease=lease, final_status="done",
                      final_text="the final narwhal")
    assert _marked(store, other.id) == []
    hits = store.search(parse("narwhal")).hits
    assert [(h.run_id, h.step, h.column) for h in hits] == [(other.id, 1, "final")]


def test_rebuilding_the_index_clears_every_mark(indexed):
    store = indexed
    run, lease = held_run(store, "pending00006")
    store.append_step(run.id, reply(1, "the tapir", tool=call("tu_1")), lease=lease)
    store.rebuild_search_index()
    assert _marked(store, run.id) == []
    assert [h.step for h in store.search(parse("tapir")).hits] == [1]


def test_without_an_index_the_marks_stay_for_a_dayflow_that_can_index(store, backend):
    run, lease = held_run(store, "pending00007")
    store.append_step(run.id, reply(1, "the kinkajou", tool=call("tu_1")), lease=lease)
    assert [h.step for h in store.search(parse("kinkajou")).hits] == [1]
    if backend == "sqlite" and not sqlite_has_fts5():
        assert store.index_pending() == 0 and _marked(store, run.id) == [1]
