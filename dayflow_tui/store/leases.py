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
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from .. import clock, settings
from ..errors import RunBusy
from ..safe_text import printable
from .models import Run
from .resumes import record_resume
from .retry import attempt_number, store_call
from .status import RunStatus

if TYPE_CHECKING:
    from .core import Store

# A lease whose heartbeat is older than this is taken over (on the owner's own host a dead pid at once).
STALE_AFTER_S = 60.0
HEARTBEAT_EVERY_S = 10.0


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


def still_refused(run: Run) -> None:
    """Raise when a run waits for a person's decision: the decision continues it, not a claim."""
    if run.status == RunStatus.WAITING.value:
        raise RunBusy(f"run {run.id} waits for a decision on a tool call: see `dayflow pending`, then "
                      f"`dayflow approve {run.id}` or `dayflow deny {run.id} --reason ...`")


def effective_status(run: Run) -> str:
    """The status a user should see: a 'running' run with a dead owner is 'interrupted'."""
    if run.status == RunStatus.RUNNING and not owner_alive(run):
        return RunStatus.INTERRUPTED.value
    return run.status


def holder(run: Run) -> str:
    """Who holds the run, as text safe to show: the host name is whatever the row holds."""
    return printable(f"pid {run.owner_pid} on {run.owner_host}")


