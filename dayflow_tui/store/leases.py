"""Leases: the right to drive one run, held by exactly one live process.

A lease is a token on the run's row, installed by compare-and-swap, kept
fresh by a heartbeat thread and released when the driver stops. Whether the
recorded owner is still alive is judged here: on its own host by pid *and*
process start time (a pid alone is reused by the kernel) and a fresh
heartbeat (a live pid that stopped beating is hung); across hosts by the
heartbeat's age on the database's clock.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import peewee

from .. import clock
from ..config import settings
from ..config.errors import RunBusy, RunCancelled
from ..safe_text import printable
from .models import LimitSlot, Run
from .retry import store_call
from .status import RunStatus

if TYPE_CHECKING:
    from .handle import StoreHandle

# A lease whose heartbeat is older than this is taken over (on the owner's own host a dead pid at once).
STALE_AFTER_S = 60.0
HEARTBEAT_EVERY_S = 10.0
# A holder whose lease no write has confirmed for this long (its heartbeats failing: the database away, or
# every connection slot taken) confirms it before it pays for a call: past STALE_AFTER_S another worker may
# take the run over and buy the same step again, so a reply must never be bought on a lease in doubt.
CONFIRM_AFTER_S = 2 * HEARTBEAT_EVERY_S
# A paid reply's commit retries only while its lease was confirmed less than this long ago, then spools the
# reply: on this host, whoever takes the run over at STALE_AFTER_S stores it before any call (15 s for the
# server's clock against ours, the spool's fsyncs and the taker's poll).
COMMIT_WHILE_CONFIRMED_S = STALE_AFTER_S - 15.0


def this_host() -> str:
    """This host's name in leases (Settings.hostname: set DAYFLOW_HOSTNAME where host names repeat)."""
    return settings.current().hostname


def __getattr__(name: str):
    if name == "HOSTNAME":  # read when asked, not at import: a bad setting is reported by the command
        return this_host()
    raise AttributeError(name)


@dataclass
class Lease:
    """The right to drive one run. Holds a heartbeat thread while alive."""

    store: "StoreHandle"
    run_id: str
    token: str
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    lost: bool = False
    # "cancelled by WHO: WHY" once a commit or a heartbeat under this lease saw a cancel asked for the run
    # (``note_cancel``): the driver starts no call and runs no tool after it, and ends the run ``cancelled``.
    cancel: str | None = None
    # The shared-limit slot of the call in flight under this lease (``tables/limits.py``): each beat renews it,
    # so it outlives a long call and expires soon after this process dies. None: no slot held (no query).
    limit_slot: str | None = None
    # When a write under this lease (the claim, a heartbeat) last began and found it ours (time.monotonic()):
    # taken at the write's start, so the server's heartbeat_at is never older than what this says.
    confirmed_at: float = field(default_factory=time.monotonic)

    def unconfirmed_for(self) -> float:
        """Seconds since a write last confirmed this lease (see ``CONFIRM_AFTER_S``)."""
        return time.monotonic() - self.confirmed_at

    def start_heartbeat(self, every: float | None = None) -> None:
        every = HEARTBEAT_EVERY_S if every is None else every

        def beat() -> None:
            try:
                while not self._stop.wait(every):
                    try:
                        still_ours = heartbeat(self.store, self)
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


def new_token() -> str:
    """A fresh lease token, registered as held *before* it is written.

    Another thread of this process that reads the row between the commit and
    the registration must see a live owner, not a finished one.
    """
    token = uuid.uuid4().hex
    _ACTIVE_LEASES.add(token)
    return token


def forget_token(token: str) -> None:
    _ACTIVE_LEASES.discard(token)


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


OWN_START = process_start_time(os.getpid())


def _parse(iso_ts: str) -> datetime:
    return datetime.fromisoformat(iso_ts.replace("Z", "+00:00"))


def _age_seconds(run: Run) -> float | None:
    """The heartbeat's age, on the database's clock when the row was read with it (``db_now``)."""
    if not run.heartbeat_at:
        return None
    seen = getattr(run, "db_now", None)
    try:
        now = _parse(seen) if seen else clock.now()
        return (now - _parse(run.heartbeat_at)).total_seconds()
    except (TypeError, ValueError, AttributeError):
        return None  # a damaged heartbeat is no heartbeat: the owner counts as silent, never as a crash here


