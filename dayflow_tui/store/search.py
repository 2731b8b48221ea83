"""The search index: every place of every run, kept in the same transaction as the rows it indexes.

Each commit path of the store calls in here inside its own write transaction
(``index_step_text`` from ``append_step`` and ``set_tool_results``,
``index_run_text`` from ``create_run``, ``create_claimed_run`` and
``finish_run``), so a search never sees a step the store does not hold, nor
misses one it does.

One row of ``search_docs`` per indexed thing: a run's task, a step's model
turn (its text and tool calls), a step's tool results, and each final text
or error a run was given (errors are kept as a history: a run that failed
twice and was resumed is found by either error). The words themselves are
indexed per backend:

- **SQLite**: an FTS5 table keyed by ``search_docs.id`` with one column per
  place (``task, text, args, result, failure, final, error``). It is
  contentless: the text already lives in the step rows, so the index holds
  only words and positions, and snippets are cut from the rows themselves.
  The words are written already split and folded (``search.text.words``)
  and FTS5's ``ascii`` tokenizer only separates them, so both backends and
  the snippet highlighter agree on what a word is.
- **PostgreSQL**: a ``tsvector`` column with a GIN index, built in Python
  from the same words (lexemes are not stemmed, positions keep phrases
  exact), places told apart by the row's part and the lexeme's weight.

Without FTS5 (a rare SQLite build) nothing is indexed and a search scans
every step, with one line saying so; ``dayflow search --reindex`` builds the
index later. Every candidate the index returns is checked again against the
stored rows by the same matcher that cuts the snippet, so a hit is always
real and always shows where it is.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import peewee

from ..search.query import Query, check_searchable
from ..search.text import (ARGS, COLUMNS, ERROR, FAILURE, FINAL, LABELS, RESULT, TASK, TEXT, Place, PlaceWords, Snippet,
                           Term, best_place, is_final_turn, place_matches, result_places, snippet, tool_names,
                           turn_places, words)
from .models import Run, Step
from .retry import store_call

if TYPE_CHECKING:
    from .core import Store

DOCS = "search_docs"
FTS = "search_fts"

# What a row of search_docs indexes. The body column holds the text of FINAL and ERROR rows (a run's
# error is cleared when it is resumed; the index keeps what it was).
PART_TASK, PART_TURN, PART_FINAL_TURN, PART_RESULTS, PART_FINAL, PART_ERROR = 0, 1, 2, 3, 4, 5
# SQLite only: written by a process whose SQLite has no FTS5 into a database that has the index,
# so the index misses that process's steps until it is rebuilt.
PART_STALE = -1

# PostgreSQL: the weight each place's words carry within its row (a row holds at most two kinds of place).
_WEIGHTS = {
    PART_TASK: {TASK: "A"},
    PART_TURN: {TEXT: "A", ARGS: "B"},
    PART_FINAL_TURN: {FINAL: "A", ARGS: "B"},
    PART_RESULTS: {RESULT: "A", FAILURE: "B"},
    PART_FINAL: {FINAL: "A"},
    PART_ERROR: {ERROR: "A"},
}
_STEP_PARTS = (PART_TURN, PART_FINAL_TURN, PART_RESULTS)
# tsvector limits: 256 positions per lexeme, positions up to 16,383, 1 MB in all (kept well under).
_PG_MAX_POSITIONS = 256
_PG_MAX_POSITION = 16_383
_PG_MAX_BYTES = 900_000

# The agent every run belongs to until runs record their agent (``Run.agent``).
BUILT_IN_AGENT = "brief"


# -- which index a database has ---------------------------------------------------------------------


def _sqlite_has_fts5(db: peewee.Database) -> bool:
    if db.execute_sql("SELECT sqlite_compileoption_used('ENABLE_FTS5')").fetchone()[0]:
        return True
    try:  # registered without the compile option (an extension): the module list says so, where it exists
        return db.execute_sql("SELECT count(*) FROM pragma_module_list WHERE name = 'fts5'").fetchone()[0] > 0
    except peewee.DatabaseError:
        return False


# Tests stand in for a SQLite build without FTS5 by replacing this (the one place that asks).
fts5_available: Callable[[peewee.Database], bool] = _sqlite_has_fts5


@dataclass(frozen=True)
class IndexState:
    """What this store can do: ``kind`` is "fts5", "tsvector" or None (no index: searches scan)."""

    kind: str | None
    has_table: bool  # SQLite: the FTS table exists (possibly unusable by this process)


def index_state(store: "Store") -> IndexState:
    """Read once per store (a few catalog reads), then cached: the commit paths ask on every step."""
    state = getattr(store, "_search_state", None)
    if state is None:
        if store.is_postgres:
            has_table = store.db.execute_sql(f"SELECT to_regclass('\"{DOCS}\"') IS NOT NULL").fetchone()[0]
            state = IndexState("tsvector" if has_table else None, bool(has_table))
        else:
            has_table = store.db.execute_sql(
                "SELECT count(*) FROM sqlite_master WHERE name = ?", (FTS,)).fetchone()[0] > 0
            usable = has_table and fts5_available(store.db)
            state = IndexState("fts5" if usable else None, has_table)
        store._search_state = state
    return state


def _forget_state(store: "Store") -> None:
    store._search_state = None


# -- schema -------------------------------------------------------------------------------------------


def _create_docs_table(store: "Store") -> None:
    if store.is_postgres:
        store.db.execute_sql(
            f'CREATE TABLE IF NOT EXISTS "{DOCS}" (id BIGSERIAL PRIMARY KEY, '
            f'run_id TEXT NOT NULL REFERENCES "runs" ("id") ON DELETE CASCADE, n INTEGER NOT NULL, '
            f"part SMALLINT NOT NULL, body TEXT, doc TSVECTOR NOT NULL)")
        store.db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{DOCS}_doc" ON "{DOCS}" USING gin (doc)')
    else:
        # AUTOINCREMENT: an id is never reused, so index entries left by a deleted row can never
        # be taken for a new row's words.
        store.db.execute_sql(
            f'CREATE TABLE IF NOT EXISTS "{DOCS}" (id INTEGER PRIMARY KEY AUTOINCREMENT, '
            f'run_id TEXT NOT NULL REFERENCES "runs" ("id") ON DELETE CASCADE, n INTEGER NOT NULL, '
            f"part SMALLINT NOT NULL, body TEXT)")
    store.db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{DOCS}_run_id_n" ON "{DOCS}" (run_id, n)')
    if not store.is_postgres:  # finds the one "index is behind" marker without a scan (empty otherwise)
        store.db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{DOCS}_stale" ON "{DOCS}" (part) WHERE part < 0')


def _create_fts_table(store: "Store") -> None:
    # columnsize=0: no per-row lengths (they serve relevance ranking; hits come newest first).
    store.db.execute_sql(f'CREATE VIRTUAL TABLE IF NOT EXISTS "{FTS}" USING fts5({", ".join(COLUMNS)}, '
                         "content='', columnsize=0, tokenize='ascii')")


def add_search_index(store: "Store") -> None:
    """Schema migration: the search tables, filled from every run and step already stored.

    Runs inside the migration's transaction. A terminal on stderr gets a progress bar.
    """
    if not store.is_postgres and not fts5_available(store.db):
        print(f"dayflow: note: {store.label}: this SQLite ({_sqlite_version(store)}) has no FTS5, so runs are "
              "not indexed and `dayflow search` scans every step; with an FTS5 build, run "
              "`dayflow search --reindex` once", file=sys.stderr)
        _forget_state(store)
        return
    _create_docs_table(store)
    if not store.is_postgres:
        _create_fts_table(store)
    _forget_state(store)
    _fill(store, Progress.for_stderr("indexing runs for search"))


def _sqlite_version(store: "Store") -> str:
    return "SQLite " + str(store.db.execute_sql("SELECT sqlite_version()").fetchone()[0])


def rebuild(store: "Store", progress: "Progress | None" = None) -> int:
    """Drop and rebuild the whole index from the stored rows; returns the number of rows indexed.

    The one repair for an index that cannot be trusted (written around by a
    process without FTS5, or a database restored from elsewhere). One
    transaction: searches see the old index or the new one.
    """
    if not store.is_postgres and not fts5_available(store.db):
        raise_no_fts5(store)
    with store.write_transaction():
        if not store.is_postgres:
            store.db.execute_sql(f'DROP TABLE IF EXISTS "{FTS}"')
            store.db.execute_sql(f'DROP TABLE IF EXISTS "{DOCS}"')
        else:
            store.db.execute_sql(f'DELETE FROM "{DOCS}"')
        _create_docs_table(store)
        if not store.is_postgres:
            _create_fts_table(store)
        _forget_state(store)
        return _fill(store, progress or Progress.for_stderr("rebuilding the search index"))


def raise_no_fts5(store: "Store") -> None:
    from ..errors import StoreError

    raise StoreError(f"{store.label}: this SQLite ({_sqlite_version(store)}) has no FTS5, so the search index "
                     "cannot be built here; use a Python whose sqlite3 has FTS5")


class Progress:
    """A progress bar on stderr, drawn only when stderr is a terminal, at most ten times a second."""

    def __init__(self, title: str, stream: Any = None) -> None:
        self.title = title
        self.stream = stream
        self.total = 0
        self.done = 0
        self._drawn = 0.0

    @classmethod
    def for_stderr(cls, title: str) -> "Progress":
        stream = sys.stderr if sys.stderr is not None and sys.stderr.isatty() else None
        return cls(title, stream)

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self.stream is not None and time.monotonic() - self._drawn >= 0.1:
            self._draw()

    def _draw(self) -> None:
        self._drawn = time.monotonic()
        share = self.done / self.total if self.total else 1.0
        bar = "#" * int(share * 30)
        self.stream.write(f"\r{self.title} [{bar:<30}] {share:4.0%}  {self.done:,}/{self.total:,} steps")
        self.stream.flush()

    def finish(self) -> None:
        if self.stream is not None and self.total:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()


_FILL_BATCH = 500


def _fill(store: "Store", progress: "Progress") -> int:
    """Index every run and step, oldest run first (ids then follow time, so newest-first is id order)."""
    db = store.db
    if store.is_postgres:
        # Building a GIN index once over all rows is many times faster than growing it row by row.
        db.execute_sql(f'DROP INDEX IF EXISTS "{DOCS}_doc"')
        db.execute_sql("SET LOCAL maintenance_work_mem = '256MB'")
    progress.total = db.execute_sql('SELECT count(*) FROM "steps"').fetchone()[0]
    written = 0
    batch: list[tuple[str, int, int, str | None, dict[str, list[Place]]]] = []

    def flush() -> None:
        nonlocal written
        written += _write_docs(store, batch)
        batch.clear()

    runs = db.execute_sql(f'SELECT {_RUN_COLUMNS} FROM "runs" ORDER BY created_at, id').fetchall()
    for chunk in _chunks(runs, 200):
        for doc in _run_docs(store, chunk, on_step=progress.advance):
            batch.append(doc)
            if len(batch) >= _FILL_BATCH:
                flush()
    flush()
    if store.is_postgres:
        db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{DOCS}_doc" ON "{DOCS}" USING gin (doc)')
        db.execute_sql(f'ANALYZE "{DOCS}"')
    else:
        db.execute_sql(f"INSERT INTO \"{FTS}\"(\"{FTS}\") VALUES ('optimize')")
    progress.finish()
    return written


_RUN_COLUMNS = "id, user_msg, final_text, error, step_count"


def _run_docs(store: "Store", runs: Sequence[tuple], *, on_step: Callable[[], None] = lambda: None
              ) -> Iterator[tuple[str, int, int, str | None, dict[str, list[Place]]]]:
    """The index rows of ``runs`` (``_RUN_COLUMNS`` rows), built from their stored steps."""
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
            assistant = _blocks(assistant_json)
            final_turn = n == steps[-1][0] and is_final_turn(assistant, final_text)
            final_indexed = final_indexed or final_turn
            part = PART_FINAL_TURN if final_turn else PART_TURN
            yield (run_id, n, part, None, _by_column(turn_places(assistant, final=final_turn)))
            if results_json is not None:
                yield (run_id, n, PART_RESULTS, None,
                       _by_column(result_places(_blocks(results_json), tool_names(assistant))))
            on_step()
        if final_text and not final_indexed:
            yield (run_id, step_count, PART_FINAL, final_text, {FINAL: [Place(FINAL, final_text)]})
        if error:
            yield (run_id, step_count, PART_ERROR, error, {ERROR: [Place(ERROR, error)]})


def index_runs(store: "Store", run_ids: Sequence[str]) -> None:
    """Index whole runs written around the commit paths (``dayflow import``), inside the caller's transaction."""
    state = index_state(store)
    if state.kind is None:
        for run_id in run_ids[:1]:
            _note_unindexed(store, state, run_id, 0)
        return
    db = store.db
    for chunk in _chunks(list(run_ids), 200):
        marks = ", ".join([db.param] * len(chunk))
        runs = db.execute_sql(f'SELECT {_RUN_COLUMNS} FROM "runs" WHERE id IN ({marks})', list(chunk)).fetchall()
        _write_docs(store, list(_run_docs(store, runs)))


