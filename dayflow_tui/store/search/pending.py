"""Indexing a step after its commit: the search index is derived data, kept off the durable path.

A step's commit (``append_step``, ``set_tool_results``) writes the step and
marks it ``index_pending``, nothing else: the full-text index (FTS5
postings, a tsvector) was most of a step's cost when it was written in the
same transaction. The index is brought level afterwards, in one short
transaction per batch, by ``index_pending_steps``, which ``api.Store`` calls
when a drive gives its run up, when a run ends, and every ``FLUSH_EVERY``
steps of a long drive. Many steps in one transaction also cost FTS5 one
segment instead of one per step.

Nothing is missed, whatever dies when: the mark is committed with the step,
so a step whose indexing never happened (kill -9 between the two
transactions, a lost connection, a process without FTS5) stays marked until
some process indexes it, and a search reads the marked steps themselves
(``pending_places``) rather than the index, so a step is found from its
commit on. Indexing is idempotent: a part already in the index is not
written again, so two processes bringing the same step level (or a retry)
leave one copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...search.text import is_final_turn, result_places, tool_names, turn_places
from .docs import DOCS, PART_FINAL_TURN, PART_RESULTS, PART_TURN, STEP_PARTS, DocRow, blocks, by_column
from .index import index_state, write_docs

if TYPE_CHECKING:
    from ..handle import StoreHandle

# A drive longer than this brings the index level on the way, so a search never reads a long tail.
FLUSH_EVERY = 64
# Steps indexed per transaction: a backlog (a dead process's, a database written without FTS5) is
# worked off in short transactions that never hold the write lock long.
_BATCH = 500


def pending_steps(store: "StoreHandle") -> dict[str, set[int]]:
    """The steps committed but not yet indexed, by run (read through a partial index: usually a handful)."""
    found: dict[str, set[int]] = {}
    for run_id, n in store.db.execute_sql('SELECT run_id, n FROM "steps" WHERE index_pending = 1'):
        found.setdefault(run_id, set()).add(n)
    return found


def index_pending_steps(store: "StoreHandle", run_id: str | None = None, *, limit: int | None = None) -> int:
    """Index marked steps (of ``run_id``, or of every run), batch by batch; returns how many.

    Without a usable index (a SQLite without FTS5) nothing is done and the marks stay, so a Dayflow that
    can index finds them later. Each batch is one write transaction: its steps are read, their missing
    index rows written and their marks cleared together, so a death anywhere leaves them marked.
    """
    if index_state(store).kind is None:
        return 0
    done = 0
    while limit is None or done < limit:
        batch = _BATCH if limit is None else min(_BATCH, limit - done)
        with store.write_transaction():
            count = _index_batch(store, run_id, batch)
        done += count
        if count < batch:
            break
    return done


def _index_batch(store: "StoreHandle", run_id: str | None, batch: int) -> int:
    db = store.db
    p = db.param
    where = "s.index_pending = 1" + (f" AND s.run_id = {p}" if run_id is not None else "")
    # Locked until commit where the database locks rows (PostgreSQL): a tool-results commit to one of these
    # steps waits, then marks it again, so results written meanwhile are never taken as indexed.
    rows = db.execute_sql(
        f'SELECT s.run_id, s.n, s.assistant, s.tool_results, r.final_text, r.step_count FROM "steps" s '
        f'JOIN "runs" r ON r.id = s.run_id WHERE {where} ORDER BY s.run_id, s.n LIMIT {int(batch)}'
        f"{store.dialect.rows_locked_suffix('s')}",
        [run_id] if run_id is not None else []).fetchall()
    if not rows:
        return 0
    by_run: dict[str, list[int]] = {}
    for row in rows:
        by_run.setdefault(row[0], []).append(row[1])
    indexed: set[tuple[str, int, int]] = set()
    for rid, ns in by_run.items():
        marks = ", ".join([p] * len(ns))
        parts = ", ".join(str(part) for part in STEP_PARTS)
        for n, part in db.execute_sql(f'SELECT n, part FROM "{DOCS}" WHERE run_id = {p} AND n IN ({marks}) '
                                      f"AND part IN ({parts})", [rid, *ns]):
            indexed.add((rid, n, PART_TURN if part == PART_FINAL_TURN else part))
    docs: list[DocRow] = []
    for rid, n, assistant_json, results_json, final_text, step_count in rows:
        assistant = blocks(assistant_json)
        if (rid, n, PART_TURN) not in indexed:
            final_turn = n == step_count and is_final_turn(assistant, final_text)
            docs.append((rid, n, PART_FINAL_TURN if final_turn else PART_TURN, None,
                         by_column(turn_places(assistant, final=final_turn))))
        if results_json is not None and (rid, n, PART_RESULTS) not in indexed:
            docs.append((rid, n, PART_RESULTS, None,
                         by_column(result_places(blocks(results_json), tool_names(assistant)))))
    write_docs(store, docs)
    for rid, ns in by_run.items():
        marks = ", ".join([p] * len(ns))
        db.execute_sql(f'UPDATE "steps" SET index_pending = 0 WHERE run_id = {p} AND n IN ({marks})', [rid, *ns])
    return len(rows)

