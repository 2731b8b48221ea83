"""SQLite: one file (with its -wal) on this host, FTS5 for the search index, incremental vacuum."""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import peewee
from peewee import SqliteDatabase

from ...config import settings
from ...config.errors import NoSuchFile, StoreError
from ...search.query import Query, Term
from ...search.text import COLUMNS, words
from ..retry import ReportCause, store_call
from ..search.docs import DOCS, DocRow, IndexState, allowed_columns, by_column, load_docs
from .base import Dialect

if TYPE_CHECKING:
    from ..handle import StoreHandle

# A ~2.5 KB step row took a 4 KB page of its own; 16 KB pages hold several: a third fewer bytes
# per step, commits and reads no slower (bench item 9). New files only: an existing file keeps its pages.
NEW_FILE_PAGE_SIZE = 16384
# The FTS5 table of the search index, keyed by search_docs.id.
FTS = "search_fts"
# Incremental vacuum: bytes freed per write transaction, and the pause that lets a waiting writer in.
VACUUM_BYTES_PER_STEP = 1 << 20
VACUUM_PAUSE_S = 0.01
# A truncating checkpoint holds off writers while it waits for readers: wait this long at most.
CHECKPOINT_WAIT_MS = 250


def _sqlite_has_fts5(db: peewee.Database) -> bool:
    if db.execute_sql("SELECT sqlite_compileoption_used('ENABLE_FTS5')").fetchone()[0]:
        return True
    try:  # registered without the compile option (an extension): the module list says so, where it exists
        return db.execute_sql("SELECT count(*) FROM pragma_module_list WHERE name = 'fts5'").fetchone()[0] > 0
    except peewee.DatabaseError:
        return False


# Tests stand in for a SQLite build without FTS5 by replacing this (the one place that asks).
fts5_available: Callable[[peewee.Database], bool] = _sqlite_has_fts5


