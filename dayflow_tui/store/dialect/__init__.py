"""What differs between SQLite and PostgreSQL: one ``Dialect`` interface, one small class per database.

``dialect_for`` picks the class from a ``--db`` value. Nothing outside this
package asks which database a store is on; it asks the store's dialect to
do the part that differs (``base.Dialect`` lists every such part).
"""

from __future__ import annotations

import os
from pathlib import Path

from ...config.errors import StoreError
from .base import Dialect
from .sqlite import SqliteDialect
from .urls import is_url, safe_url


def __getattr__(name: str):
    # The PostgreSQL dialect (its SQL, the tsvector writer) is imported when a PostgreSQL URL is opened:
    # a command on a SQLite file does not pay for it.
    if name in ("CHANGE_SLOTS", "PostgresDialect"):
        from . import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dialect_for(target: str | os.PathLike) -> Dialect:
    """The dialect for a ``--db`` value: a file path, ``sqlite:///PATH`` or ``postgresql://...``."""
    text = os.fspath(target)
    if not is_url(text):
        return SqliteDialect(Path(text).expanduser())
    scheme, _sep, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresDialect

        return PostgresDialect("postgresql://" + rest)
    if scheme == "sqlite":
        # As in Peewee and SQLAlchemy: sqlite:///relative.db, sqlite:////absolute/path.db
        path = rest[1:] if rest.startswith("/") else rest
        path = path.split("?", 1)[0]
        if not path:
            raise StoreError(f"{text}: no file name (write sqlite:///relative.db or sqlite:////abs/path.db)")
        return SqliteDialect(Path(path).expanduser())
    raise StoreError(f"{safe_url(text)}: unsupported database URL scheme {scheme!r} "
                     "(use a file path, sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME)")


__all__ = ["CHANGE_SLOTS", "Dialect", "PostgresDialect", "SqliteDialect", "dialect_for", "is_url", "safe_url"]
