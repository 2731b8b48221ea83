"""What the store's lower parts use of an open store: the database handle, its dialect, its retry window.

The verbs in ``tables/``, the reconnect policy (``retry``), the dialect and the
search index take the store as an argument and use only this much of it.
``api.Store`` is the one class that has it; this Protocol lets those modules
name it in their type hints without importing ``api`` (which imports them).
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import peewee


class StoreHandle(Protocol):
    """One open Dayflow database, as the parts below ``api.Store`` see it."""

    db: peewee.Database
    # A ``dialect.base.Dialect``: not imported here, since the dialect takes a StoreHandle too.
    dialect: Any
    label: str
    # Caps the retry window of every call but the commits of paid work (None: retry.RETRY_FOR_S).
    retry_for: float | None
    # Where a migration reports while ``open_store`` runs it (None: nobody listens).
    migration_progress: Any
    migration_note: Any
    # The newest schema version this code knows (``schema.SCHEMA_VERSION``).
    known_schema: int

    def commit_window(self) -> float:
        """How long the commit of a paid reply keeps trying."""

    def close_thread_connection(self) -> None:
        """Close this thread's connection, even a dead one; the next query opens a new one."""

    def write_transaction(self) -> contextlib.AbstractContextManager:
        """The dialect's write transaction on this database."""
