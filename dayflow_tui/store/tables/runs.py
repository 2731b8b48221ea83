"""Runs: create, read, list, finish, and the attempts a run has used."""

from __future__ import annotations

import hashlib
import json
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Iterable

import peewee
from peewee import fn

from ...config.errors import RunBusy, RunNotFound
from ..leases import Lease, forget_token, new_token, note_cancel, owner_alive, owner_values, with_clock
from ..models import Run
from ..retry import attempt_number, store_call
from ..search.index import index_run_text
from ..status import RESUMABLE, RunStatus
from .database import db_now

if TYPE_CHECKING:
    from ..handle import StoreHandle


def _names(tools: Iterable[str] | None) -> str | None:
    """The ``approval_tools`` column: a JSON list of tool names, or NULL for none."""
    names = sorted(set(tools or ()))
    return json.dumps(names) if names else None


AGENT_COLUMNS = ("agent", "agent_ref", "agent_fingerprint", "agent_shape")


def _agent_values(agent: dict[str, Any] | None) -> dict[str, Any]:
    """The run's agent columns (the built-in brief when none is named)."""
    values = {"agent": "brief"}
    values.update({k: v for k, v in (agent or {}).items() if k in AGENT_COLUMNS + ("title",)})
    if values.get("title") is not None:
        values["title"] = clean_title(values["title"])
    return values


def approval_tools(run: Run) -> frozenset[str]:
    """The tools whose calls wait for a person in this run."""
    try:
        names = json.loads(run.approval_tools) if run.approval_tools else []
    except (TypeError, ValueError):
        names = []
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()


def create_run(store: StoreHandle, user_msg: str, *, model: str, budget_tokens: int | None = None,
               max_steps: int = 12, compact_at: int | None = None, run_id: str | None = None,
               status: str = RunStatus.QUEUED, budget_usd: Decimal | None = None,
               approval_tools: Iterable[str] | None = None, agent: dict[str, Any] | None = None,
               priority: int = 0) -> Run:
    """A new run. ``status="queued"`` waits for a worker; use ``create_claimed_run`` to drive it here."""
    run_id = run_id or uuid.uuid4().hex[:12]  # fixed before any try: a retried insert is the same run
    insert_run(store, dict(id=run_id, user_msg=user_msg, status=RunStatus(status).value, model=model,
                           budget_tokens=budget_tokens, max_steps=max_steps, compact_at=compact_at,
                           budget_usd=budget_usd, approval_tools=_names(approval_tools), priority=priority,
                           **_agent_values(agent)))
    return get_run(store, run_id)


def create_claimed_run(store: StoreHandle, user_msg: str, *, model: str, budget_tokens: int | None = None,
                       max_steps: int = 12, compact_at: int | None = None,
                       run_id: str | None = None, budget_usd: Decimal | None = None,
                       approval_tools: Iterable[str] | None = None,
                       agent: dict[str, Any] | None = None, priority: int = 0) -> tuple[Run, Lease]:
    """A new run already leased to this process (no window for a worker to take it)."""
    token = new_token()
    run_id = run_id or uuid.uuid4().hex[:12]
    try:
        insert_run(store, dict(id=run_id, user_msg=user_msg, status=RunStatus.RUNNING.value, model=model,
                               budget_tokens=budget_tokens, max_steps=max_steps, compact_at=compact_at,
                               attempts=1, budget_usd=budget_usd, approval_tools=_names(approval_tools),
                               priority=priority, **_agent_values(agent)), token=token)
    except BaseException:
        forget_token(token)
        raise
    return get_run(store, run_id), Lease(store, run_id, token)


def child_run_id(parent_id: str, call_id: str) -> str:
    """The id of the run a parent's call starts: fixed by the call, so it is made once whatever crashes."""
    return "c" + hashlib.sha256(f"{parent_id}\x00{call_id}".encode()).hexdigest()[:11]


