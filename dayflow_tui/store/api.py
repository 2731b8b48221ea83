"""The store: ``Store``, one explicit class of every verb the agent and the front ends call, and ``open_store``.

Each verb is a short method that hands the work to a plain function in
``tables/`` (runs, steps, tasks, claims, approvals, forks, spend, resumes,
database) or ``search/``, passing the store itself. The reconnect policy
(``retry.store_call``) sits on those functions, exactly where a call is one
unit of retry: a verb marked "commit window" below keeps trying for the
``commit_retry_s`` setting (giving up there throws a paid reply away); the
others for ``retry.RETRY_FOR_S`` (capped by ``retry_for``); a verb whose work
is a claim or a decision fixes its token before the first try, so a retry
whose earlier COMMIT landed finds its own write. Whole-database jobs
(``retention``: prune, vacuum; ``transfer``: export, import) are functions
taking the store too. Nothing in the store imports this module back.
"""

from __future__ import annotations

import contextlib
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import peewee

from ..config import settings
from ..config.errors import StoreError
from ..search.query import Query
from .dialect import Dialect, dialect_for
from .dialect.base import ChangeFeed
from .leases import STALE_AFTER_S, Lease, heartbeat
from .models import Approval, Run, RunResume, Step, Task, bound_to, database_proxy
from .retry import RETRY_FOR_S, backoff_delays, describe, is_driver_error, is_transient, patience_left
from .schema import SCHEMA_VERSION, migrate
from .search.backfill import OnNote, OnProgress
from .search.pending import FLUSH_EVERY, index_pending_steps
from .search.query import SearchResult
from .search.verbs import rebuild_search_index, run_search
from .tables import (approvals, cancels, claims, database, fleet, forks, imported, resumes, runs, spend, steps, tasks,
                     workers)
from .tables.approvals import CallToAsk
from .tables.cancels import CancelOutcome
from .tables.fleet import FleetStats
from .tables.forks import ForkPlan
from .tables.imported import FileState, ImportedRun
from .tables.spend import TokenGroup
from .tables.steps import ReplayStep, StepRecord
from .tables.workers import WorkerRow