class SqliteDialect(Dialect):
    name = "sqlite"
    title = "SQLite"
    container = "file"
    PRAGMAS = {
        "journal_mode": "wal",
        "foreign_keys": 1,
        "synchronous": "full",  # a paid step must survive power loss
        # busy_timeout: the sqlite_busy_timeout_s setting (10 s by default), added in connect().
        # With 16 KB pages SQLite's default (a checkpoint every 1,000 pages) lets the -wal reach 16 MB,
        # and the file keeps that size; checkpoint every 4 MB and cut the file back to 4 MB after.
        "wal_autocheckpoint": 256,
        "journal_size_limit": 4 * 1024 * 1024,
    }

    def __init__(self, path: Path):
        self.path = path
        self.label = str(path)
        self._identity: tuple[int, int] | None = None

    def prepare(self, *, create: bool, make_parent: bool = False) -> None:
        path = self.path
        if path.is_dir():
            raise StoreError(f"{self.label}: is a directory, not a database file")
        if not path.exists():
            # A named file's directory is never made: a typo in it is refused, as a missing file is.
            if not make_parent and not path.parent.is_dir():
                raise NoSuchFile(f"{self.label}: no such directory {path.parent} (create it first)")
            if not create:
                raise NoSuchFile(f"{self.label}: no such database file")
            try:
                _create_private_file(path, make_parent=make_parent)
            except OSError as exc:
                raise StoreError(f"{self.label}: cannot create database ({exc.strerror})") from exc
        elif not create and path.stat().st_size == 0:
            # Checked before connecting: opening would write a header (WAL mode) into a file we only read.
            raise StoreError(f"{self.label}: no Dayflow tables in this file yet (nothing to read)")

    def connect(self) -> peewee.Database:
        # How long a writer waits for another's lock before "database is locked" (the store's retries
        # then take over): the sqlite_busy_timeout_s setting.
        busy_s = settings.current().sqlite_busy_timeout_s
        pragmas = {**self.PRAGMAS, "busy_timeout": round(busy_s * 1000)}
        db = SqliteDatabase(self.label, pragmas=pragmas, timeout=busy_s, check_same_thread=False)
        self._identity = self._file_identity()
        return db

    @property
    def short_label(self) -> str:
        return self.path.name

    @contextlib.contextmanager
    def write_transaction(self, db: peewee.Database) -> Iterator[None]:
        # BEGIN IMMEDIATE takes the write lock up front, so two writers queue on
        # the busy timeout instead of failing when a read upgrades to a write.
        with ReportCause(db.atomic("IMMEDIATE")):
            yield

    def change_marker(self, db: peewee.Database) -> tuple:
        return (db.execute_sql("PRAGMA data_version").fetchone()[0],)

    def schema_version(self, db: peewee.Database) -> int:
        return db.execute_sql("PRAGMA user_version").fetchone()[0]

    def set_schema_version(self, db: peewee.Database, version: int) -> None:
        db.execute_sql(f"PRAGMA user_version = {int(version)}")

    def bad_history_step(self, db: peewee.Database, run_id: str) -> int | None:
        # In SQL (json_valid): a 10,000-step history is not decoded twice before a resume.
        sql = ("SELECT n FROM steps WHERE run_id = ? AND NOT ("
               "CASE WHEN json_valid(assistant) THEN json_type(assistant) ELSE '' END = 'array' AND "
               "(tool_results IS NULL OR CASE WHEN json_valid(tool_results) THEN json_type(tool_results) "
               "ELSE '' END = 'array')) ORDER BY n LIMIT 1")
        bad = db.execute_sql(sql, (run_id,)).fetchone()
        return None if bad is None else bad[0]

    def _file_identity(self, suffix: str = "") -> tuple[int, int] | None:
        try:
            info = os.stat(self.label + suffix)
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    def verify_same_database(self, db: peewee.Database) -> None:
        """Refuse to go on when the file was moved, replaced or lost its ``-wal`` since it was opened.

        SQLite keeps writing to the files it has open; a path that now names
        another file (or none) means the run's steps would land where nobody
        looks. Called before every paid call: two ``stat``s per step.
        """
        if self._file_identity() != self._identity:
            raise StoreError(f"{self.label}: the database file was moved, replaced or deleted while this "
                             "run was driven; stopping before another paid call (put the file back at "
                             f"{self.label} and `dayflow resume` continues the run)")
        # While this process holds a connection (it has just committed), SQLite keeps the -wal in place;
        # only the last connection to close removes it. Gone now means someone deleted it.
        if not db.is_closed() and self._file_identity("-wal") is None:
            raise StoreError(f"{self.label}-wal: the write-ahead log was deleted or replaced while this "
                             "run was driven; stopping before another paid call")

    # -- sizes and vacuum -----------------------------------------------------------------------

    def octet_length(self, column: peewee.Field) -> peewee.Node:
        return peewee.fn.LENGTH(peewee.Cast(column, "BLOB"))

    def free_bytes(self, db: peewee.Database) -> int | None:
        return _pragma(db, "freelist_count") * _pragma(db, "page_size")

    def database_bytes(self, db: peewee.Database, tables: Sequence[str]) -> int:
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())

    def vacuum(self, store: "StoreHandle", tables: Sequence[str]) -> tuple[bool, bool]:
        """A megabyte per short write transaction, so a worker's commit waits at most one chunk.

        A file not yet in incremental auto-vacuum mode is converted first by
        one full ``VACUUM``; the write-ahead log is checkpointed and truncated last.
        """
        converted = False
        if _auto_vacuum_mode(store) != 2:
            _convert_to_incremental(store)
            converted = True
        while _vacuum_step(store) > 0:
            time.sleep(VACUUM_PAUSE_S)
        return converted, _checkpoint(store)

    # -- the search index: FTS5 -----------------------------------------------------------------
    #
    # A contentless FTS5 table keyed by search_docs.id, one column per place. The text already lives
    # in the step rows, so the index holds only words and positions. The words are written already
    # split and folded (search.text.words) and FTS5's ascii tokenizer only separates them, so both
    # databases and the snippet highlighter agree on what a word is.

    def search_index_state(self, db: peewee.Database) -> IndexState:
        has_table = db.execute_sql("SELECT count(*) FROM sqlite_master WHERE name = ?", (FTS,)).fetchone()[0] > 0
        usable = has_table and fts5_available(db)
        return IndexState("fts5" if usable else None, has_table)

    def search_unavailable(self, db: peewee.Database) -> str | None:
        if fts5_available(db):
            return None
        version = db.execute_sql("SELECT sqlite_version()").fetchone()[0]
        return f"this SQLite (SQLite {version}) has no FTS5"

    def create_search_tables(self, db: peewee.Database) -> None:
        # AUTOINCREMENT: an id is never reused, so index entries left by a deleted row can never
        # be taken for a new row's words.
        db.execute_sql(
            f'CREATE TABLE IF NOT EXISTS "{DOCS}" (id INTEGER PRIMARY KEY AUTOINCREMENT, '
            f'run_id TEXT NOT NULL REFERENCES "runs" ("id") ON DELETE CASCADE, n INTEGER NOT NULL, '
            f"part SMALLINT NOT NULL, body TEXT)")
        db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{DOCS}_run_id_n" ON "{DOCS}" (run_id, n)')
        # Finds the one "index is behind" marker without a scan (empty otherwise).
        db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{DOCS}_stale" ON "{DOCS}" (part) WHERE part < 0')
        # columnsize=0: no per-row lengths (they serve relevance ranking; hits come newest first).
        db.execute_sql(f'CREATE VIRTUAL TABLE IF NOT EXISTS "{FTS}" USING fts5({", ".join(COLUMNS)}, '
                       "content='', columnsize=0, tokenize='ascii')")

    def clear_search_tables(self, db: peewee.Database) -> None:
        db.execute_sql(f'DROP TABLE IF EXISTS "{FTS}"')
        db.execute_sql(f'DROP TABLE IF EXISTS "{DOCS}"')

    @contextlib.contextmanager
    def filling_search_index(self, db: peewee.Database):
        yield
        db.execute_sql(f"INSERT INTO \"{FTS}\"(\"{FTS}\") VALUES ('optimize')")

    def write_search_docs(self, db: peewee.Database, docs: Sequence[DocRow]) -> int:
        written = 0
        for run_id, n, part, body, places in docs:
            columns = _column_words(places)
            if not columns:
                continue
            cursor = db.execute_sql(f'INSERT INTO "{DOCS}" (run_id, n, part, body) VALUES (?, ?, ?, ?)',
                                    (run_id, n, part, body))
            db.execute_sql(_fts_insert_sql(tuple(columns)), (cursor.lastrowid, *columns.values()))
            written += 1
        return written

    def forget_search_words(self, db: peewee.Database, run_ids: Sequence[str]) -> None:
        # FTS5 keeps only words, so they are taken out with the words the stored rows give again.
        marks = ", ".join([db.param] * len(run_ids))
        rows = db.execute_sql(f'SELECT id, run_id, n, part, body FROM "{DOCS}" WHERE run_id IN ({marks}) '
                              "AND part >= 0", list(run_ids)).fetchall()
        for doc in load_docs(db, rows):
            columns = _column_words(by_column(doc.places))
            if columns:
                names = tuple(columns)
                db.execute_sql(f'INSERT INTO "{FTS}" ("{FTS}", rowid, {", ".join(names)}) '
                               f"VALUES ('delete', ?{', ?' * len(names)})", (doc.doc_id, *columns.values()))

    def search_match(self, query: Query) -> tuple[str, str, str, list]:
        # The FTS table drives: it walks its matches newest first (rowid order) and stops at the limit.
        return (f'FROM "{FTS}" f JOIN "{DOCS}" d ON d.id = f.rowid', "f.rowid", f'"{FTS}" MATCH ?',
                [fts5_expression(query)])

    def search_index_behind(self, db: peewee.Database) -> bool:
        # The rows a process without FTS5 leaves (PART_STALE), found through their partial index.
        return db.execute_sql(f'SELECT 1 FROM "{DOCS}" WHERE part < 0 LIMIT 1').fetchone() is not None

    def unindexed_note(self, state: IndexState) -> str | None:
        if not state.has_table:
            return "no search index here (this SQLite has no FTS5): every step was scanned"
        return "this SQLite has no FTS5, so the search index cannot be read: every step was scanned"