def create_child_run(store: StoreHandle, parent_id: str, call_id: str, user_msg: str, *, model: str,
                     max_steps: int = 12, budget_usd: Decimal | None = None,
                     agent: dict[str, Any] | None = None) -> tuple[Run, Lease | None]:
    """The run of a subagent for ``parent_id``'s call ``call_id``: made now and leased here, or (None for the
    lease) the one an earlier attempt made, to be resumed or read. Never two for one call."""
    run_id = child_run_id(parent_id, call_id)
    existing = Run.get_or_none(Run.id == run_id)
    if existing is not None:
        return existing, None
    token = new_token()
    try:
        insert_run(store, dict(id=run_id, user_msg=user_msg, status=RunStatus.RUNNING.value, model=model,
                               max_steps=max_steps, attempts=1, budget_usd=budget_usd, parent_id=parent_id,
                               parent_call_id=call_id, **_agent_values(agent)), token=token)
    except peewee.IntegrityError:
        forget_token(token)
        return get_run(store, run_id), None  # made by a racing attempt a moment ago
    except BaseException:
        forget_token(token)
        raise
    return get_run(store, run_id), Lease(store, run_id, token)


@store_call
def insert_run(store: StoreHandle, values: dict[str, Any], *, token: str | None = None) -> None:
    """Insert a run once: a retry whose earlier COMMIT landed (only the answer was lost) finds it there."""
    if attempt_number() and Run.get_or_none(Run.id == values["id"]) is not None:
        return
    now = store.dialect.now()
    with store.write_transaction():
        owner = owner_values(store, token) if token is not None else {"updated_at": now}
        Run.insert(created_at=owner["updated_at"], **values, **owner).execute()
        index_run_text(store, values["id"], task=values["user_msg"])  # searchable from its first commit


@store_call
def record_agent_change(store: StoreHandle, run_id: str, values: dict[str, Any], lease: Lease) -> None:
    """A person let the run go on with its agent's new definition: the run records the new one."""
    with store.write_transaction():
        set_run(store, run_id, lease, **{k: v for k, v in values.items() if k in AGENT_COLUMNS})


@store_call
def get_run(store: StoreHandle, run_id: str) -> Run:
    """The run with this id, or the one run whose id starts with it (4 characters or more)."""
    run = with_clock(store, Run.select()).where(Run.id == run_id).first()
    if run is None:
        matches = (list(with_clock(store, Run.select()).where(Run.id.startswith(run_id)).limit(2))
                   if len(run_id) >= 4 else [])
        if len(matches) == 1:
            return matches[0]
        more = " (the prefix names more than one run)" if len(matches) > 1 else ""
        raise RunNotFound(f"no run with id {run_id!r} in {store.label}{more}")
    return run


@store_call
def subagents_of(store: StoreHandle, run_ids: list[str]) -> dict[str, list[Run]]:
    """Each of these runs' subagent runs (started by one of its tool calls), oldest first; forks left out."""
    found: dict[str, list[Run]] = {}
    ids = list(dict.fromkeys(run_ids))
    for start in range(0, len(ids), SUBAGENT_BATCH):  # a long IN list in chunks (SQLite's variable limit)
        chunk = ids[start:start + SUBAGENT_BATCH]
        query = (with_clock(store, Run.select()).where(Run.parent_id.in_(chunk) & Run.parent_call_id.is_null(False))
                 .order_by(Run.created_at, Run.id))
        for run in query:
            found.setdefault(run.parent_id, []).append(run)
    return found


SUBAGENT_BATCH = 500


def runs_below(store: StoreHandle, run_id: str) -> list[Run]:
    """Every subagent run under ``run_id`` (children, their children, ...), a level at a time, nearest first:
    one query per level of the tree."""
    below, frontier = [], [run_id]
    while frontier:
        level = [child for found in subagents_of(store, frontier).values() for child in found]
        below += level
        frontier = [child.id for child in level]
    return below


@store_call
def latest_unfinished(store: StoreHandle) -> Run | None:
    """The newest run that can be resumed now (not finished, not held by a live process)."""
    candidates = (with_clock(store, Run.select()).where(Run.status.in_([s.value for s in RESUMABLE]),
                                                        Run.source == "dayflow")  # never an imported run
                  .order_by(Run.created_at.desc(), Run.id.desc()).limit(100))
    return next((run for run in candidates if not owner_alive(run)), None)


def filter_runs(query, status: Iterable[str] | None, search: str | None):
    if status:
        words = {RunStatus(s) for s in status}
        stored = {s.value for s in words if s is not RunStatus.INTERRUPTED}
        if RunStatus.INTERRUPTED in words:
            stored.add(RunStatus.RUNNING.value)  # refined by owner liveness, which SQL cannot see
        query = query.where(Run.status.in_(sorted(stored)))
    if search:
        query = query.where(Run.id.startswith(search) | Run.user_msg.contains(search) | Run.title.contains(search)
                            | Run.final_text.contains(search) | Run.error.contains(search))
    return query


