"""Approvals: a tool call that waits for a person, decided exactly once, answered exactly once.

A run whose step calls a tool that needs approval stops ``waiting``: the
calls are recorded (``approvals`` rows), the lease is given up and no model
call is made until every waiting call has a decision. A decision is one
conditional UPDATE of a ``pending`` row, bound to the call's id and the hash
of its arguments, so two people (or two processes) deciding at once cannot
both win. The last decision hands the run back to the queue; whoever drives
it next answers the calls from the rows, so an answered call never runs
again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...config.errors import DecisionRefused, UsageError
from ...safe_text import printable
from ...testhook import pause_point
from ..leases import Lease, cancel_words, forget_token, new_token
from ..models import Approval, Run
from . import blobs
from ..retry import attempt_number, store_call
from ..status import RunStatus
from .imported import refuse_if_imported
from .runs import set_run

if TYPE_CHECKING:
    from ..handle import StoreHandle

PENDING, APPROVED, DENIED, AUTO = "pending", "approved", "denied", "auto"


MIN_HASH_PREFIX = 8  # hex digits: an empty or short prefix would match (nearly) any arguments


def hash_prefix(text: str) -> str:
    """A ``--hash`` value: at least ``MIN_HASH_PREFIX`` hex digits of an argument hash, lower-cased.

    An empty prefix matched every hash, so ``--hash ""`` approved whatever the arguments had become.
    """
    value = text.strip().lower()
    if len(value) < MIN_HASH_PREFIX or len(value) > 64 or any(c not in "0123456789abcdef" for c in value):
        raise UsageError(f"--hash needs {MIN_HASH_PREFIX} to 64 hex digits of the arguments' hash, as "
                         f"`dayflow pending` shows it (got {len(value)} character(s))")
    return value


def canonical_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def input_hash(value: Any) -> str:
    """What a decision is bound to: the sha256 of the arguments' canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class CallToAsk:
    """A tool call of a waiting step, as it goes into ``approvals``."""

    tool_use_id: str
    name: str
    input: Any
    waits: bool  # True: a person decides; False: it ran, ``result`` is its answer
    result: dict | None = None


def _commit_window(store: "StoreHandle") -> float:
    return store.commit_window()


@store_call(retry_for=_commit_window)
def wait_for_approval(store: StoreHandle, run_id: str, n: int, calls: list[CallToAsk], lease: Lease) -> None:
    """Record the step's calls and stop the run ``waiting``, giving its lease up, in one transaction."""
    now = store.dialect.now()
    rows = [dict(run=run_id, n=n, tool_use_id=c.tool_use_id, tool_name=c.name,
                 input=canonical_json(c.input), input_hash=input_hash(c.input),
                 state=PENDING if c.waits else AUTO, requested_at=now,
                 result=None if c.result is None else json.dumps(c.result, ensure_ascii=False),
                 result_at=None if c.result is None else now) for c in calls]
    with store.write_transaction():
        if attempt_number() and Approval.select().where(Approval.run == run_id, Approval.n == n).exists():
            landed = Run.get_by_id(run_id)
            if landed.status == RunStatus.WAITING.value:
                return  # the earlier try committed; only its answer was lost
        set_run(store, run_id, lease, status=RunStatus.WAITING.value, lease_token=None, owner_host=None,
                owner_pid=None, owner_started=None, heartbeat_at=None, error=None)
        Approval.insert_many(rows).on_conflict_ignore().execute()
    lease.stop_heartbeat()
    forget_token(lease.token)


@store_call
def approvals(store: StoreHandle, run_id: str, n: int | None = None) -> list[Approval]:
    """The run's recorded calls (one step's with ``n``), in the order the model made them."""
    query = Approval.select().where(Approval.run == run_id)
    if n is not None:
        query = query.where(Approval.n == n)
    rows = list(query.order_by(Approval.n, Approval.id))
    for row in rows:  # a kept result is reused as the call's answer: images and documents go back in
        row.result = blobs.resolve(store, row.result)
    return rows


@store_call
def pending_approvals(store: StoreHandle, limit: int = 500) -> list[tuple[Approval, Run]]:
    """Every call waiting for a decision, oldest first, with its run."""
    query = (Approval.select(Approval, Run).join(Run)
             .where(Approval.state == PENDING, Run.status == RunStatus.WAITING.value).order_by(Approval.requested_at, Approval.id).limit(limit))
    return [(row, row.run) for row in query]