class LeaseQueries:
    """The store's lease operations (a part of ``Store``)."""

    def _owner_values(self: "Store", token: str) -> dict:
        now = self.dialect.now()
        return dict(owner_host=this_host(), owner_pid=os.getpid(), owner_started=OWN_START, lease_token=token,
                    heartbeat_at=now, updated_at=now)

    def claim(self: "Store", run_id: str, *, stale_after: float = STALE_AFTER_S, fresh_attempts: bool = False) -> Lease:
        """Take the right to drive ``run_id``; refuse if a live owner holds it.

        The claim is one conditional UPDATE (compare-and-swap on the lease as
        it was read), so two claimants racing on one run can never both win.
        ``fresh_attempts``: a person resumes, so the run's count of failed
        attempts starts again. The token is fixed before the first try, so a
        retry whose earlier COMMIT landed finds its own lease, not a rival's.
        """
        token = new_token()
        try:
            return self._claim(run_id, token, stale_after=stale_after, fresh_attempts=fresh_attempts)
        except BaseException:
            forget_token(token)
            raise

    @store_call
    def _claim(self: "Store", run_id: str, token: str, *, stale_after: float, fresh_attempts: bool) -> Lease:
        run = self.get_run(run_id)
        if run.lease_token == token:
            return Lease(self, run.id, token)  # an earlier try committed; only its answer was lost
        still_refused(run)  # a run waiting for a person is continued by the decision, not claimed
        if run.lease_token is not None and owner_alive(run, stale_after):
            raise RunBusy(f"run {run.id} is being driven by {holder(run)}")
        with self.write_transaction():
            won = self._swap_lease(run, token, fresh_attempts=fresh_attempts)
        if not won:
            current = self.get_run(run.id)
            if current.status == RunStatus.DONE:
                raise RunBusy(f"run {run.id} was finished by another process meanwhile")
            still_refused(current)
            raise RunBusy(f"run {run.id} is being driven by {holder(current)}")
        return Lease(self, run.id, token)

    def _swap_lease(self: "Store", seen: Run, token: str, *, fresh_attempts: bool = False) -> bool:
        """Install ``token`` as the lease of ``seen`` if the lease is still exactly as it was read.

        One UPDATE conditioned on the token and heartbeat read before: on
        PostgreSQL (READ COMMITTED) a concurrent claimant blocks on the row
        lock, then re-checks the condition against the committed row and
        updates nothing; an owner that heartbeat since the read keeps its run.
        The run reads ``running`` from here on; its last error stays until the
        driver's attempt has really started (``mark_running``). A person's
        resume checks everything that can refuse the run before it claims it.
        """
        values = self._owner_values(token)
        values["status"] = RunStatus.RUNNING.value
        # Every claim is an attempt; committing a step sets the count back to 0.
        values.update(attempts=1, not_before=None) if fresh_attempts else values.update(attempts=Run.attempts + 1)
        query = (Run.update(**values)
                 .where(Run.id == seen.id, Run.status.not_in([RunStatus.DONE.value, RunStatus.WAITING.value]),
                        Run.lease_token.is_null() if seen.lease_token is None
                        else Run.lease_token == seen.lease_token,
                        Run.heartbeat_at.is_null() if seen.heartbeat_at is None
                        else Run.heartbeat_at == seen.heartbeat_at))
        won = query.execute() == 1
        if won:
            record_resume(seen, at=values["updated_at"], host=values["owner_host"], pid=values["owner_pid"],
                          owner_alive=seen.lease_token is not None and owner_alive(seen))
        return won

    def claim_next(self: "Store", *, stale_after: float = STALE_AFTER_S) -> Lease | None:
        """Claim one run for a worker: an interrupted run (owner gone) first, else the oldest queued one.

        None when there is nothing to take. ``failed`` and ``budget`` runs are
        left alone: they wait for a person (``dayflow resume``). A run backing
        off after a failed attempt (``not_before`` in the future) waits its
        turn while others are taken. On PostgreSQL rows are picked with
        ``FOR UPDATE SKIP LOCKED``, so workers racing for the head of the
        queue each take a different run; the lease itself is still the same
        compare-and-swap as ``claim``.
        """
        token = new_token()
        try:
            lease = self._claim_next(token, stale_after=stale_after)
        except BaseException:
            forget_token(token)
            raise
        if lease is None:
            forget_token(token)
        return lease

    @store_call
    def _claim_next(self: "Store", token: str, *, stale_after: float) -> Lease | None:
        if attempt_number():
            landed = Run.get_or_none(Run.lease_token == token)
            if landed is not None:
                return Lease(self, landed.id, token)  # an earlier try committed; only its answer was lost
        now = self.db_now()
        cutoff = clock.iso(_parse(now) - timedelta(seconds=stale_after))
        ready = Run.not_before.is_null() | (Run.not_before <= now)
        with self.write_transaction():
            # Interrupted: "running" with no lease, a stale heartbeat, or an owner on this
            # host (whose pid is checked here, since SQL cannot see processes).
            orphans = self.dialect.skip_locked(
                Run.select().where(Run.status == RunStatus.RUNNING, ready,
                                   Run.lease_token.is_null() | Run.heartbeat_at.is_null()
                                   | (Run.heartbeat_at < cutoff) | (Run.owner_host == this_host()))
                .order_by(Run.created_at, Run.id))
            for run in orphans:
                run.db_now = now
                if run.lease_token is not None and owner_alive(run, stale_after):
                    continue
                if self._swap_lease(run, token):
                    return Lease(self, run.id, token)
            queued = self.dialect.skip_locked(
                Run.select().where(Run.status == RunStatus.QUEUED, ready).order_by(Run.created_at, Run.id).limit(1))
            for run in queued:
                if self._swap_lease(run, token):
                    return Lease(self, run.id, token)
        return None

    @store_call
    def heartbeat(self: "Store", lease: Lease) -> bool:
        """Refresh the lease; False when another process has taken it over."""
        with self.write_transaction():
            return (Run.update(heartbeat_at=self.dialect.now())
                    .where(Run.id == lease.run_id, Run.lease_token == lease.token).execute()) == 1

    @store_call
    def release(self: "Store", lease: Lease) -> None:
        """Give the run up (its status stays as the driver left it)."""
        lease.stop_heartbeat()
        forget_token(lease.token)
        with self.write_transaction():
            (Run.update(owner_host=None, owner_pid=None, owner_started=None, lease_token=None, heartbeat_at=None,
                        updated_at=self.dialect.now())
             .where(Run.id == lease.run_id, Run.lease_token == lease.token).execute())
