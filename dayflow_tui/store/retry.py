"""The store's one reconnect policy: which failures a fresh connection cures, and how long to keep trying.

Every public store method is wrapped by ``store_call``: a driver error
becomes one readable ``StoreError`` line, and a failure that a new
connection (or a little patience) cures is retried with exponential backoff
and jitter until its window closes.
"""

from __future__ import annotations

import contextlib
import functools
import random
import sqlite3
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import peewee

from ..config.errors import StoreError
from ..redaction import redact_and_cut
from .deadline import MIN_TRY_S
from .models import bound_to

if TYPE_CHECKING:
    from .handle import StoreHandle

# How long a store operation keeps retrying a connection that went away or a SQLite lock held
# by someone else. The commit of a paid response (append_step, and the tool results that follow
# it) keeps trying for longer (Settings.commit_retry_s): giving up there throws money away.
RETRY_FOR_S = 15.0
_BACKOFF_FIRST_S = 0.05
_BACKOFF_MAX_S = 2.0

_TRANSIENT_SQLITE = ("database is locked", "database table is locked", "database is busy")
_TRANSIENT_PG = ("connection is closed", "the connection is lost", "server closed the connection",
                 "terminating connection", "connection already closed", "consuming input failed",
                 "could not receive data", "could not send data", "connection to server",
                 "connection refused", "ssl connection has been closed", "broken pipe",
                 "no connection to the server", "connection timed out", "lost synchronization",
                 "the database system is shutting down", "the database system is starting up",
                 "cannot connect now", "connection reset",
                 # A full server (max_connections) admits us once another session ends.
                 "too many clients", "too many connections", "remaining connection slots are reserved")
# Admin shutdown, crash shutdown, cannot connect now, connection exceptions; None: the client lost
# the server before an answer came.
_TRANSIENT_SQLSTATES = (None, "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004", "53300")
# Connection failures no wait cures (libpq reports them without a SQLSTATE, like a server that is away): a
# process that waits for the server at start gives up on these at once.
_NEVER_CURED = ("password authentication failed", "authentication failed", "no pg_hba.conf entry",
                "does not exist", "is not permitted to log in", "could not translate host name",
                "invalid connection option", "invalid uri", "invalid dsn", "sslmode value")
# A process that must not give up on a busy server at start (a worker) waits from this, doubling, to at most that.
_START_FIRST_S = 0.5
_START_MOST_S = 30.0


def is_driver_error(exc: BaseException) -> bool:
    """A database driver's own exception (Peewee maps most, not every psycopg subclass).

    psycopg is looked up in ``sys.modules`` only: a SQLite command never imports it.
    """
    if isinstance(exc, (peewee.PeeweeException, sqlite3.Error)):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.Error)


def is_transient(exc: BaseException | None) -> bool:
    """A failure that a fresh connection (or a little patience) cures: the work itself was fine."""
    psycopg = sys.modules.get("psycopg")
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc).lower()
        if any(marker in text for marker in _TRANSIENT_SQLITE + _TRANSIENT_PG):
            return True
        if (psycopg is not None and isinstance(exc, psycopg.OperationalError)
                and getattr(exc, "sqlstate", None) in _TRANSIENT_SQLSTATES):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def is_connection_error(exc: BaseException) -> bool:
    """True for a ``StoreError`` whose cause a new connection may cure (a dropped session, a held lock)."""
    return exc.__cause__ is not None and is_transient(exc.__cause__)


_retry_state = threading.local()


def try_time_left() -> float | None:
    """Seconds left before this thread's current store-call try is cut (None: no deadline)."""
    ends = getattr(_retry_state, "try_ends", None)
    return None if ends is None else ends - time.monotonic()


def attempt_number() -> int:
    """0 on an operation's first try, 1, 2, ... on its retries (this thread's outermost store call)."""
    return getattr(_retry_state, "attempt", 0)