def _create_private_file(path: Path, *, make_parent: bool = False) -> None:
    """Create the database file owner-only before SQLite touches it (SQLite gives -wal and -shm its mode),
    as an empty WAL database: the first write fixes a file's page size and auto-vacuum mode, so both are set
    here, before WAL mode. Incremental auto-vacuum lets ``dayflow vacuum`` give free pages back a megabyte
    per short transaction while workers and the dashboard go on (``SqliteDialect.vacuum``)."""
    if make_parent:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"PRAGMA page_size = {NEW_FILE_PAGE_SIZE}")
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = wal")
    finally:
        conn.close()


# -- FTS5 text ----------------------------------------------------------------------------------------


def _column_words(places: dict) -> dict[str, str]:
    """The folded words of each place column that has any, as FTS5 takes them (separated by spaces)."""
    columns = {column: " ".join(" ".join(words(p.text)) for p in group) for column, group in places.items()}
    return {column: text for column, text in columns.items() if text}


@functools.lru_cache(maxsize=None)
def _fts_insert_sql(columns: tuple[str, ...]) -> str:
    return f'INSERT INTO "{FTS}" (rowid, {", ".join(columns)}) VALUES (?{", ?" * len(columns)})'


def _fts5_phrase(term: Term) -> str:
    return f'"{" ".join(term.words)}"' + ("*" if term.prefix else "")