def _blocks(raw: str | None) -> list:
    """Stored blocks for indexing: a row that cannot be read indexes as nothing (it is shown as damaged)."""
    if raw is None:
        return []
    try:
        value = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return []
    return value if isinstance(value, list) else []


def _by_column(places: Iterable[Place]) -> dict[str, list[Place]]:
    grouped: dict[str, list[Place]] = {}
    for place in places:
        grouped.setdefault(place.column, []).append(place)
    return grouped


# -- writing ------------------------------------------------------------------------------------------


def index_step_text(store: "Store", run_id: str, n: int, *, assistant: list | None = None,
                    results: list | None = None, final_text: str | None = None, error: str | None = None) -> None:
    """Index what a step commit adds: its model turn (``assistant``) or its tool results.

    Called inside the commit's transaction. ``final_text``/``error``: the run
    ends with this step (``append_step(final_status=...)``).
    """
    state = index_state(store)
    if state.kind is None:
        _note_unindexed(store, state, run_id, n)
        return
    docs: list[tuple[str, int, int, str | None, dict[str, list[Place]]]] = []
    if assistant is not None:
        final_turn = is_final_turn(assistant, final_text)
        part = PART_FINAL_TURN if final_turn else PART_TURN
        docs.append((run_id, n, part, None, _by_column(turn_places(assistant, final=final_turn))))
        if final_text and not final_turn:
            docs.append((run_id, n, PART_FINAL, final_text, {FINAL: [Place(FINAL, final_text)]}))
    if results is not None:
        # Tool names are not needed to index (they are in the turn); the check at search time names them.
        docs.append((run_id, n, PART_RESULTS, None, _by_column(result_places(results, {}))))
    if error:
        docs.append((run_id, n, PART_ERROR, error, {ERROR: [Place(ERROR, error)]}))
    _write_docs(store, docs)


