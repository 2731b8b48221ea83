"""What a row of the search index is, and the places it stands for, rebuilt from the stored rows.

One row of ``search_docs`` per indexed thing: a run's task, a step's model
turn (its text and tool calls), a step's tool results, and each final text
or error a run was given. The index holds only where words are; the text a
hit shows is always cut from the runs and steps themselves (``load_docs``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import peewee

from ...search.query import Query
from ...search.text import (ARGS, COLUMNS, ERROR, FAILURE, FINAL, RESULT, TASK, TEXT, Place, result_places, tool_names,
                            turn_places)

DOCS = "search_docs"

# What a row of search_docs indexes. The body column holds the text of FINAL and ERROR rows (a run's
# error is cleared when it is resumed; the index keeps what it was).
PART_TASK, PART_TURN, PART_FINAL_TURN, PART_RESULTS, PART_FINAL, PART_ERROR = 0, 1, 2, 3, 4, 5
# Written by a process that cannot write the index into a database that has it (a SQLite without FTS5),
# so the index misses that process's steps until it is rebuilt.
PART_STALE = -1

# The places each part holds, each with the weight its words carry within the row where the index
# keeps weights (a tsvector); a row holds at most two kinds of place.
WEIGHTS = {
    PART_TASK: {TASK: "A"},
    PART_TURN: {TEXT: "A", ARGS: "B"},
    PART_FINAL_TURN: {FINAL: "A", ARGS: "B"},
    PART_RESULTS: {RESULT: "A", FAILURE: "B"},
    PART_FINAL: {FINAL: "A"},
    PART_ERROR: {ERROR: "A"},
}
STEP_PARTS = (PART_TURN, PART_FINAL_TURN, PART_RESULTS)

# A row to index: (run_id, n, part, body, places by column).
DocRow = tuple[str, int, int, "str | None", dict[str, list[Place]]]


@dataclass(frozen=True)
class IndexState:
    """What this store can do: ``kind`` is "fts5", "tsvector" or None (no index: searches scan)."""

    kind: str | None
    has_table: bool  # the index's tables exist (possibly unusable by this process)


@dataclass
class Doc:
    """An index row with its places rebuilt from the stored rows."""

    doc_id: int
    run_id: str
    n: int
    part: int
    places: list[Place]
    at: str | None = None  # the step's commit time (step rows only)


def allowed_columns(query: Query) -> tuple[str, ...]:
    """The places ``query`` may match in (``in:``), narrowed to calls and results by ``tool:``."""
    columns = query.columns or COLUMNS
    if query.tools:  # tool:NAME looks in that tool's calls and results
        columns = tuple(c for c in columns if c in (ARGS, RESULT, FAILURE))
    return columns


def blocks(raw: str | None) -> list:
    """Stored blocks for indexing: a row that cannot be read indexes as nothing (it is shown as damaged)."""
    if raw is None:
        return []
    try:
        value = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return []
    return value if isinstance(value, list) else []


def by_column(places: Iterable[Place]) -> dict[str, list[Place]]:
    grouped: dict[str, list[Place]] = {}
    for place in places:
        grouped.setdefault(place.column, []).append(place)
    return grouped


def chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def load_docs(db: peewee.Database, rows: Sequence[tuple], steps: dict | None = None,
              tasks: dict | None = None) -> list[Doc]:
    """Rebuild the places of index rows (``(id, run_id, n, part, body)``) from the stored runs and steps.

    ``steps`` ((run_id, n) -> (assistant, tool_results, created_at)) and
    ``tasks`` (run_id -> task) are read here unless the caller has them.
    """
    if steps is None:
        steps = {}
        keys = sorted({(run_id, n) for _id, run_id, n, part, _body in rows if part in STEP_PARTS})
        for chunk in chunks(keys, 300):
            pairs = ", ".join([f"({db.param}, {db.param})"] * len(chunk))
            # A join on a VALUES list: SQLite plans ``(run_id, n) IN (VALUES ...)`` as a scan of every step.
            for run_id, n, assistant, results, created_at in db.execute_sql(
                    f"WITH wanted (run_id, n) AS (VALUES {pairs}) SELECT s.run_id, s.n, s.assistant, "
                    f's.tool_results, s.created_at FROM wanted JOIN "steps" s ON s.run_id = wanted.run_id '
                    "AND s.n = wanted.n", [v for key in chunk for v in key]):
                steps[(run_id, n)] = (assistant, results, created_at)
    if tasks is None:
        tasks = {}
        run_ids = sorted({row[1] for row in rows if row[3] == PART_TASK})
        for chunk in chunks(run_ids, 300):
            marks = ", ".join([db.param] * len(chunk))
            tasks.update(db.execute_sql(f'SELECT id, user_msg FROM "runs" WHERE id IN ({marks})', list(chunk)))
    docs: list[Doc] = []
    for doc_id, run_id, n, part, body in rows:
        stored = steps.get((run_id, n)) if part in STEP_PARTS else None
        if part == PART_TASK:
            places = [Place(TASK, tasks.get(run_id) or "")]
        elif part in (PART_TURN, PART_FINAL_TURN):
            places = turn_places(blocks(stored[0]), final=part == PART_FINAL_TURN) if stored else []
        elif part == PART_RESULTS:
            places = result_places(blocks(stored[1]), tool_names(blocks(stored[0]))) if stored else []
        elif part in (PART_FINAL, PART_ERROR):
            places = [Place(FINAL if part == PART_FINAL else ERROR, body or "")]
        else:
            continue
        docs.append(Doc(doc_id, run_id, n, part, places, stored[2] if stored else None))
    return docs