def owner_alive(run: Run, stale_after: float = STALE_AFTER_S) -> bool:
    """Is the process recorded as the run's owner still driving it?"""
    if run.owner_pid is None:
        return False
    if not isinstance(run.owner_pid, int):
        return False  # a damaged row (SQLite keeps text in an integer column): no process to ask
    age = _age_seconds(run)
    fresh = age is not None and age < stale_after
    if run.owner_host == this_host():
        if run.owner_pid == os.getpid():
            return run.lease_token in _ACTIVE_LEASES
        if not pid_alive(run.owner_pid):
            return False
        if run.owner_started is not None and process_start_time(run.owner_pid) not in (None, run.owner_started):
            return False  # the pid now belongs to another process: the owner is gone
        # A live owner beats every 10 s; one silent past the stale time is hung and loses the run.
        return fresh
    return fresh


def with_clock(store: StoreHandle, query: peewee.ModelSelect) -> peewee.ModelSelect:
    """Rows read with the database's time beside them, so liveness is judged on one clock."""
    column = store.dialect.now_column()
    return query if column is None else query.select_extend(column.alias("db_now"))


def still_refused(run: Run) -> None:
    """Raise when a run waits for a person's decision (the decision continues it, not a claim), or was
    cancelled (nothing continues it: a fork of it is a new run)."""
    if run.status == RunStatus.CANCELLED.value:
        after = (f"to go on from its {run.step_count} step(s), fork it: dayflow fork {run.id} --at "
                 f"{run.step_count} --run" if run.step_count else "nothing ran: start a new run")
        raise RunCancelled(printable(f"run {run.id} was {cancel_words(run.cancelled_by, run.cancel_reason)}; a "
                                     f"cancelled run is not resumed ({after})"))
    if run.status == RunStatus.WAITING.value:
        raise RunBusy(f"run {run.id} waits for a decision on a tool call: see `dayflow pending`, then "
                      f"`dayflow approve {run.id}` or `dayflow deny {run.id} --reason ...`")


def effective_status(run: Run) -> str:
    """The status a user should see: a 'running' run with a dead owner is 'interrupted'."""
    if getattr(run, "source", None) not in (None, "dayflow"):
        return run.status  # an imported run has no owner here: "running" is its source's word (an OTLP trace going on)
    if run.status == RunStatus.RUNNING and not owner_alive(run):
        return RunStatus.INTERRUPTED.value
    return run.status


def holder(run: Run) -> str:
    """Who holds the run, as text safe to show: the host name is whatever the row holds."""
    return printable(f"pid {run.owner_pid} on {run.owner_host}")


def owner_values(store: StoreHandle, token: str) -> dict:
    """The run's owner columns for a lease held by this process under ``token``."""
    now = store.dialect.now()
    return dict(owner_host=this_host(), owner_pid=os.getpid(), owner_started=OWN_START, lease_token=token,
                heartbeat_at=now, updated_at=now)


@store_call
def heartbeat(store: StoreHandle, lease: Lease) -> bool:
    """Refresh the lease; False when another process has taken it over. A cancel asked meanwhile is noted."""
    started = time.monotonic()
    with store.write_transaction():
        ours = (Run.update(heartbeat_at=store.dialect.now())
                .where(Run.id == lease.run_id, Run.lease_token == lease.token).execute()) == 1
        if ours:
            lease.confirmed_at = max(lease.confirmed_at, started)
            note_cancel(store, lease)
            slot = lease.limit_slot
            if slot is not None:
                LimitSlot.update(beat_at=store.dialect.now()).where(LimitSlot.token == slot).execute()
        return ours


def cancel_words(by: str | None, reason: str | None) -> str:
    """How a cancel reads in a run's error and on screen: ``cancelled by WHO: WHY`` (text from the row)."""
    words = f"cancelled by {by or 'someone'}"
    return f"{words}: {reason}" if reason else words


def note_cancel(store: StoreHandle, lease: Lease) -> None:
    """Inside a write under ``lease`` (a commit, a heartbeat, a claim): has someone asked to cancel the run?

    One primary-key read, skipped once the lease knows. Read after the lease-checked write in the same
    transaction, so a cancel that committed before it is seen here, and one that commits after it is seen
    by the next commit or heartbeat.
    """
    if lease.cancel is not None:
        return
    db = store.db
    row = db.execute_sql(f'SELECT "cancelled_by", "cancel_reason" FROM "runs" WHERE "id" = {db.param} '
                         'AND "cancel_at" IS NOT NULL', (lease.run_id,)).fetchone()
    if row is not None:
        lease.cancel = cancel_words(row[0], row[1])
