"""What differs between SQLite and PostgreSQL, as two small classes behind one interface.

The store asks its backend for a connection, a write transaction, a change
marker, the schema version, the database's clock and the few queries that
are written differently; everything else is the same Peewee code on both.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import peewee
from peewee import SQL, PostgresqlDatabase, SqliteDatabase, fn

from .. import clock
from ..errors import StoreError
from .driver_imports import load_psycopg
from .deadline import try_deadline
from .models import ChangeCounter, StoreMeta
from .retry import ReportCause, try_time_left

# Rows of the PostgreSQL change counter (see models.ChangeCounter).
CHANGE_SLOTS = 16


class Backend:
    """One kind of database. Subclasses fill in what differs."""

    kind: str
    # Says where Dayflow's tables are missing: "file" or "database".
    container: str
    label: str

    def connect(self) -> peewee.Database:
        raise NotImplementedError

    @property
    def short_label(self) -> str:
        raise NotImplementedError

    def write_transaction(self, db: peewee.Database) -> contextlib.AbstractContextManager:
        raise NotImplementedError

    def change_marker(self, db: peewee.Database) -> tuple:
        raise NotImplementedError

    def schema_version(self, db: peewee.Database) -> int:
        raise NotImplementedError

    def set_schema_version(self, db: peewee.Database, version: int) -> None:
        raise NotImplementedError

    def lock_migrations(self, db: peewee.Database) -> None:
        """Make two first opens of one database take turns (inside the migration's transaction)."""

    def own_tables(self) -> tuple:
        """Backend-only tables (PostgreSQL's schema version and change counter)."""
        return ()

    def after_create(self, db: peewee.Database) -> None:
        """Rows the backend's own tables start with."""

    def skip_locked(self, query: peewee.ModelSelect) -> peewee.ModelSelect:
        """A worker's pick of a row: rows another session is writing are passed over, not waited for."""
        return query

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


class SqliteBackend(Backend):
    kind = "sqlite"
    container = "file"
    PRAGMAS = {
        "journal_mode": "wal",
        "foreign_keys": 1,
        "synchronous": "full",  # a paid step must survive power loss
        "busy_timeout": 10_000,
        # With 16 KB pages SQLite's default (a checkpoint every 1,000 pages) lets the -wal reach 16 MB,
        # and the file keeps that size; checkpoint every 4 MB and cut the file back to 4 MB after.
        "wal_autocheckpoint": 256,
        "journal_size_limit": 4 * 1024 * 1024,
    }

    def __init__(self, path: Path):
        self.path = path
        self.label = str(path)
        self._identity: tuple[int, int] | None = None

    def connect(self) -> peewee.Database:
        db = SqliteDatabase(self.label, pragmas=self.PRAGMAS, timeout=10, check_same_thread=False)
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


class _DayflowPostgres(PostgresqlDatabase):
    """PostgreSQL with one session setting Dayflow relies on.

    Dayflow never keeps a transaction open across a model call, so a session
    idle inside a transaction for a minute is a stalled client (paused, cut
    off): the server ends it and its row locks go, instead of a run's lease
    being stuck behind them.
    """

    idle_in_transaction_timeout = "60s"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # Each thread's open connection, so the deadline watchdog (another thread) can cut a stalled one.
        self.thread_connections: dict[int, Any] = {}

    def _connect(self):
        # As Peewee's, but a connection opened inside a store call's try waits no longer than the try has
        # left (libpq counts whole seconds, at least 2): a server that accepts nothing must not hold a
        # process that is tidying up after an error for the full connect timeout.
        self._adapter.check_driver()
        params = dict(self.connect_params)
        left = try_time_left()
        if left is not None and "connect_timeout" in params:
            params["connect_timeout"] = max(2, min(int(params["connect_timeout"]), math.ceil(left)))
        conn = self._adapter.connect(self, **params)
        if self._isolation_level:
            conn.set_isolation_level(self._isolation_level)
        conn.autocommit = True
        return conn

    def _initialize_connection(self, conn) -> None:
        super()._initialize_connection(conn)
        self.thread_connections[threading.get_ident()] = conn
        if "idle_in_transaction_session_timeout" not in self.database:
            conn.execute(f"SET idle_in_transaction_session_timeout = '{self.idle_in_transaction_timeout}'")


# The database's clock as stored text (ISO-8601 UTC, milliseconds), so hosts with skewed clocks agree.
_PG_NOW = "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
# Keys tell apart the Dayflow schemas of one PostgreSQL database (one per search_path).
_MIGRATION_LOCK_CLASS = 0x0DA7F10


class PostgresBackend(Backend):
    kind = "postgres"
    container = "database"

    def __init__(self, url: str):
        self.url = url
        self.label = safe_url(url)

    def connect(self) -> peewee.Database:
        try:
            load_psycopg()  # the optional extra "postgres"
        except ImportError:
            raise StoreError(f"{self.label}: PostgreSQL needs the psycopg driver: "
                             "pip install 'dayflow-tui[postgres]'") from None
        given = {key for key, _value in parse_qsl(urlsplit(self.url).query)}
        extra: dict[str, Any] = {}
        if "connect_timeout" not in given:
            extra["connect_timeout"] = 10
        if "application_name" not in given:
            extra["application_name"] = "dayflow"
        # The URL goes to libpq as it is (every libpq parameter works, e.g. sslmode or
        # options=-csearch_path%3Dteam). The lease's compare-and-swap is reasoned for
        # READ COMMITTED, so that is pinned whatever the server's default.
        return _DayflowPostgres(self.url, prefer_psycopg3=True, isolation_level="READ COMMITTED", **extra)

    @property
    def short_label(self) -> str:
        parts = urlsplit(self.label)
        return f"{parts.path.lstrip('/') or 'postgres'}@{parts.hostname or 'localhost'}"

    @contextlib.contextmanager
    def write_transaction(self, db: peewee.Database) -> Iterator[None]:
        # READ COMMITTED (pinned at open); row locks order the writers.
        # The change counter is bumped last, so its row lock is held only for the commit.
        with db.atomic():
            yield
            slot = hash((os.getpid(), threading.get_ident())) % CHANGE_SLOTS
            ChangeCounter.update(n=ChangeCounter.n + 1).where(ChangeCounter.slot == slot).execute()

    def change_marker(self, db: peewee.Database) -> tuple:
        # A tiny table read; bumped inside every write transaction, so it moves exactly when one commits.
        return (int(ChangeCounter.select(fn.SUM(ChangeCounter.n)).scalar() or 0),)

    def schema_version(self, db: peewee.Database) -> int:
        if StoreMeta._meta.table_name not in db.get_tables():
            return 0
        row = StoreMeta.get_or_none(StoreMeta.key == "schema_version")
        return row.value if row is not None else 0

    def set_schema_version(self, db: peewee.Database, version: int) -> None:
        (StoreMeta.insert(key="schema_version", value=version)
         .on_conflict(conflict_target=[StoreMeta.key], update={StoreMeta.value: version}).execute())

    def lock_migrations(self, db: peewee.Database) -> None:
        # DDL is transactional here; this lock makes two first opens take turns.
        db.execute_sql("SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", (_MIGRATION_LOCK_CLASS,))

    def own_tables(self) -> tuple:
        return (StoreMeta, ChangeCounter)

    def after_create(self, db: peewee.Database) -> None:
        ChangeCounter.insert_many([{"slot": k, "n": 0} for k in range(CHANGE_SLOTS)]).on_conflict_ignore().execute()

    def skip_locked(self, query: peewee.ModelSelect) -> peewee.ModelSelect:
        return query.for_update(skip_locked=True)

    def try_deadline(self, db: peewee.Database, seconds: float) -> contextlib.AbstractContextManager[dict]:
        """A server that stops answering (no RST, no FIN) would hold this thread in ``recv`` for good."""
        caller = threading.get_ident()

        def caller_socket() -> int | None:
            conn = getattr(db, "thread_connections", {}).get(caller)
            if conn is None or conn.closed:
                return None
            return conn.pgconn.socket

        return try_deadline(seconds, caller_socket)

    def now(self) -> Any:
        # The fake clock (tests, screenshots) wins; otherwise every host stamps with the server's clock.
        return clock.iso() if clock.is_pinned() else SQL(_PG_NOW)

    def now_column(self) -> Any:
        return None if clock.is_pinned() else SQL(_PG_NOW)


def is_url(target: str | os.PathLike) -> bool:
    """True for ``scheme://...`` (a database URL), False for a file path."""
    scheme, sep, _rest = os.fspath(target).partition("://")
    return bool(sep) and scheme.replace("+", "").isalpha()


def safe_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: fit for labels, errors and logs."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, _at, hostport = netloc.rpartition("@")
            netloc = f"{userinfo.split(':', 1)[0]}:***@{hostport}"
        query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return url.split("://", 1)[0] + "://***"


def backend_for(target: str | os.PathLike) -> Backend:
    """The backend for a ``--db`` value: a file path, ``sqlite:///PATH`` or ``postgresql://...``."""
    text = os.fspath(target)
    if not is_url(text):
        return SqliteBackend(Path(text).expanduser())
    scheme, _sep, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres"):
        return PostgresBackend("postgresql://" + rest)
    if scheme == "sqlite":
        # As in Peewee and SQLAlchemy: sqlite:///relative.db, sqlite:////absolute/path.db
        path = rest[1:] if rest.startswith("/") else rest
        path = path.split("?", 1)[0]
        if not path:
            raise StoreError(f"{text}: no file name (write sqlite:///relative.db or sqlite:////abs/path.db)")
        return SqliteBackend(Path(path).expanduser())
    raise StoreError(f"{safe_url(text)}: unsupported database URL scheme {scheme!r} "
                     "(use a file path, sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME)")
