"""search and rebuild_search_index: every commit is findable at once; the index is a capability.

Required: a word in a task, a reply or a tool result is found by ``search`` on every backend (by the
index, or by a scan where there is none). Optional: the index itself (FTS5 on SQLite, which a SQLite
build may lack; a tsvector on PostgreSQL, always there).
"""

import pytest

from dayflow_tui.search.query import parse

from .helpers import call, held_run, reply, sqlite_has_fts5


def _indexed_run(store):
    run, lease = held_run(store, "search000001", task="find the zanzibar ledger")
    store.append_step(run.id, reply(1, "I looked at the quokka file", tool=call("tu_1")), lease=lease)
    store.set_tool_results(run.id, 1, [{"type": "tool_result", "tool_use_id": "tu_1", "content": "marmoset"}],
                           lease=lease)
    return run


@pytest.mark.parametrize("word, step", [("zanzibar", 0), ("quokka", 1), ("marmoset", 1)])
def test_a_committed_word_is_found_in_its_run_and_step(store, word, step):
    run = _indexed_run(store)
    result = store.search(parse(word))
    assert [(h.run_id, h.step) for h in result.hits] == [(run.id, step)]
    assert store.search(parse("nowhereword")).hits == ()


def test_the_index_is_used_where_the_backend_has_one(store, backend):
    if backend == "sqlite" and not sqlite_has_fts5():
        pytest.skip("optional capability: this SQLite build has no FTS5 (search scans instead)")
    _indexed_run(store)
    assert store.search(parse("quokka")).indexed is True


def test_rebuilding_the_index_finds_the_same(store):
    run = _indexed_run(store)
    built = store.rebuild_search_index()
    assert built >= 1
    assert [h.run_id for h in store.search(parse("marmoset")).hits] == [run.id]