class Store:
    """One open Dayflow database. Each store owns its database handle; two in one process stay apart."""

    def __init__(self, dialect: Dialect):
        self.dialect = dialect
        self.label = dialect.label
        self.db: peewee.Database = dialect.connect()
        # Caps the retry window of every call but the commits of paid work (None: retry.RETRY_FOR_S).
        # The dashboard sets it low: a poll that cannot reconnect at once reports and tries next tick.
        self.retry_for: float | None = None
        # Where a migration reports while ``open_store`` runs it (search.backfill); None: nobody listens.
        self.migration_progress: OnProgress | None = None
        self.migration_note: OnNote | None = None
        # The newest schema this code knows (a claim on a database migrated past it takes nothing).
        self.known_schema = SCHEMA_VERSION
        # Code outside any store method (tests reading rows) falls back to the newest store.
        database_proxy.initialize(self.db)

    # -- the database handle ------------------------------------------------

    def commit_window(self) -> float:
        """How long the commit of a paid reply keeps trying (the commit_retry_s setting, read once per store)."""
        window = self.__dict__.get("_commit_window")
        if window is None:
            window = self.__dict__["_commit_window"] = settings.current().commit_retry_s
        return window

    @property
    def short_label(self) -> str:
        """A title-sized name: the file name, or ``dbname@host`` (never a password)."""
        return self.dialect.short_label

    def close(self) -> None:
        """Close this thread's connection (a new query opens another)."""
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

    @contextlib.contextmanager
    def bound(self) -> Iterator["Store"]:
        """Route direct model queries (``Run.select()``) in this block to this store's database."""
        with bound_to(self.db):
            yield self

    def write_transaction(self) -> contextlib.AbstractContextManager:
        """The dialect's write transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: row locks, the change counter)."""
        return self.dialect.write_transaction(self.db)

    def verify_same_database(self) -> None:
        """Raise ``StoreError`` before a paid call whose reply would land where nobody looks (SQLite: a moved file)."""
        self.dialect.verify_same_database(self.db)

    def change_marker(self) -> tuple:
        """Cheap value that changes whenever another connection commits (``tables.database``)."""
        return database.change_marker(self)

    def change_feed(self, on_change: Callable[[], None] | None = None) -> ChangeFeed:
        """Word of other connections' commits as they land, where the database pushes it (PostgreSQL: LISTEN on a
        connection and thread of the feed's own; ``on_change`` runs on that thread); elsewhere a feed that is
        never ``live``, and the reader polls ``change_marker``. Not started: ``.start()``, then ``.stop()``."""
        return self.dialect.change_feed(on_change)

    def schema_version(self) -> int:
        """The database's schema version as it is now: a newer Dayflow may have migrated it since this opened
        (``SCHEMA_VERSION`` is this code's)."""
        return database.schema_version(self)

    def db_now(self, plus_seconds: float = 0.0) -> str:
        """The database's current time as stored text, ``plus_seconds`` on (``tables.database``)."""
        return database.db_now(self, plus_seconds)

    # -- runs (tables/runs.py) ----------------------------------------------

    def create_run(self, user_msg: str, *, model: str, budget_tokens: int | None = None, max_steps: int = 12,
                   compact_at: int | None = None, run_id: str | None = None, status: str = "queued",
                   budget_usd: Decimal | None = None, approval_tools: Iterable[str] | None = None,
                   agent: dict[str, Any] | None = None, priority: int = 0) -> Run:
        """A new run. ``status="queued"`` waits for a worker (higher ``priority`` first); ``create_claimed_run``
        drives it here."""
        return runs.create_run(self, user_msg, model=model, budget_tokens=budget_tokens, max_steps=max_steps,
                               compact_at=compact_at, run_id=run_id, status=status, budget_usd=budget_usd,
                               approval_tools=approval_tools, agent=agent, priority=priority)

    def create_child_run(self, parent_id: str, call_id: str, user_msg: str, *, model: str, max_steps: int = 12,
                         budget_usd: Decimal | None = None,
                         agent: dict[str, Any] | None = None) -> tuple[Run, Lease | None]:
        """A subagent's run for the parent's call: made and leased here, or the one made before (no lease)."""
        return runs.create_child_run(self, parent_id, call_id, user_msg, model=model, max_steps=max_steps,
                                     budget_usd=budget_usd, agent=agent)

    def create_claimed_run(self, user_msg: str, *, model: str, budget_tokens: int | None = None,
                           max_steps: int = 12, compact_at: int | None = None, run_id: str | None = None,
                           budget_usd: Decimal | None = None, approval_tools: Iterable[str] | None = None,
                           agent: dict[str, Any] | None = None, priority: int = 0) -> tuple[Run, Lease]:
        """A new run already leased to this process (no window for a worker to take it)."""
        return runs.create_claimed_run(self, user_msg, model=model, budget_tokens=budget_tokens,
                                       max_steps=max_steps, compact_at=compact_at, run_id=run_id,
                                       budget_usd=budget_usd, approval_tools=approval_tools, agent=agent,
                                       priority=priority)

    def subagent_runs(self, run_id: str) -> list[Run]:
        """The runs ``run_id``'s calls started (its subagents' runs; its forks are not among them), oldest first."""
        return runs.subagents_of(self, [run_id]).get(run_id, [])

    def runs_below(self, run_id: str) -> list[Run]:
        """Every subagent run under ``run_id``, to any depth, nearest first (one query per level)."""
        return runs.runs_below(self, run_id)

    def get_run(self, run_id: str) -> Run:
        """The run with this id, or the one run whose id starts with it (4 characters or more); else RunNotFound."""
        return runs.get_run(self, run_id)

    def latest_unfinished(self) -> Run | None:
        """The newest run that can be resumed now (not finished, not held by a live process)."""
        return runs.latest_unfinished(self)

    def list_runs(self, *, limit: int = 50, before: tuple[str, str] | None = None,
                  after: tuple[str, str] | None = None, oldest_first: bool = False, skip: int = 0,
                  status: Iterable[str] | None = None, search: str | None = None,
                  not_status: Iterable[str] | None = None, source: str | None = None) -> list[Run]:
        """Runs newest first, a window at a time (keyset on ``(created_at, id)``); see ``tables.runs.list_runs``.
        ``source``: only runs from there (``dayflow``, ``claude-code``)."""
        return runs.list_runs(self, limit=limit, before=before, after=after, oldest_first=oldest_first, skip=skip,
                              status=status, search=search, not_status=not_status, source=source)

    def count_runs(self, *, status: Iterable[str] | None = None, search: str | None = None) -> int:
        """How many runs ``list_runs`` would page through with the same filters."""
        return runs.count_runs(self, status=status, search=search)

    def count_by_status(self) -> dict[str, int]:
        """Runs per stored status: the dashboard header's counts."""
        return runs.count_by_status(self)

    def runs_updated_since(self, since: str) -> list[Run]:
        """Runs touched after ``since`` (an ``updated_at`` value): the rows a live view must redraw."""
        return runs.runs_updated_since(self, since)

    def finish_run(self, run_id: str, status: str, *, final_text: str | None = None, error: str | None = None,
                   lease: Lease | None = None) -> None:
        """Set the run's final status, text and error (under ``lease`` when given: else RunBusy)."""
        runs.finish_run(self, run_id, status, final_text=final_text, error=error, lease=lease)

    def cancel_run(self, run_id: str, *, by: str, reason: str | None = None) -> CancelOutcome:
        """Cancel a run once: at once if nothing drives it, else asked of its driver (``tables.cancels``);
        CancelRefused when it has ended. The subagents' runs under it are cancelled with it."""
        outcome = cancels.cancel_run(self, run_id, by=by, reason=reason)
        cancels.cancel_below(self, outcome.run_id, by=by, reason=reason)
        return outcome

    def set_title(self, run_id: str, title: str) -> bool:
        """Give the run a title (one line, 200 characters at most); False when it had that title already."""
        return runs.set_title(self, run_id, title)

    def mark_running(self, run_id: str, lease: Lease) -> None:
        """The driver's attempt has started: the run reads ``running`` and its old error goes."""
        runs.mark_running(self, run_id, lease)

    def record_agent_change(self, run_id: str, values: dict[str, Any], lease: Lease) -> None:
        """A person let the run go on with its agent's new definition: the run records the new one."""
        runs.record_agent_change(self, run_id, values, lease)

    def record_failed_attempt(self, run_id: str, lease: Lease, reason: str, *, max_attempts: int,
                              backoff_s: float) -> bool:
        """An attempt ended without a new step: back off ``backoff_s``, or (True) give up at ``max_attempts``."""
        return runs.record_failed_attempt(self, run_id, lease, reason, max_attempts=max_attempts,
                                          backoff_s=backoff_s)

    def release_backing_off(self, lease: Lease, reason: str, *, wait_s: float) -> None:
        """The model API pushed back (429, 529): give the run up ``queued`` until ``wait_s`` has passed."""
        runs.release_backing_off(self, lease, reason, wait_s=wait_s)

    def fleet_stats(self) -> FleetStats:
        """Runs by status, the queue's depth and oldest age, runs backing off, the stalest heartbeat held."""
        return fleet.fleet_stats(self)

    def register_worker(self, *, host: str, pid: int, version: str, concurrency: int) -> str:
        """A worker process starts: its row (and stale rows older than a day go); returns its id."""
        return workers.register_worker(self, host=host, pid=pid, version=version, concurrency=concurrency)

    def worker_beat(self, worker_id: str, runs: list[str], runs_done: int) -> None:
        """A worker is alive and holds ``runs``."""
        workers.worker_beat(self, worker_id, runs, runs_done)

    def worker_stopped(self, worker_id: str, runs_done: int) -> None:
        """A worker exits cleanly (one killed just stops beating and reads as stale)."""
        workers.worker_stopped(self, worker_id, runs_done)

    def workers(self) -> list[WorkerRow]:
        """The workers seen in the last day: alive, stale, stopped, with the runs each holds now."""
        return workers.workers(self)

    def next_retry_at(self) -> float | None:
        """Seconds until the earliest run backing off may be taken (None: none waits)."""
        return runs.next_retry_at(self)

    def update_limits(self, run_id: str, *, budget_tokens: int | None = None, max_steps: int | None = None,
                      compact_at: int | None = None, lease: Lease | None = None,
                      budget_usd: Decimal | None = None) -> None:
        """Replace the limits given; ``None`` leaves one as it is, ``compact_at=0`` turns compaction off."""
        runs.update_limits(self, run_id, budget_tokens=budget_tokens, max_steps=max_steps, compact_at=compact_at,
                           lease=lease, budget_usd=budget_usd)

    # -- imported runs (tables/imported.py) ---------------------------------

    def imported_file(self, path: str) -> FileState | None:
        """How far an import has read the session file ``path`` (None: never read)."""
        return imported.imported_file(self, path)

    def append_imported(self, path: str, *, was: FileState | None, run_id: str, size: int, offset: int,
                        mtime_ns: int, done: dict[str, int], runs: list[ImportedRun]) -> dict[str, int]:
        """Append one read of an imported file (new runs, new steps, its position) in one transaction, unless its
        position moved since ``was`` (then nothing: another import wrote it); the new steps are then indexed.
        Steps added per run."""
        added = imported.append_imported(self, path, was=was, run_id=run_id, size=size, offset=offset,
                                         mtime_ns=mtime_ns, done=done, runs=runs)
        for run_id_added in added:
            self.index_pending(run_id_added)
        return added

    # -- steps (tables/steps.py) --------------------------------------------

    def append_step(self, run_id: str, step: StepRecord, *, lease: Lease | None = None,
                    final_status: str | None = None, final_text: str | None = None,
                    final_error: str | None = None) -> None:
        """Commit one paid reply and add its tokens to the run, in one transaction (commit window).

        With ``final_status`` the run is finished in the same transaction. A retry first checks whether
        the earlier try landed (the same blocks under the same lease), so a step is never stored twice.
        """
        steps.append_step(self, run_id, step, lease=lease, final_status=final_status, final_text=final_text,
                          final_error=final_error)
        self._stepped(run_id, ended=final_status is not None)

    def set_tool_results(self, run_id: str, n: int, results: list[dict], *, lease: Lease | None = None) -> None:
        """Commit step ``n``'s tool results once, under the lease (commit window; a landed retry is accepted)."""
        steps.set_tool_results(self, run_id, n, results, lease=lease)
        self._stepped(run_id)

    def _stepped(self, run_id: str, *, ended: bool = False) -> None:
        """After a step commit: the search index is brought level when the run ends, and on the way in a
        long drive (every ``FLUSH_EVERY`` commits), in one short transaction for all of them."""
        count = self.__dict__.get("_commits_unindexed", 0) + 1
        if ended or count >= FLUSH_EVERY:
            count = 0
            self.index_pending(run_id)
        self.__dict__["_commits_unindexed"] = count

    def index_pending(self, run_id: str | None = None) -> int:
        """Index the steps committed but not yet indexed (of ``run_id``, or all); how many. Never raises.

        The index is derived data: a failure here (a lost connection, a busy database, a kill) leaves the
        steps marked, a search reads them from their rows meanwhile, and the next call indexes them.
        """
        try:
            return index_pending_steps(self, run_id)
        except Exception:  # noqa: BLE001 - nothing paid for or promised rides on it; the marks stay
            return 0

    def steps(self, run_id: str, *, from_n: int | None = None, limit: int | None = None) -> list[Step]:
        """The run's steps in order; ``from_n`` keeps steps ``n >= from_n`` (a live view's tail), ``limit`` the first
        that many of them (``dayflow show`` reads a long run a page at a time)."""
        return steps.steps(self, run_id, from_n=from_n, limit=limit)

    def replay_steps(self, run_id: str) -> list[ReplayStep]:
        """Steps with only what a resume reads: the blocks, stop reason and token counts."""
        return steps.replay_steps(self, run_id)

    def step_at(self, run_id: str, n: int) -> Step | None:
        """Step ``n`` of the run, or None."""
        return steps.step_at(self, run_id, n)

    def step_count(self, run_id: str) -> int:
        """How many steps the run has stored."""
        return steps.step_count(self, run_id)

    # -- tasks (tables/tasks.py) --------------------------------------------

    def create_task(self, *, idempotency_key: str, title: str, due: str | None = None, notes: str | None = None,
                    run_id: str | None = None) -> tuple[Task, bool]:
        """Create a task once per key. Returns ``(task, created)``; a repeat returns the existing task."""
        return tasks.create_task(self, idempotency_key=idempotency_key, title=title, due=due, notes=notes,
                                 run_id=run_id)

    def list_tasks(self, *, include_done: bool = False, run_id: str | None = None) -> list[Task]:
        """Tasks in the order made: open ones, or all; one run's with ``run_id``."""
        return tasks.list_tasks(self, include_done=include_done, run_id=run_id)

    def find_tasks(self, *, text: str | None = None, done: bool | None = None, run_prefix: str | None = None,
                   limit: int = 500, before_id: int | None = None) -> tuple[list[Task], int]:
        """Tasks newest first, narrowed, a page at a time by key; and how many match in all."""
        return tasks.find_tasks(self, text=text, done=done, run_prefix=run_prefix, limit=limit,
                                before_id=before_id)

    def task_origins(self, found: Iterable[Task]) -> dict[int, int]:
        """The step that created each task (by its idempotency key in the step's tool calls)."""
        return tasks.task_origins(self, found)

    # -- leases and claims (leases.py, tables/claims.py) --------------------

    def claim(self, run_id: str, *, stale_after: float = STALE_AFTER_S, fresh_attempts: bool = False) -> Lease:
        """Take the right to drive ``run_id`` (one compare-and-swap); RunBusy if a live owner holds it."""
        return claims.claim(self, run_id, stale_after=stale_after, fresh_attempts=fresh_attempts)

    def claim_next(self, *, stale_after: float = STALE_AFTER_S) -> Lease | None:
        """Claim one run for a worker: an interrupted run first, else the oldest queued one; None: nothing."""
        return claims.claim_next(self, stale_after=stale_after)

    def heartbeat(self, lease: Lease) -> bool:
        """Refresh the lease; False when another process has taken it over."""
        return heartbeat(self, lease)

    def release(self, lease: Lease) -> None:
        """Give the run up (its status stays as the driver left it); then bring its search index level."""
        claims.release(self, lease)
        self.index_pending(lease.run_id)

    # -- approvals and the per-call journal (tables/approvals.py) ----------

    def wait_for_approval(self, run_id: str, n: int, calls: list[CallToAsk], lease: Lease) -> None:
        """Record the step's calls and stop the run ``waiting``, giving its lease up (commit window)."""
        approvals.wait_for_approval(self, run_id, n, calls, lease)
        self.index_pending(run_id)

    def approvals(self, run_id: str, n: int | None = None) -> list[Approval]:
        """The run's recorded calls (one step's with ``n``), in the order the model made them."""
        return approvals.approvals(self, run_id, n)

    def pending_approvals(self, limit: int = 500) -> list[tuple[Approval, Run]]:
        """Every call waiting for a decision, oldest first, with its run."""
        return approvals.pending_approvals(self, limit)

    def waiting_count(self) -> int:
        """How many runs wait for a person's decision."""
        return approvals.waiting_count(self)

    def decide(self, run_id: str, tool_use_id: str | None, *, approve: bool, by: str, host: str,
               reason: str | None = None, edited_input: Any = None, expect_hash: str | None = None) -> Approval:
        """Commit one person's decision on one waiting call; refuse any second decision (DecisionRefused)."""
        return approvals.decide(self, run_id, tool_use_id, approve=approve, by=by, host=host, reason=reason,
                                edited_input=edited_input, expect_hash=expect_hash)

    def start_call(self, run_id: str, n: int, block: dict, lease: Lease) -> None:
        """Mark a call that must never run twice as started, before it runs (commit window)."""
        approvals.start_call(self, run_id, n, block, lease)

    def keep_call_result(self, run_id: str, n: int, block: dict, result: dict, lease: Lease) -> None:
        """Commit one call's result as it completes: after a crash it is reused (commit window)."""
        approvals.keep_call_result(self, run_id, n, block, result, lease)

    def answer_call(self, run_id: str, tool_use_id: str, result: dict, lease: Lease) -> None:
        """Keep an approved (or denied) call's answer, so a crash after it never runs the call again."""
        approvals.answer_call(self, run_id, tool_use_id, result, lease)

    # -- forks and resumes (tables/forks.py, tables/resumes.py) -------------

    def fork_run(self, parent_id: str, plan: ForkPlan, *, check: Callable[[Run, list[Step]], None] | None = None,
                 run_id: str | None = None) -> Run:
        """A new run holding the parent's steps 1..K (changed as planned), status ``forked``."""
        return forks.fork_run(self, parent_id, plan, check=check, run_id=run_id)

    def forks_of(self, run_ids: list[str]) -> dict[str, list[Run]]:
        """Each of these runs' forks, oldest first."""
        return forks.forks_of(self, run_ids)

    def subagents_of(self, run_ids: list[str]) -> dict[str, list[Run]]:
        """Each of these runs' subagent runs (``parent_call_id`` set), oldest first; forks are not among them."""
        return runs.subagents_of(self, run_ids)

    def run_resumes(self, run_id: str) -> list[RunResume]:
        """Where each resume of the run began, oldest first."""
        return resumes.run_resumes(self, run_id)

    # -- spend (tables/spend.py) --------------------------------------------

    def token_groups(self, run_ids: Iterable[str] | None = None, *, since: str | None = None) -> list[TokenGroup]:
        """Steps' tokens summed per (run, model, UTC day): what costs are computed from."""
        return spend.token_groups(self, run_ids, since=since)

    def step_tokens(self, run_id: str) -> list[Step]:
        """Each step's tokens, model and time, nothing else (pricing calls one by one)."""
        return spend.step_tokens(self, run_id)

    def run_agents(self, run_ids: Iterable[str]) -> dict[str, str]:
        """The agent of each run, where runs record one."""
        return spend.run_agents(self, run_ids)

    # -- search (search/verbs.py) -------------------------------------------

    def search(self, query: Query, *, limit: int = 50, since: str | None = None, agent: str | None = None,
               before: int | None = None) -> SearchResult:
        """Hits for a parsed query, newest first (no stall cut: may rightly run long)."""
        return run_search(self, query, limit=limit, since=since, agent=agent, before=before)

    def rebuild_search_index(self, on_progress: OnProgress | None = None) -> int:
        """Build the search index again from every stored run; ``on_progress(done, total)`` after each step."""
        return rebuild_search_index(self, on_progress)