def index_run_text(store: "Store", run_id: str, *, task: str | None = None, final_text: str | None = None,
                   error: str | None = None) -> None:
    """Index what a run-level write adds: the task of a new run, or a final text or error it ends with."""
    state = index_state(store)
    if state.kind is None:
        _note_unindexed(store, state, run_id, 0)
        return
    docs: list[tuple[str, int, int, str | None, dict[str, list[Place]]]] = []
    if task is not None:
        docs.append((run_id, 0, PART_TASK, None, {TASK: [Place(TASK, task)]}))
    if final_text or error:
        row = store.db.execute_sql(f'SELECT step_count FROM "runs" WHERE id = {store.db.param}', (run_id,)).fetchone()
        n = row[0] if row else 0
        if final_text:
            docs.append((run_id, n, PART_FINAL, final_text, {FINAL: [Place(FINAL, final_text)]}))
        if error:
            docs.append((run_id, n, PART_ERROR, error, {ERROR: [Place(ERROR, error)]}))
    _write_docs(store, docs)


def _note_unindexed(store: "Store", state: IndexState, run_id: str, n: int) -> None:
    """A process without FTS5 writing to a database that has the index: say once that it is now behind."""
    if not state.has_table or getattr(store, "_search_stale_noted", False):
        return
    store.db.execute_sql(f'INSERT INTO "{DOCS}" (run_id, n, part) VALUES (?, ?, ?)', (run_id, n, PART_STALE))
    store._search_stale_noted = True


