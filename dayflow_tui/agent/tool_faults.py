"""A database fault met inside a tool: an infrastructure fault, never the tool's outcome.

A tool's own failure (a bad argument it found, a service it calls saying no)
is answered to the model as an ``is_error`` result and the run goes on. A
failure of Dayflow's database is different: keeping it as the call's result
would tell the model the database's address and let the run carry on without
the side effect, for good. So it ends the attempt instead: nothing is kept
for the call, the lease is released, the run backs off like any attempt that
ended without a step, and a later attempt runs the call again (the journal
keeps a plain tool at most once; an idempotent one is a no-op by key). The
store has already retried the failure under its reconnect policy
(``store.retry.store_call``) before it reaches the tool.
"""

from __future__ import annotations

from typing import Any

from ..config.errors import StoreError
from ..redaction import redacted_line
from ..store.retry import describe, is_driver_error


def store_fault(exc: BaseException) -> BaseException | None:
    """The database failure behind ``exc`` (itself, what it was raised from or while handling), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StoreError) or is_driver_error(current):
            return current
        current = current.__cause__ or current.__context__
    return None


def abandon_on_store_fault(ctx: Any, exc: BaseException) -> None:
    """Raise a ``StoreError`` when ``exc`` is a database fault met inside a tool; return otherwise."""
    fault = store_fault(exc)
    if fault is None:
        return
    if fault is exc:
        if isinstance(exc, StoreError):
            raise exc
    elif isinstance(fault, StoreError):
        raise StoreError(str(fault)) from exc
    label = getattr(getattr(ctx, "store", None), "label", "the database")
    raise StoreError(f"{label}: {describe(fault)}") from exc


def tool_error_message(ctx: Any, exc: BaseException, width: int = 500) -> str:
    """A tool's own failure as the model is told it: one line, the API key and the database's name cut out."""
    text = f"{type(exc).__name__}: {exc}"
    store = getattr(ctx, "store", None)
    for name in (getattr(store, "label", None), getattr(store, "short_label", None)):
        if isinstance(name, str) and len(name) >= 4:
            text = text.replace(name, "the database")
    return redacted_line(text, width)
