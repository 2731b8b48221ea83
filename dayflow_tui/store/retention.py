"""Retention: removing old finished runs a person asked to remove, and giving the space back.

Nothing here runs on its own: ``dayflow prune`` and ``dayflow vacuum`` are
typed by a person. Prune removes runs and their steps and resumes; tasks are
the person's and stay (their link to a removed run is cleared, and an
archive re-imported restores it). A run that is queued, running (or
interrupted), or that changed after it was selected, is never removed: the
delete re-checks each run's status, step count and ``updated_at`` under the
write lock (PostgreSQL: the row locks) in the transaction that deletes it.

Vacuum gives free space back to the disk while the dashboard and workers go
on. SQLite: a database in incremental auto-vacuum mode (new databases are;
an older one is converted by one full ``VACUUM`` the first time) is shrunk a
megabyte per short write transaction, so a worker's commit waits at most one
chunk; the write-ahead log is then checkpointed and truncated. PostgreSQL: a
plain ``VACUUM (ANALYZE)``, which blocks nobody.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Iterable

import peewee
from peewee import fn

from ..config.errors import UsageError
from .models import Run, RunResume, Step, Task
from .retry import store_call
from .search.index import unindex_runs
from .status import RunStatus
from .tables.database import db_now

if TYPE_CHECKING:
    from .handle import StoreHandle

# States a person may prune. Queued and running runs are waiting for or being driven by a worker; a cancelled
# run is final (a run whose cancel is only asked is still running, and stays).
PRUNABLE = (RunStatus.DONE, RunStatus.FAILED, RunStatus.BUDGET, RunStatus.CANCELLED)
DEFAULT_PRUNE = (RunStatus.DONE,)
_CHUNK = 200
# The tables whose bytes a vacuum reports and (PostgreSQL) analyzes.
_TABLES = (Run, Step, Task, RunResume)


def parse_statuses(text: str) -> tuple[RunStatus, ...]:
    """``done,failed`` -> statuses; a state that is never pruned is refused with the reason."""
    chosen: list[RunStatus] = []
    for word in filter(None, (w.strip() for w in text.split(","))):
        try:
            status = RunStatus.parse(word)
        except ValueError as exc:
            raise UsageError(f"--status: {exc}") from None
        if status not in PRUNABLE:
            raise UsageError(f"{status} runs are never pruned (prunable: {', '.join(s.value for s in PRUNABLE)})")
        if status not in chosen:
            chosen.append(status)
    if not chosen:
        raise UsageError("--status names no state")
    return tuple(chosen)


@dataclass(frozen=True)
class PruneCandidate:
    id: str
    status: str
    updated_at: str
    step_count: int
    steps: int
    tasks: int
    row_bytes: int  # the stored text of the run and its steps, in bytes


@dataclass
class PruneReport:
    removed: list[PruneCandidate] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # selected, then resumed or changed: kept
    steps: int = 0
    resumes: int = 0
    tasks_unlinked: int = 0
    freed_bytes: int | None = None  # SQLite: pages the delete put on the free list, in bytes

    @property
    def row_bytes(self) -> int:
        return sum(c.row_bytes for c in self.removed)


def _octets(store: "StoreHandle", column: peewee.Field):
    return store.dialect.octet_length(column)


def _chunks(items: list, size: int = _CHUNK) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


@store_call
def prunable_runs(store: "StoreHandle", *, older_than: timedelta, statuses: Iterable[RunStatus] = DEFAULT_PRUNE,
                  run_ids: Iterable[str] | None = None) -> list[PruneCandidate]:
    """Runs in ``statuses`` whose last change is older than ``older_than``, oldest first; ``run_ids``: of
    these runs only (the dashboard removes one run through the same rules)."""
    wanted = [RunStatus(s).value for s in statuses]
    if any(RunStatus(s) not in PRUNABLE for s in wanted):
        raise UsageError(f"only {', '.join(s.value for s in PRUNABLE)} runs can be pruned")
    cutoff = db_now(store, -older_than.total_seconds())  # the clock updated_at was stamped with
    text = (_octets(store, Run.user_msg) + fn.COALESCE(_octets(store, Run.final_text), 0)
            + fn.COALESCE(_octets(store, Run.error), 0))
    query = (Run.select(Run.id, Run.status, Run.updated_at, Run.step_count, text.alias("text_bytes"))
             .where(Run.status.in_(wanted), Run.updated_at < cutoff))
    if run_ids is not None:
        query = query.where(Run.id.in_(list(run_ids)))
    runs = list(query.order_by(Run.updated_at, Run.id).dicts())
    steps: dict[str, tuple[int, int]] = {}
    tasks: dict[str, int] = {}
    for chunk in _chunks([r["id"] for r in runs]):
        size = _octets(store, Step.assistant) + fn.COALESCE(_octets(store, Step.tool_results), 0)
        for run_id, count, total in (Step.select(Step.run, fn.COUNT(Step.n), fn.SUM(size))
                                     .where(Step.run.in_(chunk)).group_by(Step.run).tuples()):
            steps[run_id] = (count, int(total or 0))
        for run_id, count in (Task.select(Task.run, fn.COUNT(Task.id)).where(Task.run.in_(chunk))
                              .group_by(Task.run).tuples()):
            tasks[run_id] = count
    return [PruneCandidate(id=r["id"], status=r["status"], updated_at=r["updated_at"], step_count=r["step_count"],
                           steps=steps.get(r["id"], (0, 0))[0], tasks=tasks.get(r["id"], 0),
                           row_bytes=int(r["text_bytes"] or 0) + steps.get(r["id"], (0, 0))[1])
            for r in runs]


@store_call(cut_stalls=False)  # may rightly run long on a healthy server
def prune(store: "StoreHandle", candidates: list[PruneCandidate]) -> PruneReport:
    """Remove the candidates that are still exactly as selected, in one transaction."""
    report = PruneReport()
    free_before = _free_bytes(store)
    with store.write_transaction():
        for chunk in _chunks(candidates):
            seen = {c.id: c for c in chunk}
            now = Run.select(Run.id, Run.status, Run.updated_at, Run.step_count).where(Run.id.in_(list(seen)))
            now = store.dialect.locked_until_commit(now)  # a claim racing this delete waits, then finds no run
            current = {r.id: (r.status, r.updated_at, r.step_count) for r in now}
            gone = []
            for run_id, candidate in seen.items():
                if current.get(run_id) == (candidate.status, candidate.updated_at, candidate.step_count) \
                        and RunStatus(candidate.status) in PRUNABLE:
                    gone.append(run_id)
                    report.removed.append(candidate)
                else:
                    report.changed.append(run_id)
            if not gone:
                continue
            unindex_runs(store, gone)  # the search index forgets them in the same transaction
            report.steps += Step.delete().where(Step.run.in_(gone)).execute()
            report.resumes += RunResume.delete().where(RunResume.run.in_(gone)).execute()
            report.tasks_unlinked += Task.update(run=None).where(Task.run.in_(gone)).execute()
            Run.delete().where(Run.id.in_(gone)).execute()
    free_after = _free_bytes(store)
    if free_before is not None and free_after is not None:
        report.freed_bytes = max(free_after - free_before, 0)
    return report


# -- sizes and vacuum --------------------------------------------------------


def _free_bytes(store: "StoreHandle") -> int | None:
    return store.dialect.free_bytes(store.db)


@dataclass
class DatabaseSize:
    total: int  # bytes on disk: the file and its -wal (SQLite), the tables with indexes and TOAST (PostgreSQL)
    free: int | None  # SQLite: bytes of free pages inside the file


@store_call
def database_size(store: "StoreHandle") -> DatabaseSize:
    total = store.dialect.database_bytes(store.db, [m._meta.table_name for m in _TABLES])
    return DatabaseSize(total=total, free=_free_bytes(store))


@dataclass
class VacuumReport:
    before: DatabaseSize
    after: DatabaseSize
    seconds: float
    converted: bool = False  # SQLite: this run switched the file to incremental auto-vacuum (one full VACUUM)
    wal_truncated: bool = True  # False: a reader held the log; the file shrinks at a later checkpoint
    shrinks_files: bool = True  # False: the free space stays in the tables and is reused by new rows (PostgreSQL)


def vacuum(store: "StoreHandle") -> VacuumReport:
    """Give free space back to the disk, safe while other processes read and write (module docstring)."""
    started = time.monotonic()
    before = database_size(store)
    converted, truncated = store.dialect.vacuum(store, [m._meta.table_name for m in _TABLES])
    return VacuumReport(before=before, after=database_size(store), seconds=time.monotonic() - started,
                        converted=converted, wal_truncated=truncated,
                        shrinks_files=store.dialect.vacuum_shrinks_files)