def _checked_schema(store: Store, *, create: bool, upgrade: bool) -> None:
    """The schema check (and first migration) under the same reconnect policy as every store call."""
    deadline = time.monotonic() + patience_left(RETRY_FOR_S)
    delays = backoff_delays()
    while True:
        try:
            with bound_to(store.db):
                migrate(store, create=create, upgrade=upgrade)
            return
        except Exception as exc:
            if not (is_driver_error(exc) and is_transient(exc) and time.monotonic() < deadline):
                raise
            store.close_thread_connection()
            time.sleep(min(next(delays), max(deadline - time.monotonic(), 0)))


def default_db_path() -> Path:
    """The default file, ``dayflow.db`` in the user's data directory (``~/.local/share/dayflow/``)."""
    return settings.current().default_db_path


def open_store(target: str | os.PathLike | None = None, *, create: bool = True, upgrade: bool = True,
               on_progress: OnProgress | None = None, on_note: OnNote | None = None) -> Store:
    """Open the database at ``target``: a file path, ``sqlite:///PATH`` or ``postgresql://USER@HOST:PORT/DBNAME``.

    None means the ``db`` setting (``$DAYFLOW_DB``), else the default file.
    ``create=False`` refuses a missing file (or a database without Dayflow's
    tables) instead of making an empty one; ``upgrade=False`` (a command that
    only reads) refuses an older schema instead of migrating it.
    ``on_progress(done, total)``: steps indexed so far by a migration that
    builds the search index (the one long step); ``on_note(text)``: a line for
    a person (the index cannot be built here). The store prints nothing.
    """
    default = target is None and not settings.current().db  # only the default file's directory is made
    if target is None:
        target = settings.current().db or default_db_path()
    dialect = dialect_for(target)
    dialect.prepare(create=create, make_parent=default)
    store = Store(dialect)
    store.migration_progress, store.migration_note = on_progress, on_note
    try:
        _checked_schema(store, create=create, upgrade=upgrade)
    except StoreError:
        store.close()
        raise
    except Exception as exc:
        if not is_driver_error(exc):
            raise
        store.close()
        raise StoreError(f"{dialect.label}: {describe(exc)}") from exc
    finally:
        store.migration_progress = store.migration_note = None
    return store
