"""The fleet as numbers: runs by status, the queue's depth and age, runs backing off, the oldest heartbeat.

What ``dayflow metrics`` prints and a worker's ``/metrics`` serves (the
database-derived gauges): one short set of queries, read together on the
database's clock, so every host that asks sees the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from peewee import fn

from ..models import Run
from ..retry import store_call
from ..status import RunStatus
from .database import db_now

if TYPE_CHECKING:
    from ..handle import StoreHandle


@dataclass(frozen=True)
class FleetStats:
    """The database's view of the fleet at ``db_now`` (ISO text on the database's clock)."""

    db_now: str
    by_status: dict[str, int]  # stored statuses (never "interrupted"), every RunStatus present, 0 when none
    queue_ready: int  # queued runs a worker may take now
    queue_backing_off: int  # queued or running runs whose not_before is still ahead
    oldest_ready_age_s: float | None  # the oldest queued run a worker may take now: its age (None: none)
    held: int  # running runs held under a lease
    oldest_heartbeat_age_s: float | None  # of the held runs: the stalest heartbeat's age (None: none held)


def _age(now: str, then: str | None) -> float | None:
    if not then:
        return None
    try:
        parse = lambda text: datetime.fromisoformat(text.replace("Z", "+00:00"))  # noqa: E731
        return max((parse(now) - parse(then)).total_seconds(), 0.0)
    except ValueError:
        return None  # a damaged time is no time


@store_call
def fleet_stats(store: StoreHandle) -> FleetStats:
    now = db_now(store)
    counts = {status.value: 0 for status in RunStatus if status.value != "interrupted"}
    for status, count in Run.select(Run.status, fn.COUNT(Run.id)).group_by(Run.status).tuples():
        counts[status] = count
    ready = Run.not_before.is_null() | (Run.not_before <= now)
    queue_ready, oldest_ready = (Run.select(fn.COUNT(Run.id), fn.MIN(Run.created_at))
                                 .where(Run.status == RunStatus.QUEUED.value, ready).tuples().get())
    backing_off = (Run.select(fn.COUNT(Run.id))
                   .where(Run.status.in_([RunStatus.QUEUED.value, RunStatus.RUNNING.value]), Run.not_before > now)
                   .scalar())
    held, oldest_beat = (Run.select(fn.COUNT(Run.id), fn.MIN(Run.heartbeat_at))
                         .where(Run.status == RunStatus.RUNNING.value, Run.lease_token.is_null(False))
                         .tuples().get())
    return FleetStats(db_now=now, by_status=counts, queue_ready=queue_ready or 0,
                      queue_backing_off=backing_off or 0, oldest_ready_age_s=_age(now, oldest_ready),
                      held=held or 0, oldest_heartbeat_age_s=_age(now, oldest_beat))
