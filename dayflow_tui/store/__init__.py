"""The store: owns the database, its schema and every query.

Front ends (CLI, dashboard) and the loop call these functions; nothing else
runs SQL. Every public method turns a database failure into ``StoreError``
with one readable line.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import socket
import sqlite3
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import peewee
from peewee import PostgresqlDatabase, SqliteDatabase, fn

from .. import clock
from ..errors import RunBusy, RunNotFound, StoreError
from ..redaction import redact_and_cut
from .models import MODELS, POSTGRES_MODELS, ChangeCounter, Run, Step, StoreMeta, Task, database_proxy
from .sample_tasks import SEED_TASKS
from ..testhook import pause_point

FINISHED = ("done",)
RESUMABLE = ("running", "failed", "budget", "queued")
# A lease whose heartbeat is older than this is taken over from another host.
# On the owner's own host a dead pid is taken over at once.
STALE_AFTER_S = 60.0
HEARTBEAT_EVERY_S = 10.0
# Rows of the PostgreSQL change counter (see models.ChangeCounter).
CHANGE_SLOTS = 16

# The owner's host in a lease. Set DAYFLOW_HOSTNAME where host names repeat (containers on several
# machines): two hosts with one name would judge each other's pids as local ones.
HOSTNAME = os.environ.get("DAYFLOW_HOSTNAME") or socket.gethostname()


def _is_driver_error(exc: BaseException) -> bool:
    """A database driver's own exception (Peewee maps most, not every psycopg subclass).

    psycopg is imported only when a PostgreSQL URL is opened, so a SQLite
    command never pays for it.
    """
    if isinstance(exc, (peewee.PeeweeException, sqlite3.Error)):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.Error)


def default_db_path() -> Path:
    """The default file, ``$XDG_DATA_HOME/dayflow/dayflow.db`` (``~/.local/share`` by default).

    ``$DAYFLOW_DB`` (a path or a URL) takes precedence in ``open_store``.
    """
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "dayflow" / "dayflow.db"


# How long a store operation keeps retrying a connection that went away or a SQLite lock held
# by someone else. The commit of a paid response (append_step, and the tool results that follow
# it) keeps trying for longer: giving up there throws money away.
RETRY_FOR_S = 15.0
COMMIT_RETRY_FOR_S = float(os.environ.get("DAYFLOW_COMMIT_RETRY_S") or 120.0)
_BACKOFF_FIRST_S = 0.05
_BACKOFF_MAX_S = 2.0

_TRANSIENT_SQLITE = ("database is locked", "database table is locked", "database is busy")
_TRANSIENT_PG = ("connection is closed", "the connection is lost", "server closed the connection",
                 "terminating connection", "connection already closed", "consuming input failed",
                 "could not receive data", "could not send data", "connection to server",
                 "connection refused", "ssl connection has been closed", "broken pipe",
                 "no connection to the server", "connection timed out", "lost synchronization",
                 "the database system is shutting down", "the database system is starting up",
                 "cannot connect now", "connection reset")


def _is_transient(exc: BaseException) -> bool:
    """A failure that a fresh connection (or a little patience) cures: the work itself was fine."""
    psycopg = sys.modules.get("psycopg")  # imported only when a PostgreSQL URL was opened
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc).lower()
        if any(marker in text for marker in _TRANSIENT_SQLITE + _TRANSIENT_PG):
            return True
        if psycopg is not None and isinstance(exc, psycopg.OperationalError) and getattr(exc, "sqlstate", None) in (
                None, "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004"):
            # Admin shutdown, crash shutdown, cannot connect now, connection exceptions;
            # no sqlstate at all means the client lost the server before an answer came.
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def is_connection_error(exc: BaseException) -> bool:
    """True for a ``StoreError`` whose cause a new connection may cure (a dropped session, a held lock)."""
    return exc.__cause__ is not None and _is_transient(exc.__cause__)


_retry_state = threading.local()


def attempt_number() -> int:
    """0 on an operation's first try, 1, 2, ... on its retries (this thread's outermost store call)."""
    return getattr(_retry_state, "attempt", 0)


def _db_errors(method: Callable | None = None, *, retry_for: float | None = None) -> Callable:
    """Map driver errors to one readable ``StoreError`` line, retrying the ones a new connection cures.

    The one reconnect policy of the store: a call that failed because the
    connection went away (PostgreSQL: a server restart, an idle cut, a
    terminated backend) or because another SQLite writer held the lock past
    the busy timeout is run again on a fresh connection, with exponential
    backoff and jitter, until ``retry_for`` seconds have passed. Only the
    outermost store call of a thread retries (a nested call's transaction is
    its caller's). Every write Dayflow retries is safe to repeat: it is
    conditioned on the lease, or idempotent by key, or (``append_step``,
    ``set_tool_results``) checks on a retry whether its earlier try did land
    before its answer was lost (``attempt_number()``).
    """

    def decorate(method: Callable) -> Callable:
        limit = RETRY_FOR_S if retry_for is None else retry_for

        @functools.wraps(method)
        def wrapper(self: "Store", *args: Any, **kwargs: Any) -> Any:
            outermost = getattr(_retry_state, "depth", 0) == 0
            _retry_state.depth = getattr(_retry_state, "depth", 0) + 1
            window = limit() if callable(limit) else limit
            if self.retry_for is not None and not callable(limit):
                window = min(window, self.retry_for)  # a UI caller caps how long it may wait
            deadline = time.monotonic() + window
            delay = _BACKOFF_FIRST_S
            attempt = 0
            try:
                while True:
                    if outermost:
                        _retry_state.attempt = attempt
                    try:
                        return method(self, *args, **kwargs)
                    except Exception as exc:
                        if not _is_driver_error(exc):
                            raise
                        if outermost and _is_transient(exc) and time.monotonic() < deadline:
                            self.close_thread_connection()
                            time.sleep(min(delay, max(deadline - time.monotonic(), 0)) * random.uniform(0.5, 1.0))
                            delay = min(delay * 2, _BACKOFF_MAX_S)
                            attempt += 1
                            continue
                        if outermost and _is_transient(exc):
                            self.close_thread_connection()  # the next call starts on a fresh connection
                        raise StoreError(f"{self.label}: {_describe(exc)}") from exc
            finally:
                _retry_state.depth -= 1
                if outermost:
                    _retry_state.attempt = 0

        return wrapper

    return decorate(method) if method is not None else decorate


def _describe(exc: BaseException) -> str:
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


class _ReportCause:
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


@dataclass
class StepRecord:
    """One model call as it goes into the ``steps`` table."""

    n: int
    stop_reason: str | None
    assistant: list[dict]
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    model: str | None = None
    duration_ms: int | None = None
    request_est_tokens: int | None = None
    compacted_est_tokens: int | None = None

    @property
    def tool_uses(self) -> list[dict]:
        return [b for b in self.assistant if b.get("type") == "tool_use"]


@dataclass
class Lease:
    """The right to drive one run. Holds a heartbeat thread while alive."""

    store: "Store"
    run_id: str
    token: str
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    lost: bool = False

    def start_heartbeat(self, every: float | None = None) -> None:
        every = HEARTBEAT_EVERY_S if every is None else every

        def beat() -> None:
            try:
                while not self._stop.wait(every):
                    try:
                        still_ours = self.store.heartbeat(self)
                    except Exception:
                        # A blip (dropped connection, held lock) costs one beat, never the thread:
                        # the next beat runs on a fresh connection. Only a beat that finds another
                        # token on the run marks the lease lost.
                        self.store.close_thread_connection()
                        continue
                    if not still_ours:
                        self.lost = True
                        return
            finally:
                self.store.close_thread_connection()

        self._thread = threading.Thread(target=beat, name=f"heartbeat-{self.run_id}", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


# Leases held by this process (by token): the same pid owning a run through
# a token that is not here means that owner is gone (a finished worker thread).
_ACTIVE_LEASES: set[str] = set()


def _new_token() -> str:
    """A fresh lease token, registered as held *before* it is written.

    Another thread of this process that reads the row between the commit and
    the registration must see a live owner, not a finished one.
    """
    token = uuid.uuid4().hex
    _ACTIVE_LEASES.add(token)
    return token


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a live (non-zombie) process on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def process_start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (Linux ``/proc``); None where that cannot be read.

    A pid names a process only together with its start time: after a crash the
    kernel hands the same pid to an unrelated process sooner or later.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


_OWN_START = process_start_time(os.getpid())


def _age_seconds(iso_ts: str | None) -> float | None:
    if not iso_ts:
        return None
    then = datetime.fromisoformat(iso_ts.replace("Z", "+00:00"))
    return (clock.now() - then).total_seconds()


def owner_alive(run: Run, stale_after: float = STALE_AFTER_S) -> bool:
    """Is the process recorded as the run's owner still driving it?"""
    if run.owner_pid is None:
        return False
    age = _age_seconds(run.heartbeat_at)
    fresh = age is not None and age < stale_after
    if run.owner_host == HOSTNAME:
        if run.owner_pid == os.getpid():
            return run.lease_token in _ACTIVE_LEASES
        if not pid_alive(run.owner_pid):
            return False
        if run.owner_started is not None and process_start_time(run.owner_pid) not in (None, run.owner_started):
            return False  # the pid now belongs to another process: the owner is gone
        # A live owner beats every 10 s; one silent past the stale time is hung and loses the run.
        return fresh
    return fresh


def effective_status(run: Run) -> str:
    """The status a user should see: a 'running' run with a dead owner is 'interrupted'."""
    if run.status == "running" and not owner_alive(run):
        return "interrupted"
    return run.status


def holder(run: Run) -> str:
    return f"pid {run.owner_pid} on {run.owner_host}"


class Store:
    """One open Dayflow database."""

    def __init__(self, db: peewee.Database, label: str):
        self.db = db
        self.label = label
        # Caps the retry window of every call but the commits of paid work (None: RETRY_FOR_S).
        # The dashboard sets it low: a poll that cannot reconnect at once reports and tries next tick.
        self.retry_for: float | None = None
        # SQLite only: (device, inode) of the file as opened (verify_same_database).
        self._identity: tuple[int, int] | None = None if self.is_postgres else self._file_identity()
        database_proxy.initialize(db)

    # -- connection ------------------------------------------------------

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

    def _file_identity(self, suffix: str = "") -> tuple[int, int] | None:
        try:
            info = os.stat(self.label + suffix)
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    def verify_same_database(self) -> None:
        """Refuse to go on when the SQLite file was moved, replaced or lost its ``-wal`` since it was opened.

        SQLite keeps writing to the files it has open; a path that now names
        another file (or none) means the run's steps would land where nobody
        looks. Called before every paid call, so the check costs two ``stat``s
        per step and a detected change costs nothing.
        """
        if self.is_postgres:
            return
        if self._file_identity() != self._identity:
            raise StoreError(f"{self.label}: the database file was moved, replaced or deleted while this "
                             "run was driven; stopping before another paid call (put the file back at "
                             f"{self.label} and `dayflow resume` continues the run)")
        # While this process holds a connection (it has just committed), SQLite keeps the -wal in place;
        # only the last connection to close removes it. Gone now means someone deleted it.
        if not self.db.is_closed() and self._file_identity("-wal") is None:
            raise StoreError(f"{self.label}-wal: the write-ahead log was deleted or replaced while this "
                             "run was driven; stopping before another paid call")

    @property
    def is_postgres(self) -> bool:
        return isinstance(self.db, PostgresqlDatabase)

    @property
    def short_label(self) -> str:
        """A title-sized name: the file name, or ``dbname@host`` (never a password)."""
        if not self.is_postgres:
            return Path(self.label).name
        parts = urlsplit(self.label)
        return f"{parts.path.lstrip('/') or 'postgres'}@{parts.hostname or 'localhost'}"

    @contextlib.contextmanager
    def _write_tx(self):
        if not self.is_postgres:
            # BEGIN IMMEDIATE takes the write lock up front, so two writers queue on
            # the busy timeout instead of failing when a read upgrades to a write.
            with _ReportCause(self.db.atomic("IMMEDIATE")):
                yield
            return
        # PostgreSQL: READ COMMITTED (pinned at open); row locks order the writers.
        # The change counter is bumped last, so its row lock is held only for the commit.
        with self.db.atomic():
            yield
            slot = hash((os.getpid(), threading.get_ident())) % CHANGE_SLOTS
            ChangeCounter.update(n=ChangeCounter.n + 1).where(ChangeCounter.slot == slot).execute()

    @_db_errors
    def change_marker(self) -> tuple:
        """Cheap value that changes whenever another connection commits."""
        if not self.is_postgres:
            return (self.db.execute_sql("PRAGMA data_version").fetchone()[0],)
        # A tiny table read; bumped inside every write transaction, so it moves exactly when one commits.
        return (int(ChangeCounter.select(fn.SUM(ChangeCounter.n)).scalar() or 0),)

    # -- runs ------------------------------------------------------------

    @_db_errors
    def create_run(self, user_msg: str, *, model: str, budget_tokens: int | None = None,
                   max_steps: int = 12, compact_at: int | None = None, run_id: str | None = None,
                   status: str = "queued") -> Run:
        """A new run. ``status="queued"`` waits for a worker; use ``create_claimed_run`` to drive it here."""
        now = clock.iso()
        with self._write_tx():
            return Run.create(id=run_id or uuid.uuid4().hex[:12], user_msg=user_msg, status=status,
                              model=model, budget_tokens=budget_tokens, max_steps=max_steps,
                              compact_at=compact_at, created_at=now, updated_at=now)

    @_db_errors
    def create_claimed_run(self, user_msg: str, *, model: str, budget_tokens: int | None = None,
                           max_steps: int = 12, compact_at: int | None = None,
                           run_id: str | None = None) -> tuple[Run, Lease]:
        """A new run already leased to this process (no window for a worker to take it)."""
        token = _new_token()
        now = clock.iso()
        try:
            with self._write_tx():
                run = Run.create(id=run_id or uuid.uuid4().hex[:12], user_msg=user_msg, status="running",
                                 model=model, budget_tokens=budget_tokens, max_steps=max_steps,
                                 compact_at=compact_at, created_at=now, updated_at=now, owner_host=HOSTNAME,
                                 owner_pid=os.getpid(), owner_started=_OWN_START, lease_token=token,
                                 heartbeat_at=now)
        except BaseException:
            _ACTIVE_LEASES.discard(token)
            raise
        return run, Lease(self, run.id, token)

    @_db_errors
    def get_run(self, run_id: str) -> Run:
        run = Run.get_or_none(Run.id == run_id)
        if run is None:
            matches = list(Run.select().where(Run.id.startswith(run_id)).limit(2)) if len(run_id) >= 4 else []
            if len(matches) == 1:
                return matches[0]
            raise RunNotFound(f"no run with id {run_id!r} in {self.label}")
        return run

    @_db_errors
    def latest_unfinished(self) -> Run | None:
        """The newest run that can be resumed now (not finished, not held by a live process)."""
        candidates = (Run.select().where(Run.status.in_(RESUMABLE))
                      .order_by(Run.created_at.desc(), Run.id.desc()).limit(100))
        return next((run for run in candidates if not owner_alive(run)), None)

    @staticmethod
    def _filter_runs(query, status: Iterable[str] | None, search: str | None):
        if status:
            query = query.where(Run.status.in_(list(status)))
        if search:
            query = query.where(Run.id.startswith(search) | Run.user_msg.contains(search)
                                | Run.final_text.contains(search) | Run.error.contains(search))
        return query

    @_db_errors
    def list_runs(self, *, limit: int = 50, before: tuple[str, str] | None = None,
                  status: Iterable[str] | None = None, search: str | None = None) -> list[Run]:
        """Runs newest first, a window at a time (keyset on ``(created_at, id)``)."""
        query = Run.select(*[f for f in Run._meta.sorted_fields if f.name != "final_text"])
        if before is not None:
            created, rid = before
            query = query.where((Run.created_at < created) | ((Run.created_at == created) & (Run.id < rid)))
        query = self._filter_runs(query, status, search)
        return list(query.order_by(Run.created_at.desc(), Run.id.desc()).limit(limit))

    @_db_errors
    def count_runs(self, *, status: Iterable[str] | None = None, search: str | None = None) -> int:
        """How many runs ``list_runs`` would page through with the same filters."""
        return self._filter_runs(Run.select(), status, search).count()

    @_db_errors
    def runs_updated_since(self, since: str) -> list[Run]:
        """Runs touched after ``since`` (an ``updated_at`` value): the rows a live view must redraw."""
        return list(Run.select().where(Run.updated_at > since).order_by(Run.updated_at))

    @_db_errors
    def finish_run(self, run_id: str, status: str, *, final_text: str | None = None,
                   error: str | None = None, lease: Lease | None = None) -> None:
        with self._write_tx():
            self._set_run(run_id, lease, status=status, final_text=final_text, error=error)

    def _set_run(self, run_id: str, lease: Lease | None, **values: Any) -> None:
        values["updated_at"] = clock.iso()
        query = Run.update(**values).where(Run.id == run_id)
        if lease is not None:
            query = query.where(Run.lease_token == lease.token)
        if query.execute() != 1:
            raise RunBusy(f"run {run_id} was taken over by another process")

    @_db_errors
    def update_limits(self, run_id: str, *, budget_tokens: int | None = None, max_steps: int | None = None,
                      compact_at: int | None = None, lease: Lease | None = None) -> None:
        """Replace the limits given; ``None`` leaves one as it is, ``compact_at=0`` turns compaction off."""
        values: dict[str, Any] = {}
        if budget_tokens is not None:
            values["budget_tokens"] = budget_tokens
        if max_steps is not None:
            values["max_steps"] = max_steps
        if compact_at is not None:
            values["compact_at"] = compact_at or None
        with self._write_tx():
            self._set_run(run_id, lease, **values)

    # -- leases ----------------------------------------------------------

    @_db_errors
    def claim(self, run_id: str, *, stale_after: float = STALE_AFTER_S) -> Lease:
        """Take the right to drive ``run_id``; refuse if a live owner holds it.

        The claim is one conditional UPDATE (compare-and-swap on the lease as
        it was read), so two claimants racing on one run can never both win.
        """
        run = self.get_run(run_id)
        if run.lease_token is not None and owner_alive(run, stale_after):
            raise RunBusy(f"run {run.id} is being driven by {holder(run)}")
        token = _new_token()
        with self._write_tx():
            won = self._swap_lease(run, token)
        if not won:
            _ACTIVE_LEASES.discard(token)
            current = self.get_run(run.id)
            if current.status == "done":
                raise RunBusy(f"run {run.id} was finished by another process meanwhile")
            raise RunBusy(f"run {run.id} is being driven by {holder(current)}")
        return Lease(self, run.id, token)

    def _swap_lease(self, seen: Run, token: str) -> bool:
        """Install ``token`` as the lease of ``seen`` if the lease is still exactly as it was read.

        One UPDATE conditioned on the token and heartbeat read before: on
        PostgreSQL (READ COMMITTED) a concurrent claimant blocks on the row
        lock, then re-checks the condition against the committed row and
        updates nothing; an owner that heartbeat since the read keeps its run.
        """
        now = clock.iso()
        query = (Run.update(owner_host=HOSTNAME, owner_pid=os.getpid(), owner_started=_OWN_START,
                            lease_token=token, heartbeat_at=now,
                            updated_at=now, status="running", error=None)
                 .where(Run.id == seen.id, Run.status != "done",
                        Run.lease_token.is_null() if seen.lease_token is None
                        else Run.lease_token == seen.lease_token,
                        Run.heartbeat_at.is_null() if seen.heartbeat_at is None
                        else Run.heartbeat_at == seen.heartbeat_at))
        return query.execute() == 1

    @_db_errors
    def claim_next(self, *, stale_after: float = STALE_AFTER_S) -> Lease | None:
        """Claim one run for a worker: an interrupted run (owner gone) first, else the oldest queued one.

        None when there is nothing to take. ``failed`` and ``budget`` runs are
        left alone: they wait for a person (``dayflow resume``). On PostgreSQL
        the queued row is picked with ``FOR UPDATE SKIP LOCKED``, so workers
        racing for the head of the queue each take a different run instead of
        queueing behind one row; the lease itself is still the same
        compare-and-swap as ``claim``.
        """
        token = _new_token()
        cutoff = clock.iso(clock.now() - timedelta(seconds=stale_after))
        with self._write_tx():
            # Interrupted: "running" with no lease, a stale heartbeat, or an owner on this
            # host (whose pid is checked here, since SQL cannot see processes).
            orphans = (Run.select().where(Run.status == "running",
                                          Run.lease_token.is_null() | Run.heartbeat_at.is_null()
                                          | (Run.heartbeat_at < cutoff) | (Run.owner_host == HOSTNAME))
                       .order_by(Run.created_at, Run.id))
            if self.is_postgres:
                # A locked row is being written by someone right now: not an orphan, and not worth waiting for.
                orphans = orphans.for_update(skip_locked=True)
            for run in orphans:
                if run.lease_token is not None and owner_alive(run, stale_after):
                    continue
                if self._swap_lease(run, token):
                    return Lease(self, run.id, token)
            queued = Run.select().where(Run.status == "queued").order_by(Run.created_at, Run.id).limit(1)
            if self.is_postgres:
                queued = queued.for_update(skip_locked=True)
            for run in queued:
                if self._swap_lease(run, token):
                    return Lease(self, run.id, token)
        _ACTIVE_LEASES.discard(token)
        return None

    @_db_errors
    def heartbeat(self, lease: Lease) -> bool:
        """Refresh the lease; False when another process has taken it over."""
        with self._write_tx():
            return (Run.update(heartbeat_at=clock.iso())
                    .where(Run.id == lease.run_id, Run.lease_token == lease.token).execute()) == 1

    @_db_errors
    def release(self, lease: Lease) -> None:
        """Give the run up (its status stays as the loop left it)."""
        lease.stop_heartbeat()
        _ACTIVE_LEASES.discard(lease.token)
        with self._write_tx():
            (Run.update(owner_host=None, owner_pid=None, owner_started=None, lease_token=None, heartbeat_at=None,
                        updated_at=clock.iso())
             .where(Run.id == lease.run_id, Run.lease_token == lease.token).execute())

    # -- steps -----------------------------------------------------------

    @_db_errors(retry_for=lambda: COMMIT_RETRY_FOR_S)
    def append_step(self, run_id: str, step: StepRecord, *, lease: Lease | None = None,
                    final_status: str | None = None, final_text: str | None = None,
                    final_error: str | None = None) -> None:
        """Commit one model response and add its tokens to the run, in one transaction.

        With ``final_status`` the run is finished in the same transaction, so an
        end_turn step and the run's ``done`` can never disagree after a crash.
        """
        now = clock.iso()
        row = dict(run=run_id, n=step.n, stop_reason=step.stop_reason, assistant=dumps(step.assistant),
                   tool_results=None, input_tokens=step.input_tokens, output_tokens=step.output_tokens,
                   cache_creation_input_tokens=step.cache_creation_input_tokens,
                   cache_read_input_tokens=step.cache_read_input_tokens, model=step.model,
                   duration_ms=step.duration_ms, request_est_tokens=step.request_est_tokens,
                   compacted_est_tokens=step.compacted_est_tokens, created_at=now)
        values: dict[str, Any] = {"updated_at": now}
        if lease is not None:
            values["heartbeat_at"] = now
        if final_status is not None:
            values.update(status=final_status, final_text=final_text, error=final_error)
        added = (step.input_tokens, step.output_tokens, step.cache_creation_input_tokens,
                 step.cache_read_input_tokens)
        if attempt_number() and self._step_landed(run_id, step.n, row["assistant"], lease):
            return  # the earlier try committed; only its answer was lost with the connection
        insert_sql, insert_params = _insert_statement(self.db, Step, row)
        update_sql, update_params = _add_step_to_run_statement(self.db, run_id, added, values, lease)
        with self._write_tx():
            # The lease-checked run update first: a driver that lost its run is told so (RunBusy),
            # not that the new owner already committed this step number.
            if self.db.execute_sql(update_sql, update_params).rowcount != 1:
                raise RunBusy(f"run {run_id} was taken over by another process")
            self.db.execute_sql(insert_sql, insert_params)
            pause_point("commit")
        pause_point("committed")

    def _step_landed(self, run_id: str, n: int, assistant: str, lease: Lease | None) -> bool:
        """On a retry: is step ``n`` already stored as we sent it, under our lease?"""
        stored = Step.get_or_none((Step.run == run_id) & (Step.n == n))
        if stored is None or stored.assistant != assistant:
            return False
        return lease is None or Run.get_by_id(run_id).lease_token == lease.token

    @_db_errors(retry_for=lambda: COMMIT_RETRY_FOR_S)
    def set_tool_results(self, run_id: str, n: int, results: list[dict], *, lease: Lease | None = None) -> None:
        now = clock.iso()
        encoded = dumps(results)
        with self._write_tx():
            # The lease first: a driver that lost its run is told so (RunBusy, exit 4),
            # not that the new owner has already recorded these results.
            self._set_run(run_id, lease)
            updated = (Step.update(tool_results=encoded, tools_done_at=now)
                       .where(Step.run == run_id, Step.n == n, Step.tool_results.is_null()).execute())
            if updated != 1:
                stored = Step.get_or_none((Step.run == run_id) & (Step.n == n))
                if attempt_number() and stored is not None and stored.tool_results == encoded:
                    return  # our earlier try committed before the connection went
                raise StoreError(f"run {run_id} step {n}: tool results already recorded")
            pause_point("commit")
        pause_point("committed")

    @_db_errors
    def steps(self, run_id: str, *, from_n: int | None = None) -> list[Step]:
        """The run's steps in order; ``from_n`` keeps steps ``n >= from_n`` (a live view's tail)."""
        query = Step.select().where(Step.run == run_id)
        if from_n is not None:
            query = query.where(Step.n >= from_n)
        return list(query.order_by(Step.n))

    @_db_errors
    def replay_steps(self, run_id: str) -> list[Step]:
        """Steps with only what a resume reads: the blocks, stop reason and token counts.

        Building every column of a 10,000-step run took longer than decoding its JSON (bench item 3).
        """
        return list(Step.select(Step.run, Step.n, Step.stop_reason, Step.assistant, Step.tool_results,
                                Step.input_tokens, Step.output_tokens)
                    .where(Step.run == run_id).order_by(Step.n))

    @_db_errors
    def check_history(self, run_id: str) -> None:
        """Raise ``StoreError`` naming the first step whose stored blocks cannot be read.

        A resume checks before it claims the run, so a damaged row is refused
        with nothing written. On SQLite the check runs in SQL (``json_valid``):
        a 10,000-step history is not decoded twice.
        """
        if self.is_postgres:
            for step in self.replay_steps(run_id):
                step_blocks(step, "assistant"), step_blocks(step, "tool_results")
            return
        sql = ("SELECT n FROM steps WHERE run_id = ? AND NOT ("
               "CASE WHEN json_valid(assistant) THEN json_type(assistant) ELSE '' END = 'array' AND "
               "(tool_results IS NULL OR CASE WHEN json_valid(tool_results) THEN json_type(tool_results) ELSE '' END "
               "= 'array')) ORDER BY n LIMIT 1")
        bad = self.db.execute_sql(sql, (run_id,)).fetchone()
        if bad is not None:
            step = Step.get((Step.run == run_id) & (Step.n == bad[0]))
            step_blocks(step, "assistant"), step_blocks(step, "tool_results")
            raise StoreError(f"run {run_id} step {bad[0]}: stored blocks cannot be read")

    @_db_errors
    def step_count(self, run_id: str) -> int:
        return Step.select().where(Step.run == run_id).count()

    def rebuild_messages(self, run_id: str, steps: list[Step] | None = None) -> list[dict]:
        """The messages list the next API call receives, rebuilt from the rows.

        A trailing step whose tools have not run yet is left out (the loop runs
        them first): no tool_use is ever emitted without its results.
        """
        run = self.get_run(run_id)
        steps = self.replay_steps(run.id) if steps is None else steps
        messages: list[dict] = [{"role": "user", "content": run.user_msg}]
        for i, step in enumerate(steps):
            assistant = step_blocks(step, "assistant")
            results = step_blocks(step, "tool_results")
            needs_results = any(b.get("type") == "tool_use" for b in assistant)
            if needs_results and results is None:
                if i == len(steps) - 1:
                    break
                raise StoreError(f"run {run.id} step {step.n}: tool_use without stored results")
            messages.append({"role": "assistant", "content": assistant})
            if results is not None:
                messages.append({"role": "user", "content": results})
        return messages

    # -- tasks -----------------------------------------------------------

    @_db_errors
    def create_task(self, *, idempotency_key: str, title: str, due: str | None = None,
                    notes: str | None = None, run_id: str | None = None) -> tuple[Task, bool]:
        """Create a task once per key. Returns ``(task, created)``; a repeat returns the existing task."""
        existing = Task.get_or_none(Task.idempotency_key == idempotency_key)
        if existing is not None:
            return existing, False
        try:
            with self._write_tx():
                task = Task.create(idempotency_key=idempotency_key, title=title, due=due, notes=notes,
                                   run=run_id, created_at=clock.iso())
            return task, True
        except peewee.IntegrityError:
            # Another process created it between our read and our insert.
            return Task.get(Task.idempotency_key == idempotency_key), False

    @_db_errors
    def list_tasks(self, *, include_done: bool = False, run_id: str | None = None) -> list[Task]:
        query = Task.select()
        if not include_done:
            query = query.where(Task.done == False)  # noqa: E712 (peewee expression)
        if run_id is not None:
            query = query.where(Task.run == run_id)
        return list(query.order_by(Task.id))


# The per-step hot path as SQL text built once per statement shape from the
# models' metadata. Building the same two statements with Peewee's query
# builder on every step cost more CPU than the fsync that makes them durable
# (bench item 1: 2.3x the raw sqlite3 floor). Values still go through each
# field's db_value, and unnamed fields get their model default, as Peewee does.


@functools.lru_cache(maxsize=None)
def _insert_sql(param: str, quote: str, model: type) -> str:
    fields = [f for f in model._meta.sorted_fields if not isinstance(f, peewee.AutoField)]
    columns = ", ".join(f"{quote[0]}{f.column_name}{quote[1]}" for f in fields)
    return (f"INSERT INTO {quote[0]}{model._meta.table_name}{quote[1]} ({columns}) "
            f"VALUES ({', '.join([param] * len(fields))})")


def _insert_statement(db: peewee.Database, model: type, row: dict[str, Any]) -> tuple[str, list]:
    params = []
    for f in model._meta.sorted_fields:
        if isinstance(f, peewee.AutoField):
            continue
        value = row[f.name] if f.name in row else (f.default() if callable(f.default) else f.default)
        params.append(f.db_value(value))
    return _insert_sql(db.param, db.quote, model), params


_RUN_COUNTERS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens")


@functools.lru_cache(maxsize=None)
def _add_step_sql(param: str, quote: str, assigned: tuple[str, ...], with_lease: bool) -> str:
    def q(name: str) -> str:
        return f"{quote[0]}{name}{quote[1]}"

    counters = [Run._meta.fields[name].column_name for name in _RUN_COUNTERS]
    parts = [f"{q(c)} = {q(c)} + {param}" for c in counters]
    parts.append(f"{q(Run.step_count.column_name)} = {q(Run.step_count.column_name)} + 1")
    parts += [f"{q(Run._meta.fields[name].column_name)} = {param}" for name in assigned]
    where = f"{q(Run.id.column_name)} = {param}"
    if with_lease:
        where += f" AND {q(Run.lease_token.column_name)} = {param}"
    return f"UPDATE {q(Run._meta.table_name)} SET {', '.join(parts)} WHERE {where}"


def _add_step_to_run_statement(db: peewee.Database, run_id: str, added: tuple[int, ...],
                               values: dict[str, Any], lease: "Lease | None") -> tuple[str, list]:
    """The run's counters plus one step's tokens, ``values`` set, guarded by the lease when given."""
    params: list = list(added)
    params += [Run._meta.fields[name].db_value(value) for name, value in values.items()]
    params.append(run_id)
    if lease is not None:
        params.append(lease.token)
    return _add_step_sql(db.param, db.quote, tuple(values), lease is not None), params


def dumps(blocks: Any) -> str:
    """The one JSON encoding used for stored blocks (compact, key order kept, UTF-8)."""
    return json.dumps(blocks, ensure_ascii=False, separators=(",", ":"))


def step_blocks(step: Step, column: str) -> list[dict] | None:
    raw = getattr(step, column)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"run {step.run_id} step {step.n}: stored {column} JSON is malformed ({exc})") from exc
    if not isinstance(value, list):
        raise StoreError(f"run {step.run_id} step {step.n}: stored {column} is not a list of blocks")
    return value