@store_call
def list_runs(store: StoreHandle, *, limit: int = 50, before: tuple[str, str] | None = None,
              after: tuple[str, str] | None = None, oldest_first: bool = False, skip: int = 0,
              status: Iterable[str] | None = None, search: str | None = None,
              not_status: Iterable[str] | None = None, source: str | None = None) -> list[Run]:
    """Runs newest first, a window at a time (keyset on ``(created_at, id)``).

    ``before`` a key: the page below it. ``after`` a key: the page above it, nearest first (oldest
    first), so scrolling up from the end of the list is a keyset read too. ``oldest_first``: the
    end of the list, read backwards (End/G on a million runs reads one page, not the million).
    ``skip`` is an OFFSET, for a jump into the middle only.
    """
    # The answer is left out (it can be long) but for its head, which a title is made from (views.titles).
    columns = [f for f in Run._meta.sorted_fields if f.name != "final_text"]
    query = with_clock(store, Run.select(*columns, fn.SUBSTR(Run.final_text, 1, ANSWER_HEAD).alias("final_head")))
    if before is not None:
        created, rid = before
        query = query.where((Run.created_at < created) | ((Run.created_at == created) & (Run.id < rid)))
    if after is not None:
        created, rid = after
        query = query.where((Run.created_at > created) | ((Run.created_at == created) & (Run.id > rid)))
    query = filter_runs(query, status, search)
    if not_status:
        query = query.where(Run.status.not_in(sorted(set(not_status))))
    if source is not None:
        query = query.where(Run.source == source)
    if after is not None or oldest_first:
        query = query.order_by(Run.created_at.asc(), Run.id.asc())
    else:
        query = query.order_by(Run.created_at.desc(), Run.id.desc())
    return list(query.limit(limit).offset(skip or None))


@store_call
def count_runs(store: StoreHandle, *, status: Iterable[str] | None = None, search: str | None = None) -> int:
    """How many runs ``list_runs`` would page through with the same filters."""
    return filter_runs(Run.select(), status, search).count()


@store_call
def count_by_status(store: StoreHandle) -> dict[str, int]:
    """Runs per stored status: the dashboard header's counts.

    The rare statuses are counted by a range of the status index each; ``done``, most of a large
    database, is the total less those (one COUNT, which SQLite answers from the smallest index).
    A GROUP BY walked every entry: 230 ms at a million runs, against ~25 ms this way. A status no
    Dayflow wrote (a damaged row) counts as done here; ``dayflow runs`` shows it as it is.
    """
    counts = {}
    for status in RunStatus:
        if status in (RunStatus.INTERRUPTED, RunStatus.DONE):
            continue
        n = Run.select().where(Run.status == status.value).count()
        if n:
            counts[status.value] = n
    done = Run.select().count() - sum(counts.values())
    if done:
        counts[RunStatus.DONE.value] = done
    return counts


@store_call
def runs_updated_since(store: StoreHandle, since: str) -> list[Run]:
    """Runs touched after ``since`` (an ``updated_at`` value): the rows a live view must redraw."""
    return list(with_clock(store, Run.select()).where(Run.updated_at > since).order_by(Run.updated_at))


@store_call
def finish_run(store: StoreHandle, run_id: str, status: str, *, final_text: str | None = None,
               error: str | None = None, lease: Lease | None = None) -> None:
    with store.write_transaction():
        set_run(store, run_id, lease, status=RunStatus(status).value, final_text=final_text, error=error)


@store_call
def mark_running(store: StoreHandle, run_id: str, lease: Lease) -> None:
    """The driver's attempt has started: the run reads ``running`` and its old error goes."""
    with store.write_transaction():
        set_run(store, run_id, lease, status=RunStatus.RUNNING.value, error=None)


@store_call
def record_failed_attempt(store: StoreHandle, run_id: str, lease: Lease, reason: str, *, max_attempts: int,
                          backoff_s: float) -> bool:
    """An attempt ended without a new step: note why, and back off or give up.

    Returns True when the run has now used ``max_attempts`` attempts in a
    row and is set ``failed`` ("gave up after N attempts: reason"); else
    the run waits ``backoff_s`` before any worker takes it again.
    """
    run = get_run(store, run_id)
    with store.write_transaction():
        if run.attempts >= max_attempts:
            set_run(store, run_id, lease, status=RunStatus.FAILED.value,
                    error=f"gave up after {run.attempts} attempts: {reason}", not_before=None)
            return True
        set_run(store, run_id, lease, error=reason, not_before=db_now(store, plus_seconds=backoff_s))
        return False


