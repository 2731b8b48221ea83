"""The store: one open Dayflow database, its connection, and opening it.

``Store`` is assembled from one part per job (runs, steps, tasks, leases);
what differs between SQLite and PostgreSQL is its ``dialect``. Front ends and
the agent call these methods; nothing else runs SQL. The store writes
nothing to the terminal: long work reports through callbacks.
"""

from __future__ import annotations

import contextlib
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

import peewee

from .. import clock, settings
from ..errors import StoreError
from .dialect import Dialect, dialect_for
from .leases import LeaseQueries
from .models import bound_to
from .retry import RETRY_FOR_S, backoff_delays, describe, is_driver_error, is_transient, store_call
from .runs import RunQueries
from .schema import migrate
from .search import OnNote, OnProgress, SearchQueries
from .spend import SpendQueries
from .approvals import ApprovalQueries
from .forks import ForkQueries
from .steps import StepQueries
from .tasks import TaskQueries


class Store(RunQueries, StepQueries, TaskQueries, LeaseQueries, SearchQueries, SpendQueries, ApprovalQueries,
            ForkQueries):
    """One open Dayflow database. Each store owns its database handle; two in one process stay apart."""

    def __init__(self, dialect: Dialect):
        self.dialect = dialect
        self.label = dialect.label
        self.db: peewee.Database = dialect.connect()
        # Caps the retry window of every call but the commits of paid work (None: retry.RETRY_FOR_S).
        # The dashboard sets it low: a poll that cannot reconnect at once reports and tries next tick.
        self.retry_for: float | None = None
        # Where a migration reports while ``open_store`` runs it (search.backfill); None: nobody listens.
        self.migration_progress: OnProgress | None = None
        self.migration_note: OnNote | None = None
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
    def backend(self) -> Dialect:
        """The dialect under its older name (some verbs still say ``self.backend``; the Store rewrite drops it)."""
        return self.dialect

    @property
    def short_label(self) -> str:
        """A title-sized name: the file name, or ``dbname@host`` (never a password)."""
        return self.dialect.short_label

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
        return self.dialect.write_transaction(self.db)

    def verify_same_database(self) -> None:
        """Raise ``StoreError`` before a paid call whose reply would land where nobody looks (SQLite: a moved file)."""
        self.dialect.verify_same_database(self.db)

    @store_call
    def change_marker(self) -> tuple:
        """Cheap value that changes whenever another connection commits."""
        return self.dialect.change_marker(self.db)

    @store_call
    def db_now(self, plus_seconds: float = 0.0) -> str:
        """The database's current time as stored text (the host clock on SQLite, or when pinned)."""
        column = self.dialect.now_column()
        now = clock.iso() if column is None else peewee.Select(columns=[column]).bind(self.db).scalar()
        if not plus_seconds:
            return now
        moment = datetime.fromisoformat(now.replace("Z", "+00:00")) + timedelta(seconds=plus_seconds)
        return clock.iso(moment)


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


def default_db_path() -> Path:
    """The default file, ``dayflow.db`` in the user's data directory (``~/.local/share/dayflow/``)."""
    return settings.current().default_db_path


def open_store(target: str | os.PathLike | None = None, *, create: bool = True, upgrade: bool = True,
               on_progress: OnProgress | None = None, on_note: OnNote | None = None) -> Store:
    """Open the database at ``target``: a file path, ``sqlite:///PATH`` or ``postgresql://USER@HOST:PORT/DBNAME``.

    None means the ``db`` setting (``$DAYFLOW_DB``), else the default file.
    ``create=False`` refuses a missing file (or a database without Dayflow's
    tables) instead of making an empty one; ``upgrade=False`` (a command that
    only reads) refuses an older schema instead of migrating it.
    ``on_progress(done, total)``: steps indexed so far by a migration that
    builds the search index (the one long step); ``on_note(text)``: a line for
    a person (the index cannot be built here). The store prints nothing.
    """
    if target is None:
        target = settings.current().db or default_db_path()
    dialect = dialect_for(target)
    dialect.prepare(create=create)
    store = Store(dialect)
    store.migration_progress, store.migration_note = on_progress, on_note
    try:
        _checked_schema(store, create=create, upgrade=upgrade)
    except StoreError:
        store.close()
        raise
    except Exception as exc:
        if not is_driver_error(exc):
            raise
        store.close()
        raise StoreError(f"{dialect.label}: {describe(exc)}") from exc
    finally:
        store.migration_progress = store.migration_note = None
    return store