# -- opening -------------------------------------------------------------

_PRAGMAS = {
    "journal_mode": "wal",
    "foreign_keys": 1,
    "synchronous": "full",  # a paid step must survive power loss
    "busy_timeout": 10_000,
}


def _create_private_file(path: Path) -> None:
    """Create the database file owner-only before SQLite touches it.

    SQLite gives the -wal and -shm files the permissions of the main file.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)


def is_url(target: str | os.PathLike) -> bool:
    """True for ``scheme://...`` (a database URL), False for a file path."""
    scheme, sep, _rest = os.fspath(target).partition("://")
    return bool(sep) and scheme.replace("+", "").isalpha()


def _resolve(target: str | os.PathLike | None) -> tuple[str, str]:
    """``("sqlite", path)`` or ``("postgres", url)`` for a ``--db`` value (None: ``$DAYFLOW_DB`` or the default)."""
    if target is None:
        target = os.environ.get("DAYFLOW_DB") or default_db_path()
    text = os.fspath(target)
    if not is_url(text):
        return "sqlite", text
    scheme, _sep, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres"):
        return "postgres", "postgresql://" + rest
    if scheme == "sqlite":
        # As in Peewee and SQLAlchemy: sqlite:///relative.db, sqlite:////absolute/path.db
        path = rest[1:] if rest.startswith("/") else rest
        path = path.split("?", 1)[0]
        if not path:
            raise StoreError(f"{text}: no file name (write sqlite:///relative.db or sqlite:////abs/path.db)")
        return "sqlite", path
    raise StoreError(f"{safe_url(text)}: unsupported database URL scheme {scheme!r} "
                     "(use a file path, sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME)")


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