def _write_docs(store: "Store", docs: Sequence[tuple[str, int, int, str | None, dict[str, list[Place]]]]) -> int:
    """Insert index rows (``(run_id, n, part, body, places by column)``); rows without a word are skipped."""
    db = store.db
    written = 0
    if store.is_postgres:
        rows = []
        for run_id, n, part, body, places in docs:
            vector = _tsvector(part, places)
            if vector:
                rows.append((run_id, n, part, body, vector))
        if rows:
            # One statement for the batch (a round trip per row is most of a PostgreSQL commit's cost).
            values = ", ".join(["(%s, %s, %s, %s, %s::tsvector)"] * len(rows))
            db.execute_sql(f'INSERT INTO "{DOCS}" (run_id, n, part, body, doc) VALUES {values}',
                           [value for row in rows for value in row])
        return len(rows)
    for run_id, n, part, body, places in docs:
        columns = {column: " ".join(" ".join(words(p.text)) for p in group) for column, group in places.items()}
        columns = {column: text for column, text in columns.items() if text}
        if not columns:
            continue
        cursor = db.execute_sql(f'INSERT INTO "{DOCS}" (run_id, n, part, body) VALUES (?, ?, ?, ?)',
                                (run_id, n, part, body))
        names = tuple(columns)
        db.execute_sql(_fts_insert_sql(names), (cursor.lastrowid, *columns.values()))
        written += 1
    return written


@functools.lru_cache(maxsize=None)
def _fts_insert_sql(columns: tuple[str, ...]) -> str:
    return f'INSERT INTO "{FTS}" (rowid, {", ".join(columns)}) VALUES (?{", ?" * len(columns)})'


def _tsvector(part: int, places: dict[str, list[Place]]) -> str:
    """The tsvector literal of one row: every word with its positions and its place's weight.

    Places are a position apart, so a phrase never spans two of them.
    """
    weights = _WEIGHTS[part]
    positions: dict[str, list[str]] = {}
    size = 0
    at = 0
    for column in COLUMNS:
        for place in places.get(column, ()):
            weight = weights[column]
            at += 1
            for word in words(place.text):
                at += 1
                seen = positions.get(word)
                if seen is None:
                    if size > _PG_MAX_BYTES:
                        continue
                    seen = positions[word] = []
                    size += len(word.encode()) + 8
                if len(seen) < _PG_MAX_POSITIONS:
                    seen.append(f"{min(at, _PG_MAX_POSITION)}{weight}")
                    size += 2
    return " ".join(f"'{word}':{','.join(spots)}" for word, spots in positions.items())