@store_call
def waiting_count(store: StoreHandle) -> int:
    return Run.select().where(Run.status == RunStatus.WAITING.value).count()


def decide(store: StoreHandle, run_id: str, tool_use_id: str | None, *, approve: bool, by: str, host: str,
           reason: str | None = None, edited_input: Any = None, expect_hash: str | None = None) -> Approval:
    """Commit one person's decision on one waiting call; refuse any second decision.

    ``tool_use_id`` may be left out when exactly one call of the run waits.
    ``expect_hash`` (a prefix is enough) binds the decision to the arguments
    the person saw. When this was the run's last waiting call, the run is
    queued again in the same transaction: a worker or ``dayflow resume``
    continues it, answering the calls from these rows.
    """
    refuse_if_imported(store, run_id)  # nothing of an imported session waits here
    token = new_token()
    try:
        return decide_with(store, run_id, tool_use_id, token, approve=approve, by=by, host=host, reason=reason,
                           edited_input=edited_input, expect_hash=expect_hash)
    finally:
        forget_token(token)


@store_call
def decide_with(store: StoreHandle, run_id: str, tool_use_id: str | None, token: str, *, approve: bool, by: str,
                host: str, reason: str | None, edited_input: Any, expect_hash: str | None) -> Approval:
    with store.write_transaction():
        target = decision_target(store, run_id, tool_use_id)
        if target.decision_token == token:
            return target  # an earlier try committed; only its answer was lost
        if target.state != PENDING:
            raise DecisionRefused(_already(target))
        if expect_hash is not None and not target.input_hash.startswith(hash_prefix(expect_hash)):
            raise DecisionRefused(f"run {run_id} call {target.tool_use_id}: its arguments hash to "
                                  f"{target.input_hash[:12]}, not {expect_hash[:12]}; look again before deciding")
        # The run's row first (on PostgreSQL its lock): a run cancelled meanwhile takes no decision, and a
        # cancel that comes after waits for this one and finds the run as the decision left it.
        if (Run.update(updated_at=store.dialect.now())
                .where(Run.id == run_id, Run.status == RunStatus.WAITING.value).execute()) != 1:
            raise DecisionRefused(_not_waiting(Run.get_by_id(run_id)))
        values = dict(state=APPROVED if approve else DENIED, reason=reason, decided_by=by, decided_host=host,
                      decided_at=store.dialect.now(), decision_token=token,
                      edited_input=None if edited_input is None else canonical_json(edited_input))
        won = (Approval.update(**values)
               .where(Approval.id == target.id, Approval.state == PENDING).execute()) == 1
        if not won:
            raise DecisionRefused(_already(Approval.get_by_id(target.id)))
        pause_point("decide")
        still = Approval.select().where(Approval.run == run_id, Approval.state == PENDING).exists()
        if not still:
            (Run.update(status=RunStatus.QUEUED.value, updated_at=store.dialect.now(), not_before=None)
             .where(Run.id == run_id, Run.status == RunStatus.WAITING.value).execute())
            _queue_waiting_parents(store, Run.get_by_id(run_id))
        else:
            Run.update(updated_at=store.dialect.now()).where(Run.id == run_id).execute()
    return Approval.get_by_id(target.id)


def _queue_waiting_parents(store: StoreHandle, run: Run) -> None:
    """The runs above a subagent's run that waited only on it go back to the queue with it (in the decision's
    transaction): ``dayflow resume`` of the parent (or a worker) then drives the child on, and the parent after it.
    A parent that still waits on a call of its own, or on another child, keeps waiting."""
    while run.parent_id is not None and run.parent_call_id is not None:
        parent = Run.get_or_none(Run.id == run.parent_id)
        if parent is None or parent.status != RunStatus.WAITING.value:
            return
        if Approval.select().where(Approval.run == parent.id, Approval.state == PENDING).exists():
            return
        if Run.select().where(Run.parent_id == parent.id, Run.parent_call_id.is_null(False),
                              Run.status == RunStatus.WAITING.value).exists():
            return
        (Run.update(status=RunStatus.QUEUED.value, updated_at=store.dialect.now(), not_before=None)
         .where(Run.id == parent.id, Run.status == RunStatus.WAITING.value).execute())
        run = parent