class _DayflowPostgres(PostgresqlDatabase):
    """PostgreSQL with one session setting Dayflow relies on.

    Dayflow never keeps a transaction open across a model call, so a session
    idle inside a transaction for a minute is a stalled client (paused, cut
    off): the server ends it and its row locks go, instead of a run's lease
    being stuck behind them.
    """

    idle_in_transaction_timeout = "60s"

    def _initialize_connection(self, conn) -> None:
        super()._initialize_connection(conn)
        if "idle_in_transaction_session_timeout" not in self.database:
            conn.execute(f"SET idle_in_transaction_session_timeout = '{self.idle_in_transaction_timeout}'")


def _postgres_database(url: str, label: str) -> PostgresqlDatabase:
    try:
        import psycopg  # noqa: F401 - the optional extra "postgres"
    except ImportError:
        raise StoreError(f"{label}: PostgreSQL needs the psycopg driver: pip install 'dayflow-tui[postgres]'") from None
    given = {key for key, _value in parse_qsl(urlsplit(url).query)}
    extra: dict[str, Any] = {}
    if "connect_timeout" not in given:
        extra["connect_timeout"] = 10
    if "application_name" not in given:
        extra["application_name"] = "dayflow"
    # The URL goes to libpq as it is (every libpq parameter works, e.g. sslmode or
    # options=-csearch_path%3Dteam). The lease's compare-and-swap is reasoned for
    # READ COMMITTED, so that is pinned whatever the server's default.
    return _DayflowPostgres(url, prefer_psycopg3=True, isolation_level="READ COMMITTED", **extra)