# -- forgetting (retention) ---------------------------------------------------------------------------


def unindex_runs(store: "Store", run_ids: Sequence[str]) -> None:
    """Remove these runs from the index, inside the caller's transaction, before their rows are deleted.

    PostgreSQL and the id table follow a deleted run on their own (ON DELETE
    CASCADE); FTS5 keeps only words, so they are taken out with the words
    the stored rows give again.
    """
    if not run_ids:
        return
    state = index_state(store)
    db = store.db
    marks = ", ".join([db.param] * len(run_ids))
    if state.kind == "fts5":
        for doc in _load_docs(store, db.execute_sql(
                f'SELECT id, run_id, n, part, body FROM "{DOCS}" WHERE run_id IN ({marks}) AND part >= 0',
                list(run_ids)).fetchall()):
            columns = {c: " ".join(" ".join(words(p.text)) for p in group)
                       for c, group in _by_column(doc.places).items()}
            columns = {c: text for c, text in columns.items() if text}
            if columns:
                names = tuple(columns)
                db.execute_sql(f'INSERT INTO "{FTS}" ("{FTS}", rowid, {", ".join(names)}) '
                               f"VALUES ('delete', ?{', ?' * len(names)})", (doc.doc_id, *columns.values()))
    if state.has_table or store.is_postgres:
        db.execute_sql(f'DELETE FROM "{DOCS}" WHERE run_id IN ({marks})', list(run_ids))


# -- reading ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One place that matches, with everything a front end shows (frozen: safe to hand to a UI thread)."""

    run_id: str
    step: int  # 0 for the task
    column: str  # search.text.COLUMNS
    tool: str | None
    snippet: Snippet
    status: str  # the run's effective status (interrupted included)
    at: str  # when the step was committed (the run's last update for the task, final text and errors)
    doc_id: int = 0  # position in the index (newest first); 0 when found by a scan
    others: tuple[tuple[str, str | None], ...] = ()  # other places of the same step that match too
    held: int = 0  # how many of the query's words and phrases the shown place holds

    @property
    def label(self) -> str:
        return LABELS[self.column]


@dataclass(frozen=True)
class SearchResult:
    hits: tuple[Hit, ...]
    more: bool  # the limit cut the list short
    cursor: int | None  # pass as ``before`` for the next page (indexed searches)
    indexed: bool  # False: no index here, every step was scanned
    note: str | None = None  # one line to show the user (no FTS5, an index that is behind)


@dataclass
class _Doc:
    doc_id: int
    run_id: str
    n: int
    part: int
    places: list[Place]
    at: str | None = None  # the step's commit time (step rows only)


def _load_docs(store: "Store", rows: Sequence[tuple], steps: dict | None = None,
               tasks: dict | None = None) -> list[_Doc]:
    """Rebuild the places of index rows (``(id, run_id, n, part, body)``) from the stored runs and steps.

    ``steps`` ((run_id, n) -> (assistant, tool_results, created_at)) and
    ``tasks`` (run_id -> task) are read here unless the caller has them.
    """
    db = store.db
    if steps is None:
        steps = {}
        keys = sorted({(run_id, n) for _id, run_id, n, part, _body in rows if part in _STEP_PARTS})
        for chunk in _chunks(keys, 300):
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
        for chunk in _chunks(run_ids, 300):
            marks = ", ".join([db.param] * len(chunk))
            tasks.update(db.execute_sql(f'SELECT id, user_msg FROM "runs" WHERE id IN ({marks})', list(chunk)))
    docs: list[_Doc] = []
    for doc_id, run_id, n, part, body in rows:
        stored = steps.get((run_id, n)) if part in _STEP_PARTS else None
        if part == PART_TASK:
            places = [Place(TASK, tasks.get(run_id) or "")]
        elif part in (PART_TURN, PART_FINAL_TURN):
            places = turn_places(_blocks(stored[0]), final=part == PART_FINAL_TURN) if stored else []
        elif part == PART_RESULTS:
            places = result_places(_blocks(stored[1]), tool_names(_blocks(stored[0]))) if stored else []
        elif part in (PART_FINAL, PART_ERROR):
            places = [Place(FINAL if part == PART_FINAL else ERROR, body or "")]
        else:
            continue
        docs.append(_Doc(doc_id, run_id, n, part, places, stored[2] if stored else None))
    return docs