def decision_target(store: StoreHandle, run_id: str, tool_use_id: str | None) -> Approval:
    calls = list(Approval.select().where(Approval.run == run_id, Approval.state != AUTO)
                 .order_by(Approval.n.desc(), Approval.id))
    if tool_use_id is not None:
        chosen = [c for c in calls if c.tool_use_id == tool_use_id]
        if not chosen:
            raise UsageError(f"run {run_id} has no call {tool_use_id!r} that needs a decision"
                             + (f" (its calls: {', '.join(c.tool_use_id for c in calls)})" if calls else ""))
        return chosen[0]
    pending = [c for c in calls if c.state == PENDING]
    if len(pending) == 1:
        return pending[0]
    if pending:
        raise UsageError(f"run {run_id} has {len(pending)} calls waiting; name one: "
                         + ", ".join(f"{c.tool_use_id} ({c.tool_name})" for c in pending))
    if calls:
        raise DecisionRefused(_already(calls[0]))
    raise DecisionRefused(f"run {run_id} has no tool call waiting for a decision")


@store_call(retry_for=_commit_window)
def start_call(store: StoreHandle, run_id: str, n: int, block: dict, lease: Lease) -> None:
    """Mark a call that must never run twice as started, before it runs (the per-call journal)."""
    with store.write_transaction():
        set_run(store, run_id, lease)
        updated = (Approval.update(started_at=store.dialect.now())
                   .where(Approval.run == run_id, Approval.tool_use_id == str(block.get("id") or ""))
                   .execute())
        if not updated:
            journal_row(store, run_id, n, block, started=True).execute()


@store_call(retry_for=_commit_window)
def keep_call_result(store: StoreHandle, run_id: str, n: int, block: dict, result: dict, lease: Lease) -> None:
    """Commit one call's result as it completes: after a crash it is reused, never run again."""
    with store.write_transaction():
        encoded = blobs.externalise(store, json.dumps(result, ensure_ascii=False))
        set_run(store, run_id, lease)
        updated = (Approval.update(result=encoded, result_at=store.dialect.now())
                   .where(Approval.run == run_id, Approval.tool_use_id == str(block.get("id") or ""),
                          Approval.result.is_null())
                   .execute())
        if not updated and not Approval.select().where(
                Approval.run == run_id, Approval.tool_use_id == str(block.get("id") or "")).exists():
            journal_row(store, run_id, n, block, result=encoded).execute()
        pause_point("answer")
    pause_point("answered")


def journal_row(store: StoreHandle, run_id: str, n: int, block: dict, *, started: bool = False,
                result: str | None = None):
    now = store.dialect.now()
    args = block.get("input")
    return Approval.insert(run=run_id, n=n, tool_use_id=str(block.get("id") or ""),
                           tool_name=str(block.get("name")), input=canonical_json(args),
                           input_hash=input_hash(args), state=AUTO, requested_at=now,
                           started_at=now if started else None, result=result,
                           result_at=now if result is not None else None).on_conflict_ignore()


@store_call(retry_for=_commit_window)
def answer_call(store: StoreHandle, run_id: str, tool_use_id: str, result: dict, lease: Lease) -> None:
    """Keep an approved (or denied) call's answer, so a crash after it never runs the call again."""
    with store.write_transaction():
        set_run(store, run_id, lease)
        (Approval.update(result=blobs.externalise(store, json.dumps(result, ensure_ascii=False)),
                         result_at=store.dialect.now())
         .where(Approval.run == run_id, Approval.tool_use_id == tool_use_id, Approval.result.is_null())
         .execute())
        pause_point("answer")
    pause_point("answered")


def _not_waiting(run: Run) -> str:
    if run.status == RunStatus.CANCELLED.value:
        return printable(f"run {run.id} was {cancel_words(run.cancelled_by, run.cancel_reason)}; its calls "
                         "are not decided")
    return f"run {run.id} does not wait for a decision (it is {run.status})"


def _already(row: Approval) -> str:
    if row.state == PENDING:
        return f"call {row.tool_use_id} is still waiting"
    word = {APPROVED: "approved", DENIED: "denied"}.get(row.state, row.state)
    return (f"call {row.tool_use_id} ({row.tool_name}) was already {word} by {row.decided_by or '?'} on "
            f"{row.decided_host or '?'} at {row.decided_at or '?'}")
