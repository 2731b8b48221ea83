"""Where each resume of a run began: the one fact an exported trace needs that leases forget.

A claim overwrites the run's lease columns, so after a run has been resumed
twice nothing in ``runs`` or ``steps`` says when the second driver took over.
``record_resume`` appends a ``run_resumes`` row inside the claim's own
transaction (a claim that loses its compare-and-swap records nothing); the
first claim of a queued run is its start, not a resume, and is not recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..models import Run, RunResume
from ..retry import store_call
from ..status import RunStatus

if TYPE_CHECKING:
    from ..handle import StoreHandle


def record_resume(seen: Run, *, at: Any, host: str, pid: int, owner_alive: bool) -> None:
    """Record that the run ``seen`` (as read before the claim won) is being resumed now.

    ``owner_alive``: whether its recorded owner was judged alive (a stale but
    live owner taken over after its heartbeat stopped) - a ``running`` run
    with a dead owner is what users see as ``interrupted``.
    """
    if seen.status == RunStatus.QUEUED.value:
        return
    previous = seen.status
    if seen.status == RunStatus.RUNNING.value and not owner_alive:
        previous = RunStatus.INTERRUPTED.value
    RunResume.insert(run=seen.id, at=at, after_step=seen.step_count, previous_status=previous,
                     owner_host=host, owner_pid=pid).execute()


@store_call
def run_resumes(store: "StoreHandle", run_id: str) -> list[RunResume]:
    """Where each resume of the run began, oldest first."""
    return list(RunResume.select().where(RunResume.run == run_id).order_by(RunResume.id))


def add_resumes_table(store: "StoreHandle") -> None:
    """Schema step: the ``run_resumes`` table (created with the others in a new database)."""
    store.db.create_tables([RunResume], safe=True)