def _chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _allowed_columns(query: Query) -> tuple[str, ...]:
    columns = query.columns or COLUMNS
    if query.tools:  # tool:NAME looks in that tool's calls and results
        columns = tuple(c for c in columns if c in (ARGS, RESULT, FAILURE))
    return columns


def _fts5_phrase(term: Term) -> str:
    return f'"{" ".join(term.words)}"' + ("*" if term.prefix else "")


def fts5_expression(query: Query) -> str:
    """The FTS5 MATCH text of ``query``'s terms (words are letters and digits only: nothing to escape)."""
    expression = "(" + " AND ".join(_fts5_phrase(t) for t in query.positive) + ")"
    if query.negative:
        expression += " NOT (" + " OR ".join(_fts5_phrase(t) for t in query.negative) + ")"
    columns = _allowed_columns(query)
    if set(columns) != set(COLUMNS):
        expression = "{" + " ".join(columns) + "} : (" + expression + ")"
    return expression


def _tsquery_operand(term: Term, weights: str) -> str:
    suffix = (":" if term.prefix or weights else "") + ("*" if term.prefix else "") + weights
    operands = [f"'{word}'" + (suffix if i == len(term.words) - 1 else (":" + weights if weights else ""))
                for i, word in enumerate(term.words)]
    return "(" + " <-> ".join(operands) + ")"


def tsquery(query: Query, weights: str = "") -> str:
    """The tsquery text of ``query``'s terms, each lexeme limited to ``weights`` (e.g. "AB"; "" for any)."""
    parts = [_tsquery_operand(t, weights) for t in query.positive]
    parts += ["!" + _tsquery_operand(t, weights) for t in query.negative]
    return " & ".join(parts)


def _pg_match(query: Query) -> tuple[str, list]:
    """The WHERE text for PostgreSQL: rows of the allowed parts whose words carry the allowed weights."""
    columns = set(_allowed_columns(query))
    if columns == set(COLUMNS):
        return "d.doc @@ %s::tsquery", [tsquery(query)]
    clauses, params, whole_parts = [], [], []
    for part, weights in _WEIGHTS.items():
        chosen = "".join(sorted(weight for column, weight in weights.items() if column in columns))
        if not chosen:
            continue
        if len(chosen) == len(weights):
            whole_parts.append(part)
        else:
            clauses.append("(d.part = %s AND d.doc @@ %s::tsquery)")
            params += [part, tsquery(query, chosen)]
    if whole_parts:
        clauses.append(f"(d.part IN ({', '.join(['%s'] * len(whole_parts))}) AND d.doc @@ %s::tsquery)")
        params += [*whole_parts, tsquery(query)]
    return "(" + " OR ".join(clauses) + ")", params


def _parts_holding(columns: Iterable[str]) -> list[int]:
    wanted = set(columns)
    return [part for part, weights in _WEIGHTS.items() if wanted & set(weights)]


def _agent_clause(store: "Store", agent: str | None) -> tuple[str, list] | None:
    """Runs of ``agent``: by the run's recorded agent when runs have one, else every run is the built-in one."""
    if agent is None:
        return None
    field = Run._meta.fields.get("agent")
    if field is None:
        return ("1 = 1", []) if agent == BUILT_IN_AGENT else ("1 = 0", [])
    return f'r."{field.column_name}" = {store.db.param}', [agent]


def _stored_statuses(query: Query) -> list[str]:
    return sorted({"running" if s.value == "interrupted" else s.value for s in query.statuses})


def search(store: "Store", query: Query, *, limit: int = 50, since: str | None = None, agent: str | None = None,
           before: int | None = None) -> SearchResult:
    """Hits for ``query``, newest first: at most ``limit``, from the index row ``before`` on (paging)."""
    check_searchable(query)
    state = index_state(store)
    run_ids = _resolve_runs(store, query.runs) if query.runs else None
    if run_ids == []:
        return SearchResult((), False, None, state.kind is not None)
    if state.kind is None:
        hits, more = _scan(store, query, limit=limit, since=since, agent=agent, run_ids=run_ids)
        note = None
        if not store.is_postgres:
            note = (f"{store.label}: no search index here (this SQLite has no FTS5): every step was scanned"
                    if not state.has_table else
                    f"{store.label}: this SQLite has no FTS5, so the search index cannot be read: every step "
                    "was scanned")
        return SearchResult(tuple(hits), more, None, False, note)
    hits: list[Hit] = []
    cursor = before
    page = max(limit * 2, 64)
    exhausted = False
    while len(hits) <= limit:
        rows = _candidates(store, query, state, cursor=cursor, page=page, since=since, agent=agent,
                           run_ids=run_ids)
        if rows:
            cursor = rows[-1][0]
            hits.extend(_verify(store, query, rows))
        if len(rows) < page:
            exhausted = True
            break
        page = min(page * 2, 4096)
    more = len(hits) > limit or not exhausted
    hits = hits[:limit]
    next_cursor = hits[-1].doc_id if hits and more else None
    return SearchResult(tuple(hits), more and bool(hits), next_cursor, True, _stale_note(store))


