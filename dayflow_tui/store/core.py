"""The store: one open Dayflow database, its connection, and opening it.

``Store`` is assembled from one part per job (runs, steps, tasks, leases);
what differs between SQLite and PostgreSQL is its ``backend``. Front ends and
the agent call these methods; nothing else runs SQL.
"""

from __future__ import annotations

import contextlib
import os
import time
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

import peewee

from .. import clock, settings
from ..errors import StoreError
from .backends import Backend, SqliteBackend, backend_for
from .leases import LeaseQueries
from .models import bound_to
from .retry import RETRY_FOR_S, backoff_delays, describe, is_driver_error, is_transient, store_call
from .runs import RunQueries
from .schema import migrate
from .search import SearchQueries
from .spend import SpendQueries
from .approvals import ApprovalQueries
from .forks import ForkQueries
from .steps import StepQueries
from .tasks import TaskQueries


class Store(RunQueries, StepQueries, TaskQueries, LeaseQueries, SearchQueries, SpendQueries, ApprovalQueries,
            ForkQueries):
    """One open Dayflow database. Each store owns its database handle; two in one process stay apart."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.label = backend.label
        self.db: peewee.Database = backend.connect()
        # Caps the retry window of every call but the commits of paid work (None: retry.RETRY_FOR_S).
        # The dashboard sets it low: a poll that cannot reconnect at once reports and tries next tick.
        self.retry_for: float | None = None
        # Code outside any store method (tests reading rows) falls back to the newest store.
        from .models import database_proxy

        database_proxy.initialize(self.db)

    def commit_window(self) -> float:
        """How long the commit of a paid reply keeps trying (the commit_retry_s setting, read once per store)."""
        window = self.__dict__.get("_commit_window")
        if window is None:
            from .. import settings

            window = self.__dict__["_commit_window"] = settings.current().commit_retry_s
        return window

    # -- connection ------------------------------------------------------

    @property
    def is_postgres(self) -> bool:
        return self.backend.kind == "postgres"

    @property
    def short_label(self) -> str:
        """A title-sized name: the file name, or ``dbname@host`` (never a password)."""
        return self.backend.short_label

    def close(self) -> None:
        if not self.db.is_closed():
            self.db.close()

    def close_thread_connection(self) -> None:
        """Close this thread's connection (Peewee keeps one per thread), even a dead one in a failed transaction.

        Peewee refuses to close a connection while its transaction stack is not
        empty, and a connection the server has cut can be neither rolled back
        nor closed cleanly; without this the thread would reuse it forever.
        The next query opens a new one.
        """
        try:
            if not self.db.is_closed():
                self.db.close()
            return
        except Exception:
            pass
        conn = self.db._state.conn
        self.db._state.reset()
        with contextlib.suppress(Exception):
            conn.close()

    @contextlib.contextmanager
    def bound(self) -> Iterator["Store"]:
        """Route direct model queries (``Run.select()``) in this block to this store's database."""
        with bound_to(self.db):
            yield self

    def write_transaction(self) -> contextlib.AbstractContextManager:
        return self.backend.write_transaction(self.db)

    def verify_same_database(self) -> None:
        """Raise ``StoreError`` before a paid call whose reply would land where nobody looks (SQLite: a moved file)."""
        self.backend.verify_same_database(self.db)

    @store_call
    def change_marker(self) -> tuple:
        """Cheap value that changes whenever another connection commits."""
        return self.backend.change_marker(self.db)

    @store_call
    def db_now(self, plus_seconds: float = 0.0) -> str:
        """The database's current time as stored text (the host clock on SQLite, or when pinned)."""
        column = self.backend.now_column()
        now = clock.iso() if column is None else peewee.Select(columns=[column]).bind(self.db).scalar()
        if not plus_seconds:
            return now
        moment = datetime.fromisoformat(now.replace("Z", "+00:00")) + timedelta(seconds=plus_seconds)
        return clock.iso(moment)


# A ~2.5 KB step row took a 4 KB page of its own; 16 KB pages hold several: a third fewer bytes
# per step, commits and reads no slower (bench item 9). New files only: an existing file keeps its pages.
NEW_FILE_PAGE_SIZE = 16384


def _checked_schema(store: Store, *, create: bool, upgrade: bool) -> None:
    """The schema check (and first migration) under the same reconnect policy as every store call."""
    deadline = time.monotonic() + RETRY_FOR_S
    delays = backoff_delays()
    while True:
        try:
            with bound_to(store.db):
                migrate(store, create=create, upgrade=upgrade)
            return
        except Exception as exc:
            if not (is_driver_error(exc) and is_transient(exc) and time.monotonic() < deadline):
                raise
            store.close_thread_connection()
            time.sleep(min(next(delays), max(deadline - time.monotonic(), 0)))


def _create_private_file(path: Path) -> None:
    """Create the database file owner-only before SQLite touches it (SQLite gives -wal and -shm its mode),
    as an empty WAL database: the first write fixes a file's page size and auto-vacuum mode, so both are set
    here, before WAL mode. Incremental auto-vacuum lets ``dayflow vacuum`` give free pages back a megabyte
    per short transaction while workers and the dashboard go on (store.retention)."""
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


def default_db_path() -> Path:
    """The default file, ``dayflow.db`` in the user's data directory (``~/.local/share/dayflow/``)."""
    return settings.current().default_db_path


def open_store(target: str | os.PathLike | None = None, *, create: bool = True, upgrade: bool = True) -> Store:
    """Open the database at ``target``: a file path, ``sqlite:///PATH`` or ``postgresql://USER@HOST:PORT/DBNAME``.

    None means the ``db`` setting (``$DAYFLOW_DB``), else the default file.
    ``create=False`` refuses a missing file (or a database without Dayflow's
    tables) instead of making an empty one; ``upgrade=False`` (a command that
    only reads) refuses an older schema instead of migrating it.
    """
    if target is None:
        target = settings.current().db or default_db_path()
    backend = backend_for(target)
    if isinstance(backend, SqliteBackend):
        path = backend.path
        if path.is_dir():
            raise StoreError(f"{backend.label}: is a directory, not a database file")
        if not path.exists():
            if not create:
                raise StoreError(f"{backend.label}: no such database file")
            try:
                _create_private_file(path)
            except OSError as exc:
                raise StoreError(f"{backend.label}: cannot create database ({exc.strerror})") from exc
        elif not create and path.stat().st_size == 0:
            # Checked before connecting: opening would write a header (WAL mode) into a file we only read.
            raise StoreError(f"{backend.label}: no Dayflow tables in this file yet (nothing to read)")
    store = Store(backend)
    try:
        _checked_schema(store, create=create, upgrade=upgrade)
    except StoreError:
        store.close()
        raise
    except Exception as exc:
        if not is_driver_error(exc):
            raise
        store.close()
        raise StoreError(f"{backend.label}: {describe(exc)}") from exc
    return store