@store_call
def release_backing_off(store: StoreHandle, lease: Lease, reason: str, *, wait_s: float) -> None:
    """The model API pushed back (429, 529): give the run up ``queued`` until ``wait_s`` has passed.

    Not a failed attempt: the count the claim added is taken back, so back-pressure never brings
    a run nearer to ``failed``. ``reason`` stays in ``error`` (``dayflow runs`` shows why it waits)
    until the next attempt starts. One write with the release: no claimant can see the run
    queued and still leased.
    """
    lease.stop_heartbeat()
    forget_token(lease.token)
    run = get_run(store, lease.run_id)
    with store.write_transaction():
        set_run(store, lease.run_id, lease, status=RunStatus.QUEUED.value, error=reason,
                not_before=db_now(store, plus_seconds=wait_s), attempts=max((run.attempts or 1) - 1, 0),
                owner_host=None, owner_pid=None, owner_started=None, lease_token=None,
                heartbeat_at=None)


@store_call
def next_retry_at(store: StoreHandle) -> float | None:
    """Seconds until the earliest run backing off after a failed attempt may be taken (None: none waits)."""
    from datetime import datetime

    now = db_now(store)
    waiting = (Run.select(Run.not_before)
               .where(Run.status.in_([RunStatus.QUEUED.value, RunStatus.RUNNING.value]),
                      Run.not_before > now)
               .order_by(Run.not_before).first())
    if waiting is None:
        return None

    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return max((parse(waiting.not_before) - parse(now)).total_seconds(), 0.0)


ANSWER_HEAD = 400  # characters of a run's answer read with it in a list: enough for a title's first line
TITLE_MAX = 200  # characters of a title kept (a model may write a paragraph)


def clean_title(title: str) -> str | None:
    """A title as kept: one line, trimmed, at most ``TITLE_MAX`` characters (None: nothing left)."""
    text = " ".join(str(title).split())[:TITLE_MAX].strip()
    return text or None


@store_call
def set_title(store: StoreHandle, run_id: str, title: str) -> bool:
    """Give the run ``title``; True when it changed. Setting the title it has is a no-op (not even
    ``updated_at`` moves), so a ``set_title`` call run again after a crash before its result was kept
    leaves the run as the first one did."""
    value = clean_title(title)
    run = Run.get_or_none(Run.id == run_id)
    if run is None:
        raise RunNotFound(f"no run with id {run_id!r} in {store.label}")
    if run.title == value:  # read before any write transaction: on PostgreSQL each one moves the marker
        return False
    with store.write_transaction():
        differs = Run.title.is_null() if value is None else (Run.title.is_null() | (Run.title != value))
        return Run.update(title=value, updated_at=store.dialect.now()).where(Run.id == run_id, differs).execute() == 1


def set_run(store: StoreHandle, run_id: str, lease: Lease | None, **values: Any) -> None:
    values["updated_at"] = store.dialect.now()
    query = Run.update(**values).where(Run.id == run_id)
    if lease is not None:
        query = query.where(Run.lease_token == lease.token)
    if query.execute() != 1:
        raise RunBusy(f"run {run_id} was taken over by another process")
    if lease is not None:
        note_cancel(store, lease)  # every write under a lease tells its driver of a cancel asked meanwhile
    # A final text or an error a run is given is searchable from this commit on (search.py).
    index_run_text(store, run_id, final_text=values.get("final_text"), error=values.get("error"))


@store_call
def update_limits(store: StoreHandle, run_id: str, *, budget_tokens: int | None = None, max_steps: int | None = None,
                  compact_at: int | None = None, lease: Lease | None = None,
                  budget_usd: Decimal | None = None) -> None:
    """Replace the limits given; ``None`` leaves one as it is, ``compact_at=0`` turns compaction off."""
    values: dict[str, Any] = {}
    if budget_usd is not None:
        values["budget_usd"] = budget_usd
    if budget_tokens is not None:
        values["budget_tokens"] = budget_tokens
    if max_steps is not None:
        values["max_steps"] = max_steps
    if compact_at is not None:
        values["compact_at"] = compact_at or None
    with store.write_transaction():
        set_run(store, run_id, lease, **values)
