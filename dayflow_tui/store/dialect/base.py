"""The one interface behind which SQLite and PostgreSQL differ.

The store asks its dialect for a connection, a write transaction, a change
marker, the schema version, the database's clock, the few statements that
are written differently (the search index's words, sizes and vacuum, an
archive's snapshot and ids); everything else is the same Peewee code on
both. No module outside ``store.dialect`` asks which database it is on.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

import peewee

from ... import clock
from ..search.docs import DocRow, IndexState

if TYPE_CHECKING:
    from ...search.query import Query
    from ..handle import StoreHandle


class ChangeFeed:
    """Word that another connection committed, pushed by the database where it can push (PostgreSQL's
    LISTEN); this one pushes nothing, and a reader polls the change marker (SQLite's ``data_version``).

    ``live`` says whether pushes arrive now: while it is False a reader polls at its normal pace, while it is
    True it may poll rarely (a safety net). ``notices`` counts the commits pushed, ``connects`` and ``drops``
    the feed's connection's life (for tests and the dashboard's status).
    """

    live = False

    def __init__(self) -> None:
        self.notices = 0
        self.connects = 0
        self.drops = 0
        self._woken = threading.Event()

    def start(self) -> "ChangeFeed":
        return self

    def stop(self) -> None:
        self._woken.set()

    def wait(self, timeout: float) -> bool:
        """Sleep until a push (True) or ``timeout`` seconds (False)."""
        woken = self._woken.wait(timeout)
        self._woken.clear()
        return woken


class Dialect:
    """One kind of database. Subclasses fill in what differs."""

    name: str  # "sqlite" or "postgres": for tests and logs, never branched on outside this package
    title: str  # the database's name as shown ("SQLite", "PostgreSQL")
    # Says where Dayflow's tables are missing: "file" or "database".
    container: str
    label: str
    # Added to the refusal to migrate a database that holds tables that are not Dayflow's.
    foreign_tables_hint = ""
    # True: vacuum gives space back to the disk; False: free space stays and is reused by new rows.
    vacuum_shrinks_files = True

    # -- opening and writing --------------------------------------------------------------------

    def prepare(self, *, create: bool, make_parent: bool = False) -> None:
        """Checks (and creation) before the first connection; ``StoreError`` for a target that cannot serve.
        ``make_parent``: a file's missing directory may be made (the default file's, never a named one's)."""

    def connect(self) -> peewee.Database:
        raise NotImplementedError

    @property
    def short_label(self) -> str:
        raise NotImplementedError

    def write_transaction(self, db: peewee.Database) -> contextlib.AbstractContextManager:
        raise NotImplementedError

    def change_marker(self, db: peewee.Database) -> tuple:
        raise NotImplementedError

    def change_feed(self, on_change: Callable[[], None] | None = None) -> ChangeFeed:
        """A feed of other connections' commits, not yet started (``on_change`` is called on the feed's own
        thread for each). Here: none; the change marker is polled."""
        return ChangeFeed()

    def skip_locked(self, query: peewee.ModelSelect) -> peewee.ModelSelect:
        """A worker's pick of a row: rows another session is writing are passed over, not waited for."""
        return query

    def locked_until_commit(self, query: peewee.ModelSelect) -> peewee.ModelSelect:
        """Rows read in order to delete them: a writer racing the delete waits (a database lock does this)."""
        return query

    def rows_locked_suffix(self, table_alias: str) -> str:
        """SQL after a raw SELECT whose rows are about to be changed: a writer racing it waits (SQLite's one
        write lock already does this for a SELECT inside a write transaction)."""
        return ""

    def now(self) -> Any:
        """The value a timestamp column is set to: the database's clock where hosts share one database."""
        return clock.iso()

    def now_column(self) -> Any:
        """A select expression for the database's current time, or None where the host clock is the clock."""
        return None

    def verify_same_database(self, db: peewee.Database) -> None:
        """Raise ``StoreError`` when what this store writes would land where nobody looks."""

    def bad_history_step(self, db: peewee.Database, run_id: str) -> int | None:
        """The first step whose stored JSON is not an array of blocks (None: all readable), or -1: check in Python."""
        return -1

    def try_deadline(self, db: peewee.Database, seconds: float) -> contextlib.AbstractContextManager[dict]:
        """Bound one try of a store call (a file database cannot stall: SQLite's busy timeout bounds it)."""
        return contextlib.nullcontext({"cut": False})

    # -- schema ---------------------------------------------------------------------------------

    def schema_version(self, db: peewee.Database) -> int:
        raise NotImplementedError

    def set_schema_version(self, db: peewee.Database, version: int) -> None:
        raise NotImplementedError

    def schema_version_for_claim(self, db: peewee.Database) -> int:
        """Inside a claim's write transaction: the schema version, read so that no migration commits between
        this read and the claim's commit (SQLite's write lock already orders them)."""
        return self.schema_version(db)

    def lock_migrations(self, db: peewee.Database) -> None:
        """Make two first opens of one database take turns (inside the migration's transaction)."""

    def own_tables(self) -> tuple:
        """Dialect-only tables (PostgreSQL's schema version and change counter)."""
        return ()

    def after_create(self, db: peewee.Database) -> None:
        """Rows the dialect's own tables start with."""

    def widen_column(self, db: peewee.Database, table: str, column: str, sql_type: str) -> None:
        """Give a column a wider type, where the database enforces the declared one (SQLite does not)."""

    # -- archives (export, import) --------------------------------------------------------------

    def begin_snapshot(self, db: peewee.Database) -> None:
        """Inside a fresh transaction: make every read in it see one moment (SQLite's WAL read already does)."""

    def lock_for_new_ids(self, db: peewee.Database, tables: Sequence[str]) -> None:
        """Inside a write transaction: no other session may insert into ``tables`` until it commits."""

    def after_explicit_ids(self, db: peewee.Database, tables: Sequence[str]) -> None:
        """Rows were inserted into ``tables`` with ids chosen by the caller: the next generated id follows them."""

    # -- sizes and vacuum -----------------------------------------------------------------------

    def octet_length(self, column: peewee.Field) -> peewee.Node:
        """An expression for the bytes a text column's value takes."""
        raise NotImplementedError

    def free_bytes(self, db: peewee.Database) -> int | None:
        """Bytes of free pages inside the database file (None: the database keeps no such count)."""
        return None

    def database_bytes(self, db: peewee.Database, tables: Sequence[str]) -> int:
        """Bytes on disk that hold Dayflow's data."""
        raise NotImplementedError

    def vacuum(self, store: "StoreHandle", tables: Sequence[str]) -> tuple[bool, bool]:
        """Give free space back, safe while other processes read and write: (converted, log truncated)."""
        raise NotImplementedError

    # -- the search index -----------------------------------------------------------------------

    def search_index_state(self, db: peewee.Database) -> IndexState:
        raise NotImplementedError

    def search_unavailable(self, db: peewee.Database) -> str | None:
        """Why this process cannot write or read the search index here (None: it can)."""
        return None

    def create_search_tables(self, db: peewee.Database) -> None:
        raise NotImplementedError

    def clear_search_tables(self, db: peewee.Database) -> None:
        """Inside a write transaction: empty the index (``create_search_tables`` then makes it anew)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def filling_search_index(self, db: peewee.Database):
        """Around writing every row of the index at once (a migration or a rebuild)."""
        yield

    def write_search_docs(self, db: peewee.Database, docs: Sequence[DocRow]) -> int:
        """Insert index rows; rows without a word are skipped. Returns how many were written."""
        raise NotImplementedError

    def forget_search_words(self, db: peewee.Database, run_ids: Sequence[str]) -> None:
        """Before ``run_ids``' index rows are deleted: take out words the database does not drop with them."""

    def search_match(self, query: "Query") -> tuple[str, str, str, list]:
        """Index rows whose words match ``query``'s terms: (FROM text, key column, WHERE clause, parameters).

        The FROM text names the index rows ``d``; the key orders them newest first.
        """
        raise NotImplementedError

    def search_index_behind(self, db: peewee.Database) -> bool:
        """True when a process that could not write the index wrote steps (``search --reindex`` mends it)."""
        return False

    def unindexed_note(self, state: IndexState) -> str | None:
        """The line to show when a search scanned every step because there is no index to read."""
        return None
