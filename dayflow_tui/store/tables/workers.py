"""The workers table: each ``dayflow worker`` process registers, beats with the runs it holds, and says when
it stops; a worker that stopped beating (killed, its host gone) reads as stale and is pruned after a while.

Times are the database's clock (``db_now``), so workers on many hosts are compared on one clock.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..leases import STALE_AFTER_S
from ..models import Worker
from ..retry import store_call
from .database import db_now

if TYPE_CHECKING:
    from ..handle import StoreHandle

PRUNE_AFTER_S = 24 * 3600.0  # a stopped or stale worker's row is kept this long, then removed


@dataclass(frozen=True)
class WorkerRow:
    """One worker as ``dayflow workers`` shows it (frozen: the dashboard reads it off the UI thread)."""

    id: str
    host: str
    pid: int
    version: str
    concurrency: int
    started_at: str
    beat_age_s: float | None
    runs: tuple[str, ...]
    runs_done: int
    state: str  # "alive", "stale" (no beat for STALE_AFTER_S: killed, or its host is gone), "stopped"


@store_call
def register_worker(store: StoreHandle, *, host: str, pid: int, version: str, concurrency: int) -> str:
    worker_id = uuid.uuid4().hex[:16]
    now = db_now(store)
    with store.write_transaction():
        Worker.insert(id=worker_id, host=host[:255], pid=pid, version=version[:32], concurrency=concurrency,
                      started_at=now, beat_at=now, runs="[]").execute()
        Worker.delete().where(Worker.beat_at < db_now(store, -PRUNE_AFTER_S)).execute()
    return worker_id


@store_call
def worker_beat(store: StoreHandle, worker_id: str, runs: list[str], runs_done: int) -> None:
    with store.write_transaction():
        Worker.update(beat_at=db_now(store), runs=json.dumps(sorted(runs)), runs_done=runs_done).where(
            Worker.id == worker_id).execute()


@store_call
def worker_stopped(store: StoreHandle, worker_id: str, runs_done: int) -> None:
    now = db_now(store)
    with store.write_transaction():
        Worker.update(beat_at=now, stopped_at=now, runs="[]", runs_done=runs_done).where(
            Worker.id == worker_id).execute()


@store_call
def workers(store: StoreHandle) -> list[WorkerRow]:
    """Every worker seen in the last day, live ones first, newest first."""
    now = db_now(store)
    rows = []
    for worker in Worker.select().order_by(Worker.started_at.desc()):
        age = _age(now, worker.beat_at)
        state = "stopped" if worker.stopped_at else "alive" if age is not None and age < STALE_AFTER_S else "stale"
        try:
            held = tuple(str(run) for run in json.loads(worker.runs or "[]"))
        except ValueError:
            held = ()
        rows.append(WorkerRow(worker.id, worker.host, worker.pid, worker.version, worker.concurrency,
                              worker.started_at, age, held if state == "alive" else (), worker.runs_done, state))
    order = {"alive": 0, "stale": 1, "stopped": 2}
    return sorted(rows, key=lambda row: order[row.state])


def _age(now: str, then: str | None) -> float | None:
    try:
        parse = lambda text: datetime.fromisoformat(text.replace("Z", "+00:00"))  # noqa: E731
        return max((parse(now) - parse(then or "")).total_seconds(), 0.0)
    except ValueError:
        return None