def _stale_note(store: "Store") -> str | None:
    if store.is_postgres:
        return None
    row = store.db.execute_sql(f'SELECT 1 FROM "{DOCS}" WHERE part < 0 LIMIT 1').fetchone()
    if row is None:
        return None
    return ("the search index misses steps written by a Dayflow whose SQLite has no FTS5; "
            "rebuild it with: dayflow search --reindex")


def _resolve_runs(store: "Store", prefixes: Sequence[str]) -> list[str]:
    found: list[str] = []
    for prefix in prefixes:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = store.db.execute_sql(
            f"SELECT id FROM \"runs\" WHERE id = {store.db.param} OR id LIKE {store.db.param} ESCAPE '\\' "
            "LIMIT 1000", (prefix, escaped + "%")).fetchall()
        found.extend(row[0] for row in rows if row[0].startswith(prefix))
    return sorted(set(found))


def _candidates(store: "Store", query: Query, state: IndexState, *, cursor: int | None, page: int,
                since: str | None, agent: str | None, run_ids: list[str] | None) -> list[tuple]:
    """Index rows that may hold a hit, newest first (checked against the stored rows afterwards)."""
    db = store.db
    p = db.param
    where: list[str] = []
    params: list[Any] = []
    joins = ""
    key = "d.id"
    base = f'FROM "{DOCS}" d'
    if query.positive and state.kind == "fts5":
        # The FTS table drives: it walks its matches newest first (rowid order) and stops at the limit.
        key = "f.rowid"
        base = f'FROM "{FTS}" f JOIN "{DOCS}" d ON d.id = f.rowid'
        where.append(f'"{FTS}" MATCH ?')
        params.append(fts5_expression(query))
    elif query.positive:
        clause, clause_params = _pg_match(query)
        where.append(clause)
        params += clause_params
    else:  # no word (in:, tool: or run: alone): walk the index rows of the places asked for, newest first
        parts = _parts_holding(_allowed_columns(query))
        where.append(f"d.part IN ({', '.join(str(part) for part in parts)})")
    where.append("d.part >= 0")
    if cursor is not None:
        where.append(f"{key} < {p}")
        params.append(cursor)
    if run_ids is not None:
        where.append(f"d.run_id IN ({', '.join([p] * len(run_ids))})")
        params += run_ids
    statuses = _stored_statuses(query)
    agent_clause = _agent_clause(store, agent)
    if statuses or agent_clause or since:
        joins += ' JOIN "runs" r ON r.id = d.run_id'
    if statuses:
        where.append(f"r.status IN ({', '.join([p] * len(statuses))})")
        params += statuses
    if agent_clause:
        where.append(agent_clause[0])
        params += agent_clause[1]
    if query.tools:
        # Steps that called one of the tools (a superset: the stored JSON is checked exactly afterwards).
        patterns = []
        for name in query.tools:
            quoted = json.dumps(name, ensure_ascii=False)
            escaped = quoted.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            patterns.append(f'%"name":{escaped}%')
        likes = " OR ".join([f"t.assistant LIKE {p} ESCAPE '\\'"] * len(patterns))
        where.append(f'd.part IN ({PART_TURN}, {PART_FINAL_TURN}, {PART_RESULTS}) AND EXISTS (SELECT 1 FROM "steps" t '
                     f"WHERE t.run_id = d.run_id AND t.n = d.n AND ({likes}))")
        params += patterns
    if since:
        joins += (' LEFT JOIN "steps" s ON s.run_id = d.run_id AND s.n = d.n '
                  f"AND d.part IN ({PART_TURN}, {PART_FINAL_TURN}, {PART_RESULTS})")
        where.append(f"COALESCE(s.created_at, r.updated_at) >= {p}")
        params.append(since)
    sql = (f"SELECT d.id, d.run_id, d.n, d.part, d.body {base}{joins} WHERE {' AND '.join(where)} "
           f"ORDER BY {key} DESC LIMIT {int(page)}")
    return db.execute_sql(sql, params).fetchall()


def _verify(store: "Store", query: Query, rows: Sequence[tuple]) -> list[Hit]:
    """The candidates that really match, as hits (the stored rows are the truth; the index only narrows)."""
    from .leases import effective_status

    docs = _load_docs(store, rows)
    runs = _runs_by_id(store, sorted({doc.run_id for doc in docs}))
    wanted = {s.value for s in query.statuses}
    hits: list[Hit] = []
    for doc in docs:
        run = runs.get(doc.run_id)
        if run is None:
            continue
        status = effective_status(run)
        if wanted and status not in wanted:
            continue
        hit = _hit_of(doc, query, status, doc.at or run.updated_at)
        if hit is not None:
            hits.append(hit)
    return hits


