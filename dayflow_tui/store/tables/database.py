"""The database itself: its clock and its change marker."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import peewee

from ... import clock
from ..retry import store_call

if TYPE_CHECKING:
    from ..handle import StoreHandle


@store_call
def change_marker(store: StoreHandle) -> tuple:
    """Cheap value that changes whenever another connection commits."""
    return store.dialect.change_marker(store.db)


@store_call
def schema_version(store: StoreHandle) -> int:
    """The schema version the database holds now (another process may have migrated it since it was opened)."""
    return store.dialect.schema_version(store.db)


@store_call
def db_now(store: StoreHandle, plus_seconds: float = 0.0) -> str:
    """The database's current time as stored text (the host clock on SQLite, or when pinned)."""
    column = store.dialect.now_column()
    now = clock.iso() if column is None else peewee.Select(columns=[column]).bind(store.db).scalar()
    if not plus_seconds:
        return now
    moment = datetime.fromisoformat(now.replace("Z", "+00:00")) + timedelta(seconds=plus_seconds)
    return clock.iso(moment)