@contextlib.contextmanager
def patience(seconds: float):
    """Cap how long store calls in this block (this thread) keep retrying: a process on its way out
    after an error does not wait the full window to tidy up."""
    before = getattr(_retry_state, "cap", None)
    _retry_state.cap = seconds if before is None else min(before, seconds)
    try:
        yield
    finally:
        _retry_state.cap = before


@contextlib.contextmanager
def only_while(still: Callable[[], bool]):
    """Store calls in this block (this thread) retry only while ``still()`` holds, whatever their window: a
    paid reply's commit stops retrying once its lease is in doubt, so the reply is spooled on this host
    before another worker can take the run over and buy the step again."""
    before = getattr(_retry_state, "still", None)
    _retry_state.still = still if before is None else (lambda: before() and still())
    try:
        yield
    finally:
        _retry_state.still = before


def patience_left(window: float) -> float:
    """``window`` capped by the ``patience`` block this thread is in (if any)."""
    cap = getattr(_retry_state, "cap", None)
    return window if cap is None else min(window, cap)


def keep_trying(attempt: Callable[[], Any], *, on_wait: Callable[[int, float, str], None],
                sleep: Callable[[float], Any] = time.sleep, first: float = _START_FIRST_S,
                most: float = _START_MOST_S) -> Any:
    """``attempt()`` until it succeeds, waiting out every failure a fresh connection may cure, for ever.

    For a process whose job is to wait for work (``dayflow worker``) starting while the server is down,
    restarting or full (``too many clients``): the waits are this module's backoff with jitter (``first``
    doubling to ``most``), each announced first as ``on_wait(attempt_number, seconds, why)``; each try
    is one try (``patience(0)``: no inner window). Any other failure (a wrong password, no such database)
    is raised at once, and so is the last failure when ``sleep`` returns True (``threading.Event.wait``:
    the process was asked to stop).
    """
    delays = backoff_delays(first, most)
    tries = 0
    while True:
        try:
            with patience(0.0):
                return attempt()
        except StoreError as exc:
            if not is_connection_error(exc) or _never_cured(exc):
                raise
            tries += 1
            wait = next(delays)
            on_wait(tries, wait, redact_and_cut(str(exc), 300))
            if sleep(wait) is True:
                raise


def _never_cured(exc: BaseException) -> bool:
    text = " ".join(str(found) for found in (exc, exc.__cause__) if found is not None).lower()
    return any(marker in text for marker in _NEVER_CURED)


def backoff_delays(first: float = _BACKOFF_FIRST_S, most: float = _BACKOFF_MAX_S):
    """Exponential backoff with full jitter in its upper half: 0.05, 0.1, 0.2 ... 2 s."""
    delay = first
    while True:
        yield delay * random.uniform(0.5, 1.0)
        delay = min(delay * 2, most)