def fts5_expression(query: Query) -> str:
    """The FTS5 MATCH text of ``query``'s terms (words are letters and digits only: nothing to escape)."""
    expression = "(" + " AND ".join(_fts5_phrase(t) for t in query.positive) + ")"
    if query.negative:
        expression += " NOT (" + " OR ".join(_fts5_phrase(t) for t in query.negative) + ")"
    columns = allowed_columns(query)
    if set(columns) != set(COLUMNS):
        expression = "{" + " ".join(columns) + "} : (" + expression + ")"
    return expression


# -- vacuum steps, each one store call ----------------------------------------------------------------


def _pragma(db: peewee.Database, name: str) -> int:
    return int(db.execute_sql(f"PRAGMA {name}").fetchone()[0])


@store_call
def _auto_vacuum_mode(store: "StoreHandle") -> int:
    return _pragma(store.db, "auto_vacuum")


@store_call
def _convert_to_incremental(store: "StoreHandle") -> None:
    """One full ``VACUUM``: it rewrites the file, so it holds the write lock for as long as that takes."""
    store.db.execute_sql("PRAGMA auto_vacuum = INCREMENTAL")
    store.db.execute_sql("VACUUM")


@store_call
def _vacuum_step(store: "StoreHandle") -> int:
    """Free up to ``VACUUM_BYTES_PER_STEP`` in one short write transaction; the free pages left."""
    pages = max(1, VACUUM_BYTES_PER_STEP // _pragma(store.db, "page_size"))
    # executescript steps the pragma to its end (a plain execute frees one page per step).
    store.db.connection().executescript(f"PRAGMA incremental_vacuum({pages});")
    return _pragma(store.db, "freelist_count")


@store_call
def _checkpoint(store: "StoreHandle") -> bool:
    """Copy the log into the file and truncate it; False when a reader kept it from finishing.

    The wait is cut short (``CHECKPOINT_WAIT_MS``, not the busy timeout: 10 s by default)
    because writers queue behind it; a log left whole shrinks at a later checkpoint.
    """
    usual = _pragma(store.db, "busy_timeout")
    store.db.execute_sql(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
    try:
        busy, _log, _done = store.db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        store.db.execute_sql(f"PRAGMA busy_timeout = {usual}")
    return busy == 0
