"""Cancel: a run ends ``cancelled``, exactly once, and no paid reply is lost on the way.

A run nobody drives (queued, forked, waiting, or running with its owner gone) is
cancelled at once: one conditional UPDATE on the row as it was read, so a claim
racing it either wins first (the cancel reads again and finds a live owner) or
finds the run cancelled (claims never take a cancelled run). A run a live process
drives is only *asked*: the cancel columns are set under the owner's lease as read,
and the driver sees them at its next commit or heartbeat (``leases.note_cancel``).
Its call in flight finishes and is committed as usual; it then starts no call, runs
no tool, and ends the run itself (``finish_run`` under its lease). So a cancel
never takes a lease away from a driver holding a paid reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...config.errors import CancelRefused, RunBusy
from ...safe_text import printable
from ..leases import cancel_words, holder, owner_alive
from ..models import Run
from ..retry import attempt_number, store_call
from ..search.index import index_run_text
from ..status import ENDED, RunStatus
from .runs import get_run, subagents_of
from .imported import refuse_imported

if TYPE_CHECKING:
    from ..handle import StoreHandle

# A cancel that loses a race (a claim, a release, a decision) reads the run again; this many times at most.
TRIES = 8


@dataclass(frozen=True)
class CancelOutcome:
    """What a cancel did. ``asked``: a live process drives the run and ends it at its next commit or
    heartbeat (``holder`` says which); otherwise the run is ``cancelled`` now, from ``was``."""

    run_id: str
    asked: bool
    was: str  # the status it was cancelled from (or "running" when asked)
    holder: str | None = None


@store_call
def cancel_run(store: StoreHandle, run_id: str, *, by: str, reason: str | None) -> CancelOutcome:
    """Cancel ``run_id`` (an id or its start) for ``by`` (user@host, or "dashboard"), saying ``reason``."""
    for _ in range(TRIES):
        run = get_run(store, run_id)
        refuse_imported(run)
        if attempt_number() and run.cancelled_by == by and run.cancel_reason == reason:
            # An earlier try committed; only its answer was lost with the connection.
            return CancelOutcome(run.id, run.status == RunStatus.RUNNING.value, run.status, None)
        if run.status in {s.value for s in ENDED}:
            raise CancelRefused(_ended(run))
        now = store.dialect.now()
        asked = dict(cancel_at=now, cancelled_by=by, cancel_reason=reason, updated_at=now)
        same_lease = (Run.lease_token.is_null() if run.lease_token is None else Run.lease_token == run.lease_token)
        if run.status == RunStatus.RUNNING.value and run.lease_token is not None and owner_alive(run):
            if run.cancel_at is not None:
                return CancelOutcome(run.id, True, run.status, holder(run))  # asked already; its driver ends it
            with store.write_transaction():
                won = (Run.update(**asked).where(Run.id == run.id, Run.status == run.status, same_lease)
                       .execute()) == 1
            if won:
                return CancelOutcome(run.id, True, run.status, holder(run))
            continue
        same_beat = Run.heartbeat_at.is_null() if run.heartbeat_at is None else Run.heartbeat_at == run.heartbeat_at
        error = cancel_words(by, reason)
        with store.write_transaction():
            won = (Run.update(status=RunStatus.CANCELLED.value, error=error, not_before=None, owner_host=None,
                              owner_pid=None, owner_started=None, lease_token=None, heartbeat_at=None, **asked)
                   .where(Run.id == run.id, Run.status == run.status, same_lease, same_beat).execute()) == 1
            if won:
                index_run_text(store, run.id, error=error)  # "cancelled by ..." is searchable like any error
        if won:
            return CancelOutcome(run.id, False, run.status)
    raise RunBusy(f"run {run_id} kept changing hands while it was being cancelled; try again")


def cancel_below(store: StoreHandle, run_id: str, *, by: str, reason: str | None) -> list[CancelOutcome]:
    """Cancel the subagents' runs under a cancelled run, each as ``cancel_run`` does (at once, or asked of
    its driver), deepest last; a child that has ended is left as it is. A tree stops together: a waiting
    child's call no longer waits for a decision nobody will use."""
    outcomes = []
    for child in subagents_of(store, [run_id]).get(run_id, []):
        try:
            outcomes.append(cancel_run(store, child.id, by=by, reason=reason))
        except CancelRefused:
            pass  # ended already: nothing of it runs
        outcomes += cancel_below(store, child.id, by=by, reason=reason)
    return outcomes


def _ended(run: Run) -> str:
    if run.status == RunStatus.CANCELLED.value:
        return printable(f"run {run.id} is cancelled already ({cancel_words(run.cancelled_by, run.cancel_reason)})")
    if run.status == RunStatus.DONE.value:
        return f"run {run.id} is done already; nothing to cancel"
    return (f"run {run.id} has ended ({run.status}) and nothing drives it; nothing to cancel "
            "(it runs again only if a person resumes it)")
