"""Claims: taking the right to drive a run (``claim``, ``claim_next``) and giving it up (``release``).

A claim is one conditional UPDATE of the run's lease columns (compare-and-swap
on the lease as it was read), so two claimants racing on one run never both
win. What a lease is, and whether its owner still lives, is ``store.leases``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from ... import clock
from ...config.errors import RunBusy, SchemaAhead
from ..leases import (STALE_AFTER_S, Lease, _parse, forget_token, holder, new_token, note_cancel, owner_alive,
                      owner_values, still_refused, this_host)
from ..models import Run
from ..retry import attempt_number, store_call
from ..status import RunStatus
from .database import db_now
from .imported import refuse_imported
from .resumes import record_resume
from .runs import get_run

if TYPE_CHECKING:
    from ..handle import StoreHandle


def claim(store: StoreHandle, run_id: str, *, stale_after: float = STALE_AFTER_S,
          fresh_attempts: bool = False) -> Lease:
    """Take the right to drive ``run_id``; refuse if a live owner holds it.

    The claim is one conditional UPDATE (compare-and-swap on the lease as
    it was read), so two claimants racing on one run can never both win.
    ``fresh_attempts``: a person resumes, so the run's count of failed
    attempts starts again. The token is fixed before the first try, so a
    retry whose earlier COMMIT landed finds its own lease, not a rival's.
    """
    token = new_token()
    try:
        return claim_with(store, run_id, token, stale_after=stale_after, fresh_attempts=fresh_attempts)
    except BaseException:
        forget_token(token)
        raise


@store_call
def claim_with(store: StoreHandle, run_id: str, token: str, *, stale_after: float, fresh_attempts: bool) -> Lease:
    run = get_run(store, run_id)
    refuse_imported(run)  # an imported session is never driven here
    if run.lease_token == token:
        return Lease(store, run.id, token)  # an earlier try committed; only its answer was lost
    still_refused(run)  # a run waiting for a person is continued by the decision, not claimed; nor a cancelled one
    if run.lease_token is not None and owner_alive(run, stale_after):
        raise RunBusy(f"run {run.id} is being driven by {holder(run)}")
    lease = Lease(store, run.id, token)
    with store.write_transaction():
        won = swap_lease(store, run, token, fresh_attempts=fresh_attempts)
        if won:
            note_cancel(store, lease)  # asked of its last owner, who died before it ended the run
    if not won:
        current = get_run(store, run.id)
        if current.status == RunStatus.DONE:
            raise RunBusy(f"run {run.id} was finished by another process meanwhile")
        still_refused(current)
        raise RunBusy(f"run {run.id} is being driven by {holder(current)}")
    return lease


def swap_lease(store: StoreHandle, seen: Run, token: str, *, fresh_attempts: bool = False) -> bool:
    """Install ``token`` as the lease of ``seen`` if the lease is still exactly as it was read.

    One UPDATE conditioned on the token and heartbeat read before: on
    PostgreSQL (READ COMMITTED) a concurrent claimant blocks on the row
    lock, then re-checks the condition against the committed row and
    updates nothing; an owner that heartbeat since the read keeps its run.
    The run reads ``running`` from here on; its last error stays until the
    driver's attempt has really started (``mark_running``). A person's
    resume checks everything that can refuse the run before it claims it.
    """
    values = owner_values(store, token)
    values["status"] = RunStatus.RUNNING.value
    # Every claim is an attempt; committing a step sets the count back to 0.
    values.update(attempts=1, not_before=None) if fresh_attempts else values.update(attempts=Run.attempts + 1)
    query = (Run.update(**values)
             .where(Run.id == seen.id, Run.status.not_in([RunStatus.DONE.value, RunStatus.WAITING.value,
                                                          RunStatus.CANCELLED.value]),
                    Run.lease_token.is_null() if seen.lease_token is None
                    else Run.lease_token == seen.lease_token,
                    Run.heartbeat_at.is_null() if seen.heartbeat_at is None
                    else Run.heartbeat_at == seen.heartbeat_at))
    won = query.execute() == 1
    if won:
        record_resume(seen, at=values["updated_at"], host=values["owner_host"], pid=values["owner_pid"],
                      owner_alive=seen.lease_token is not None and owner_alive(seen))
    return won


def claim_next(store: StoreHandle, *, stale_after: float = STALE_AFTER_S) -> Lease | None:
    """Claim one run for a worker: an interrupted run (owner gone) first, else a queued one: the highest
    priority, the oldest within it.

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
        lease = claim_next_with(store, token, stale_after=stale_after)
    except BaseException:
        forget_token(token)
        raise
    if lease is None:
        forget_token(token)
    return lease


@store_call
def claim_next_with(store: StoreHandle, token: str, *, stale_after: float) -> Lease | None:
    if attempt_number():
        landed = Run.get_or_none(Run.lease_token == token)
        if landed is not None:
            return _noted(store, Lease(store, landed.id, token))  # an earlier try committed; its answer was lost
    now = db_now(store)
    cutoff = clock.iso(_parse(now) - timedelta(seconds=stale_after))
    ready = Run.not_before.is_null() | (Run.not_before <= now)
    with store.write_transaction():
        # A database a newer Dayflow migrated is not this code's to drive (a rolling upgrade): no claim.
        found = store.dialect.schema_version_for_claim(store.db)
        if found > store.known_schema:
            raise SchemaAhead(store.label, found, store.known_schema)
        # Interrupted: "running" with no lease, a stale heartbeat, or an owner on this
        # host (whose pid is checked here, since SQL cannot see processes).
        orphans = store.dialect.skip_locked(
            # An imported run "running" at its source (dayflow collect) is never an orphan: no worker takes it.
            Run.select().where(Run.status == RunStatus.RUNNING, ready, Run.source == "dayflow",
                               Run.lease_token.is_null() | Run.heartbeat_at.is_null()
                               | (Run.heartbeat_at < cutoff) | (Run.owner_host == this_host()))
            .order_by(*CLAIM_ORDER))
        for run in orphans:
            run.db_now = now
            if run.lease_token is not None and owner_alive(run, stale_after):
                continue
            if swap_lease(store, run, token):
                return _noted(store, Lease(store, run.id, token))
        # The claim order's index (status, priority DESC, created_at, id) answers this with its first entry.
        queued = store.dialect.skip_locked(
            Run.select().where(Run.status == RunStatus.QUEUED, ready).order_by(*CLAIM_ORDER).limit(1))
        for run in queued:
            if swap_lease(store, run, token):
                return _noted(store, Lease(store, run.id, token))
    return None


# Higher priority first, then the oldest (the id breaks a tie of the same millisecond).
CLAIM_ORDER = (Run.priority.desc(), Run.created_at, Run.id)


def _noted(store: StoreHandle, lease: Lease) -> Lease:
    """A won lease, told of a cancel already asked of the run (its last owner died before ending it)."""
    note_cancel(store, lease)
    return lease


@store_call
def release(store: StoreHandle, lease: Lease) -> None:
    """Give the run up (its status stays as the driver left it)."""
    lease.stop_heartbeat()
    forget_token(lease.token)
    with store.write_transaction():
        (Run.update(owner_host=None, owner_pid=None, owner_started=None, lease_token=None, heartbeat_at=None,
                    updated_at=store.dialect.now())
         .where(Run.id == lease.run_id, Run.lease_token == lease.token).execute())