def _hit_of(doc: _Doc, query: Query, status: str, at: str) -> Hit | None:
    columns = _allowed_columns(query)
    places = [p for p in doc.places if p.column in columns]
    if query.tools:
        if doc.part not in _STEP_PARTS:
            return None
        places = [p for p in places if p.tool in query.tools]
    measured = [PlaceWords.of(p) for p in places]
    if not measured or not place_matches(measured, query.terms):
        return None
    best = best_place(measured, query.terms)
    if best is None:  # no positive term (in:, tool: or run: alone): the first place stands for the step
        chosen, groups = measured[0], []
    else:
        chosen, groups = best
    others = tuple((pw.place.column, pw.place.tool) for pw in measured
                   if pw is not chosen and any(pw.spans(t) for t in query.positive))
    held = sum(1 for term in query.positive if chosen.spans(term))
    return Hit(doc.run_id, doc.n, chosen.place.column, chosen.place.tool, snippet(chosen.place.text, groups),
               status, at, doc.doc_id, others, held)


def _runs_by_id(store: "Store", run_ids: Sequence[str]) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    for chunk in _chunks(list(run_ids), 300):
        columns = [f for f in Run._meta.sorted_fields if f.name != "final_text"]
        for run in store._with_clock(Run.select(*columns)).where(Run.id.in_(list(chunk))):
            runs[run.id] = run
    return runs


# -- without an index: scan ---------------------------------------------------------------------------


def _scan(store: "Store", query: Query, *, limit: int, since: str | None, agent: str | None,
          run_ids: list[str] | None) -> tuple[list[Hit], bool]:
    """Every run and step read and matched in Python, newest run first: the same answers, slowly."""
    from .leases import effective_status

    agent_clause = _agent_clause(store, agent)
    if agent_clause is not None and agent_clause[0] == "1 = 0":
        return [], False
    runs = store._with_clock(Run.select()).order_by(Run.created_at.desc(), Run.id.desc())
    if run_ids is not None:
        runs = runs.where(Run.id.in_(run_ids))
    if query.statuses:
        runs = runs.where(Run.status.in_(_stored_statuses(query)))
    wanted = {s.value for s in query.statuses}
    hits: list[Hit] = []
    for run in runs.iterator():
        status = effective_status(run)
        if wanted and status not in wanted:
            continue
        steps = list(Step.select(Step.run, Step.n, Step.assistant, Step.tool_results, Step.created_at)
                     .where(Step.run == run.id).order_by(Step.n))
        rows: list[tuple] = [(0, run.id, 0, PART_TASK, None)]
        final_indexed = False
        for step in steps:
            assistant = _blocks(step.assistant)
            final_turn = step.n == steps[-1].n and is_final_turn(assistant, run.final_text)
            final_indexed = final_indexed or final_turn
            rows.append((0, run.id, step.n, PART_FINAL_TURN if final_turn else PART_TURN, None))
            if step.tool_results is not None:
                rows.append((0, run.id, step.n, PART_RESULTS, None))
        if run.final_text and not final_indexed:
            rows.append((0, run.id, run.step_count, PART_FINAL, run.final_text))
        if run.error:
            rows.append((0, run.id, run.step_count, PART_ERROR, run.error))
        known = {(run.id, s.n): (s.assistant, s.tool_results, s.created_at) for s in steps}
        for doc in reversed(_load_docs(store, rows, steps=known, tasks={run.id: run.user_msg})):
            at = doc.at or run.updated_at
            if since and at < since:
                continue
            hit = _hit_of(doc, query, status, at)
            if hit is not None:
                hits.append(hit)
                if len(hits) > limit:
                    return hits[:limit], True
    return hits, False


class SearchQueries:
    """The store's search operations (a part of ``Store``)."""

    @store_call(cut_stalls=False)  # may rightly run long on a healthy server
    def search(self: "Store", query: Query, *, limit: int = 50, since: str | None = None,
               agent: str | None = None, before: int | None = None) -> SearchResult:
        """Hits for a parsed query (``search.query.parse``), newest first; see ``search`` above."""
        return search(self, query, limit=limit, since=since, agent=agent, before=before)

    @store_call(cut_stalls=False)  # may rightly run long on a healthy server
    def rebuild_search_index(self: "Store", progress: Progress | None = None) -> int:
        """Build the search index again from every stored run (``dayflow search --reindex``)."""
        return rebuild(self, progress)