def store_call(method: Callable | None = None, *, retry_for: Callable[["StoreHandle"], float] | None = None,
               cut_stalls: bool = True) -> Callable:
    """Map driver errors to one readable ``StoreError`` line, retrying the ones a new connection cures.

    A call that failed because the connection went away (PostgreSQL: a
    server restart, an idle cut, a terminated backend) or because another
    SQLite writer held the lock past the busy timeout is run again on a fresh
    connection, until ``retry_for(store)`` seconds (default ``RETRY_FOR_S``, capped
    by ``store.retry_for``) have passed. Only the outermost store call of a
    thread retries (a nested call's transaction is its caller's). Every write
    Dayflow retries is safe to repeat: it is conditioned on the lease, or
    idempotent by key, or (``append_step``, ``set_tool_results``) checks on a
    retry whether its earlier try landed before its answer was lost
    (``attempt_number()``). The store's models are routed to this store's
    database for the call (``models.bound_to``).

    On a network database each try also has a deadline: the rest of the
    window (at least ``deadline.MIN_TRY_S``). A server that stops answering
    without closing the connection has the try's socket cut then, so a
    stall ends like a dropped connection instead of blocking for good.
    Calls that may rightly run long on a healthy server (an import, a
    vacuum, a search over everything) pass ``cut_stalls=False``.
    """

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def wrapper(self: "StoreHandle", *args: Any, **kwargs: Any) -> Any:
            depth = getattr(_retry_state, "depth", 0)
            outermost = depth == 0
            _retry_state.depth = depth + 1
            if retry_for is not None:
                window = retry_for(self)
            else:
                window = RETRY_FOR_S if self.retry_for is None else min(RETRY_FOR_S, self.retry_for)
            cap = getattr(_retry_state, "cap", None)
            if cap is not None:
                window = min(window, cap)
            deadline = time.monotonic() + window
            delays = backoff_delays()
            attempt = 0
            try:
                with bound_to(self.db):
                    while True:
                        if outermost:
                            _retry_state.attempt = attempt
                        bounded = outermost and cut_stalls
                        seen = {"cut": False}
                        if bounded:
                            _retry_state.try_ends = max(deadline, time.monotonic() + MIN_TRY_S)
                        try:
                            with (self.dialect.try_deadline(self.db, deadline - time.monotonic()) if bounded
                                  else contextlib.nullcontext(seen)) as seen:
                                return method(self, *args, **kwargs)
                        except Exception as exc:
                            if not is_driver_error(exc) or not outermost:
                                raise  # a nested call's failure is its caller's to retry or report
                            transient = is_transient(exc) or seen["cut"]
                            if transient:
                                self.close_thread_connection()  # the next try starts on a fresh connection
                            still = getattr(_retry_state, "still", None)
                            if transient and time.monotonic() < deadline and (still is None or still()):
                                time.sleep(min(next(delays), max(deadline - time.monotonic(), 0)))
                                attempt += 1
                                continue
                            if seen["cut"]:
                                raise StoreError(f"{self.label}: the database stopped answering; no answer "
                                                 f"within {window:.1f} s") from exc
                            raise StoreError(f"{self.label}: {describe(exc)}") from exc
            finally:
                _retry_state.depth = depth
                if outermost:
                    _retry_state.attempt = 0
                    _retry_state.try_ends = None

        return wrapper

    return decorate(method) if method is not None else decorate


def describe(exc: BaseException) -> str:
    """One line for a driver error, with what to do about the common ones."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # SQLite quotes whole values in some messages (an undecodable row): redacted, then cut.
    text = redact_and_cut(text, 300)
    low = text.lower()
    if "file is not a database" in low or "malformed" in low:
        return f"not a readable Dayflow database ({text})"
    if "readonly" in low or "read-only" in low:
        return f"database is read-only ({text})"
    if "disk is full" in low or "disk i/o" in low:
        return f"cannot write: {text} (is the disk full?)"
    if "unable to open" in low:
        return (f"cannot open database file ({text}); the file and its directory must be writable "
                "(SQLite keeps -wal and -shm files beside it)")
    return text


class ReportCause:
    """A transaction that reports why a write failed, not the ROLLBACK that failed after it.

    On a full disk or an I/O error SQLite has already rolled the transaction
    back itself; Peewee's ROLLBACK then fails with "no transaction is active",
    which would hide the cause from the user.
    """

    def __init__(self, transaction: Any):
        self.transaction = transaction

    def __enter__(self) -> Any:
        return self.transaction.__enter__()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Any:
        try:
            return self.transaction.__exit__(exc_type, exc, tb)
        except (peewee.OperationalError, sqlite3.OperationalError) as failure:
            if "no transaction is active" not in str(failure):
                raise
            if exc is not None:
                return False  # let the body's own error through
            cause = failure.__context__  # the COMMIT's error, behind the failed ROLLBACK
            while cause is not None and "no transaction is active" in str(cause):
                cause = cause.__context__
            if cause is None:
                raise
            raise cause from None
