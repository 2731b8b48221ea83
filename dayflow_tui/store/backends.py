"""The older import path of ``store.dialect`` (its classes were called backends); import from ``store.dialect``.

Kept while code written against the old names is moved over; it adds nothing.
"""

from .dialect import CHANGE_SLOTS, Dialect, PostgresDialect, SqliteDialect, dialect_for, is_url, safe_url

Backend = Dialect
SqliteBackend = SqliteDialect
PostgresBackend = PostgresDialect
backend_for = dialect_for

__all__ = ["CHANGE_SLOTS", "Backend", "PostgresBackend", "SqliteBackend", "backend_for", "is_url", "safe_url"]