def open_store(target: str | os.PathLike | None = None, *, create: bool = True) -> Store:
    """Open (and create or migrate) the database at ``target``: a file path, ``sqlite:///PATH`` or
    ``postgresql://USER@HOST:PORT/DBNAME``. None means ``$DAYFLOW_DB``, else the default file.

    ``create=False`` refuses a missing file (or a PostgreSQL database without
    Dayflow's tables) instead of making an empty one.
    """
    kind, where = _resolve(target)
    if kind == "postgres":
        label = safe_url(where)
        db: peewee.Database = _postgres_database(where, label)
    else:
        path = Path(where).expanduser()
        label = str(path)
        if path.is_dir():
            raise StoreError(f"{label}: is a directory, not a database file")
        if not path.exists():
            if not create:
                raise StoreError(f"{label}: no such database file")
            try:
                _create_private_file(path)
            except OSError as exc:
                raise StoreError(f"{label}: cannot create database ({exc.strerror})") from exc
        elif not create and path.stat().st_size == 0:
            # Checked before connecting: opening would write a header (WAL mode) into a file we only read.
            raise StoreError(f"{label}: no Dayflow tables in this file yet (nothing to read)")
        db = SqliteDatabase(str(path), pragmas=_PRAGMAS, timeout=10, check_same_thread=False)
    store = Store(db, label)
    try:
        _migrate(store, create=create)
    except StoreError:
        store.close()
        raise
    except Exception as exc:
        if not _is_driver_error(exc):
            raise
        store.close()
        raise StoreError(f"{label}: {_describe(exc)}") from exc
    return store


