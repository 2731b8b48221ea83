"""Index writes: every place of every run.

A run's own writes are indexed in the transaction that writes them
(``index_run_text`` from ``create_run``, ``create_claimed_run`` and
``finish_run``, ``index_run_end`` from a step commit that ends its run, and
``index_runs`` for forks and imports). A step's turn and tool results are
indexed after their commit (``pending.py``): the step is marked in its
commit, and a search reads marked steps from their rows, so a search never
sees a step the store does not hold, nor misses one it does. How the words are stored is the dialect's
(``write_search_docs``): an FTS5 table on SQLite, a tsvector column on
PostgreSQL; errors are kept as a history (a run that failed twice and was
resumed is found by either error).

Where the index cannot be written (a SQLite without FTS5) nothing is
indexed and a search scans every step; a process in that state writing
into a database that has the index leaves one marker saying the index is
behind (``search --reindex`` mends it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from ...search.text import ERROR, FINAL, TASK, Place, is_final_turn, result_places, tool_names, turn_places
from .docs import (DOCS, PART_ERROR, PART_FINAL, PART_FINAL_TURN, PART_RESULTS, PART_STALE, PART_TASK, PART_TURN,
                   DocRow, IndexState, blocks, by_column, chunks)

if TYPE_CHECKING:
    from ..handle import StoreHandle


def index_state(store: "StoreHandle") -> IndexState:
    """Read once per store (a few catalog reads), then cached: the commit paths ask on every step."""
    state = getattr(store, "_search_state", None)
    if state is None:
        state = store._search_state = store.dialect.search_index_state(store.db)
    return state


def forget_state(store: "StoreHandle") -> None:
    store._search_state = None


def write_docs(store: "StoreHandle", docs: Sequence[DocRow]) -> int:
    """Insert index rows (``(run_id, n, part, body, places by column)``); rows without a word are skipped."""
    return store.dialect.write_search_docs(store.db, docs)


def index_run_end(store: "StoreHandle", run_id: str, n: int, assistant: list, *, final_text: str | None,
                  error: str | None) -> None:
    """Index how a run ends with step ``n`` (``append_step(final_status=...)``), inside that commit.

    The step's own turn is indexed after the commit (``pending.py``), as a final turn when it holds the
    final text; a final text it does not hold, and the error, are the run's and indexed here, once per run.
    """
    state = index_state(store)
    if state.kind is None:
        _note_unindexed(store, state, run_id, n)
        return
    docs: list[DocRow] = []
    if final_text and not is_final_turn(assistant, final_text):
        docs.append((run_id, n, PART_FINAL, final_text, {FINAL: [Place(FINAL, final_text)]}))
    if error:
        docs.append((run_id, n, PART_ERROR, error, {ERROR: [Place(ERROR, error)]}))
    write_docs(store, docs)


def index_run_text(store: "StoreHandle", run_id: str, *, task: str | None = None, final_text: str | None = None,
                   error: str | None = None) -> None:
    """Index what a run-level write adds: the task of a new run, or a final text or error it ends with."""
    state = index_state(store)
    if state.kind is None:
        _note_unindexed(store, state, run_id, 0)
        return
    docs: list[DocRow] = []
    if task is not None:
        docs.append((run_id, 0, PART_TASK, None, {TASK: [Place(TASK, task)]}))
    if final_text or error:
        row = store.db.execute_sql(f'SELECT step_count FROM "runs" WHERE id = {store.db.param}', (run_id,)).fetchone()
        n = row[0] if row else 0
        if final_text:
            docs.append((run_id, n, PART_FINAL, final_text, {FINAL: [Place(FINAL, final_text)]}))
        if error:
            docs.append((run_id, n, PART_ERROR, error, {ERROR: [Place(ERROR, error)]}))
    write_docs(store, docs)


def _note_unindexed(store: "StoreHandle", state: IndexState, run_id: str, n: int) -> None:
    """A process that cannot write the index, writing to a database that has it: say once that it is now behind."""
    if not state.has_table or getattr(store, "_search_stale_noted", False):
        return
    p = store.db.param
    store.db.execute_sql(f'INSERT INTO "{DOCS}" (run_id, n, part) VALUES ({p}, {p}, {p})', (run_id, n, PART_STALE))
    store._search_stale_noted = True


RUN_COLUMNS = "id, user_msg, final_text, error, step_count"


def run_docs(store: "StoreHandle", runs: Sequence[tuple], *, on_step: Callable[[], None] = lambda: None
             ) -> Iterator[DocRow]:
    """The index rows of ``runs`` (``RUN_COLUMNS`` rows), built from their stored steps."""
    db = store.db
    marks = ", ".join([db.param] * len(runs))
    stored: dict[str, list[tuple]] = {}
    for run_id, n, assistant_json, results_json in db.execute_sql(
            f'SELECT run_id, n, assistant, tool_results FROM "steps" WHERE run_id IN ({marks})',
            [run[0] for run in runs]):
        stored.setdefault(run_id, []).append((n, assistant_json, results_json))
    for run_id, user_msg, final_text, error, step_count in runs:
        yield (run_id, 0, PART_TASK, None, {TASK: [Place(TASK, user_msg or "")]})
        steps = sorted(stored.get(run_id, ()))
        final_indexed = False
        for n, assistant_json, results_json in steps:
            assistant = blocks(assistant_json)
            final_turn = n == steps[-1][0] and is_final_turn(assistant, final_text)
            final_indexed = final_indexed or final_turn
            part = PART_FINAL_TURN if final_turn else PART_TURN
            yield (run_id, n, part, None, by_column(turn_places(assistant, final=final_turn)))
            if results_json is not None:
                yield (run_id, n, PART_RESULTS, None,
                       by_column(result_places(blocks(results_json), tool_names(assistant))))
            on_step()
        if final_text and not final_indexed:
            yield (run_id, step_count, PART_FINAL, final_text, {FINAL: [Place(FINAL, final_text)]})
        if error:
            yield (run_id, step_count, PART_ERROR, error, {ERROR: [Place(ERROR, error)]})


def index_runs(store: "StoreHandle", run_ids: Sequence[str]) -> None:
    """Index whole runs written around the commit paths (``dayflow import``), inside the caller's transaction."""
    state = index_state(store)
    if state.kind is None:
        for run_id in run_ids[:1]:
            _note_unindexed(store, state, run_id, 0)
        return
    db = store.db
    for chunk in chunks(list(run_ids), 200):
        marks = ", ".join([db.param] * len(chunk))
        runs = db.execute_sql(f'SELECT {RUN_COLUMNS} FROM "runs" WHERE id IN ({marks})', list(chunk)).fetchall()
        write_docs(store, list(run_docs(store, runs)))


def unindex_runs(store: "StoreHandle", run_ids: Sequence[str]) -> None:
    """Remove these runs from the index, inside the caller's transaction, before their rows are deleted.

    The index rows follow a deleted run on their own (ON DELETE CASCADE);
    words the dialect keeps apart from them are taken out first.
    """
    if not run_ids:
        return
    state = index_state(store)
    db = store.db
    if state.kind is not None:
        store.dialect.forget_search_words(db, run_ids)
    if state.has_table:
        marks = ", ".join([db.param] * len(run_ids))
        db.execute_sql(f'DELETE FROM "{DOCS}" WHERE run_id IN ({marks})', list(run_ids))