DAYFLOW_TABLES = {m._meta.table_name for m in MODELS + POSTGRES_MODELS}
# Keys tell apart the Dayflow schemas of one PostgreSQL database (one per search_path).
_MIGRATION_LOCK_CLASS = 0x0DA7F10


def _create_tables(store: Store) -> None:
    """Schema 1: the tables as the models define them today (so later steps check before altering)."""
    store.db.create_tables(MODELS + (POSTGRES_MODELS if store.is_postgres else ()))
    if store.is_postgres:
        ChangeCounter.insert_many([{"slot": k, "n": 0} for k in range(CHANGE_SLOTS)]).on_conflict_ignore().execute()


def _add_owner_started(store: Store) -> None:
    """Schema 2: the lease owner's process start time (pid reuse)."""
    column = Run.owner_started.column_name
    if column not in {c.name for c in store.db.get_columns(Run._meta.table_name)}:
        store.db.execute_sql(f'ALTER TABLE "{Run._meta.table_name}" ADD COLUMN "{column}" BIGINT')


# The schema's history, in order: MIGRATIONS[v] takes a database from version v to v + 1.
# A new schema change is one function appended here; SCHEMA_VERSION follows the list.
MIGRATIONS: tuple[Callable[[Store], None], ...] = (_create_tables, _add_owner_started)
SCHEMA_VERSION = len(MIGRATIONS)


def _seed_sample_tasks() -> None:
    """The sample data's open tasks, into a database just created (data, not schema)."""
    now = clock.iso()
    for key, title, due_days, notes in SEED_TASKS:
        due = (clock.today() + timedelta(days=due_days)).isoformat() if due_days is not None else None
        Task.insert(idempotency_key=key, title=title, due=due, notes=notes or None,
                    created_at=now).on_conflict_ignore().execute()


def _schema_version(store: Store) -> int:
    if not store.is_postgres:
        return store.db.execute_sql("PRAGMA user_version").fetchone()[0]
    if StoreMeta._meta.table_name not in store.db.get_tables():
        return 0
    row = StoreMeta.get_or_none(StoreMeta.key == "schema_version")
    return row.value if row is not None else 0


def _set_schema_version(store: Store, version: int) -> None:
    if not store.is_postgres:
        store.db.execute_sql(f"PRAGMA user_version = {int(version)}")
        return
    (StoreMeta.insert(key="schema_version", value=version)
     .on_conflict(conflict_target=[StoreMeta.key], update={StoreMeta.value: version}).execute())


def _migrate(store: Store, *, create: bool = True) -> None:
    db = store.db
    version = _schema_version(store)
    if version > SCHEMA_VERSION:
        raise StoreError(f"{store.label}: written by a newer Dayflow (schema {version}); "
                         f"this version reads schema {SCHEMA_VERSION} at most. Upgrade dayflow-tui.")
    if version == SCHEMA_VERSION:
        return
    if version == 0 and not create:
        # Asked only to read (show, resume, runs, tasks on a named database): never create tables in it.
        where = "database" if store.is_postgres else "file"
        raise StoreError(f"{store.label}: no Dayflow tables in this {where} yet (nothing to read)")
    with store._write_tx():
        if store.is_postgres:
            # DDL is transactional here; this lock makes two first opens take turns.
            db.execute_sql("SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))",
                           (_MIGRATION_LOCK_CLASS,))
        version = _schema_version(store)  # re-read under the lock
        if version >= SCHEMA_VERSION:
            return
        created = version == 0
        if created:
            existing = set(db.get_tables())
            if existing - DAYFLOW_TABLES:
                hint = (" (give Dayflow its own schema: add ?options=-csearch_path%3Ddayflow to the URL)"
                        if store.is_postgres else "")
                raise StoreError(f"{store.label}: holds tables that are not Dayflow's; refusing to touch it{hint}")
        for migration in MIGRATIONS[version:]:
            migration(store)
        version = SCHEMA_VERSION
        if created:
            _seed_sample_tasks()
        _set_schema_version(store, version)
