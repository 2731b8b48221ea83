"""Forks: a new run whose history is a copy of another run's first steps, written in one transaction.

The copied rows are the parent's exactly as stored (the assistant turns, the
tool results, the reply bodies, the tokens), so the fork's next request is
the one the parent sent after that step, byte for byte, and a prompt cache
still applies. Changes a person makes (a tool result replaced, a note added
after the fork point) are written into the copies, never into the parent.
The copied steps were paid for once, by the parent: ``forked_at`` says which
steps of a fork are copies, and spend totals leave them out.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable

from ...config.errors import UsageError
from .approvals import AUTO
from .imported import refuse_imported
from ..models import Approval, Run, Step
from ..retry import attempt_number, store_call
from ..search.index import index_runs
from ..status import RunStatus
from .runs import clean_title, get_run
from .steps import dumps, steps as read_steps

if TYPE_CHECKING:
    from ..handle import StoreHandle

NOTE_LABEL = "[a note from the person who forked this run] "


@dataclass(frozen=True)
class ForkPlan:
    """What a fork changes: ``results`` maps (step, tool_use_id) to the new result text; ``note`` follows step K."""

    at: int
    results: dict[tuple[int, str], str] = field(default_factory=dict)
    note: str | None = None
    model: str | None = None
    max_steps: int | None = None
    budget_tokens: int | None = None
    budget_usd: Decimal | None = None


def _refuse(text: str) -> UsageError:
    return UsageError(text + "; nothing was written")


def planned_steps(parent: Run, steps: list[Step], plan: ForkPlan) -> list[dict[str, Any]]:
    """The fork's step rows (column values by field name), with the plan's changes; checked, nothing written."""
    if plan.at < 0 or plan.at > len(steps):
        raise _refuse(f"run {parent.id} has {len(steps)} step(s): --at must be 0..{len(steps)}, not {plan.at}")
    if plan.at == 0 and (plan.note or plan.results):
        raise _refuse("a fork at step 0 keeps no step to change or to add a note after")
    rows = []
    for step in steps[:plan.at]:
        row = {f.name: getattr(step, f.name) for f in Step._meta.sorted_fields if f.name != "run"}
        row["run"] = step.run_id
        rows.append(row)
    for (n, tool_use_id), text in plan.results.items():
        if not 1 <= n <= plan.at:
            raise _refuse(f"--edit-result {n}:{tool_use_id}: only steps 1..{plan.at} are copied into the fork")
        row = rows[n - 1]
        try:
            results = json.loads(row["tool_results"]) if row["tool_results"] is not None else None
        except ValueError:
            results = None
        if not isinstance(results, list):
            raise _refuse(f"--edit-result {n}:{tool_use_id}: step {n} has no tool results to change")
        matches = [b for b in results if isinstance(b, dict) and b.get("type") == "tool_result"
                   and b.get("tool_use_id") == tool_use_id]
        if not matches:
            known = ", ".join(str(b.get("tool_use_id")) for b in results if isinstance(b, dict)) or "none"
            raise _refuse(f"--edit-result {n}:{tool_use_id}: step {n} has no result for that call "
                          f"(its calls: {known})")
        matches[0]["content"] = text
        matches[0].pop("is_error", None)  # the person's result stands as the tool's answer
        row["tool_results"] = dumps(results)
    if plan.note:
        row = rows[-1]
        assistant = json.loads(row["assistant"]) if row["assistant"] else []
        calls = [b for b in assistant if isinstance(b, dict) and b.get("type") == "tool_use"]
        if calls and row["tool_results"] is None:
            raise _refuse(f"--append: step {plan.at}'s tool calls have no results yet (its tools never ran); "
                          f"fork at step {plan.at - 1} instead")
        results = json.loads(row["tool_results"]) if row["tool_results"] is not None else []
        results.append({"type": "text", "text": NOTE_LABEL + plan.note})
        row["tool_results"] = dumps(results)
    return rows


def fork_run(store: StoreHandle, parent_id: str, plan: ForkPlan, *,
             check: Callable[[Run, list[Step]], None] | None = None, run_id: str | None = None) -> Run:
    """Make the fork: a new run holding the parent's steps 1..K (changed as planned), status ``forked``.

    ``check(new_run, new_steps)`` validates the history before anything is
    written (the agent side passes its Messages API check). The new id is
    fixed before the first try, so a retry whose COMMIT landed finds its fork.
    """
    run_id = run_id or uuid.uuid4().hex[:12]
    parent = get_run(store, parent_id)
    refuse_imported(parent)  # an imported session's history is not a Messages API conversation to go on from
    steps = read_steps(store, parent.id)
    rows = planned_steps(parent, steps, plan)
    fork = Run(id=run_id, user_msg=parent.user_msg, status=RunStatus.FORKED.value,
               model=plan.model or parent.model, budget_tokens=plan.budget_tokens or parent.budget_tokens,
               budget_usd=plan.budget_usd if plan.budget_usd is not None else parent.budget_usd,
               max_steps=max(plan.max_steps or parent.max_steps, plan.at + 1), compact_at=parent.compact_at,
               approval_tools=parent.approval_tools, parent_id=parent.id, forked_at=plan.at,
               priority=parent.priority or 0,
               # The parent's agent, as recorded: the fork's next request carries its system prompt and
               # tools (byte for byte, so the prompt cache still applies), and a copied call that waits
               # for a person waits again instead of being answered by the built-in brief's tools.
               agent=parent.agent, agent_ref=parent.agent_ref, agent_fingerprint=parent.agent_fingerprint,
               agent_shape=parent.agent_shape, title=fork_title(parent, steps, plan.at),
               step_count=len(rows), input_tokens=sum(r["input_tokens"] for r in rows),
               output_tokens=sum(r["output_tokens"] for r in rows),
               cache_creation_tokens=sum(r["cache_creation_input_tokens"] for r in rows),
               cache_read_tokens=sum(r["cache_read_input_tokens"] for r in rows))
    if check is not None:
        check(fork, [Step(**{**row, "run": run_id}) for row in rows])
    write_fork(store, fork, rows, journal_to_copy(store, parent.id, rows))
    return get_run(store, run_id)


TITLE_TOOL = "set_title"  # agent.titles: the one tool whose side effect is the run row itself


def fork_title(parent: Run, steps: list[Step], at: int) -> str | None:
    """The fork's title as the parent's was after step ``at``: the last ``set_title`` call up to there, else
    the parent's own when no later call changed it (its agent's title), else none (made from the task)."""
    def called(step: Step) -> list[str]:
        try:
            blocks = json.loads(step.assistant)
        except (TypeError, ValueError):
            return []
        return [b["input"]["title"] for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
                and b.get("name") == TITLE_TOOL and isinstance(b.get("input"), dict)
                and isinstance(b["input"].get("title"), str)]

    before = [title for step in steps if step.n <= at for title in called(step)]
    if before:
        return clean_title(before[-1])
    later = any(called(step) for step in steps if step.n > at)
    return None if later else parent.title


def journal_to_copy(store: StoreHandle, parent_id: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parent's per-call journal of the fork's last step, when that step's tools have not all run.

    The fork runs those tools itself; a plain call the parent started (and may have done) must be answered
    "outcome unknown" there too, and a result the parent kept is the fork's as well: one side effect
    across the pair, never one per run. Only what happened is copied (started, result), as ``auto``
    rows; a pending decision is not: the fork asks again.
    """
    if not rows or rows[-1]["tool_results"] is not None:
        return []
    n = rows[-1]["n"]
    # The parent's step n may itself be a copy (the parent is a fork made at or after n): what its own
    # ancestors started or kept for those calls before now happened to the same calls, so it is copied
    # too. Found by the sim: a fork of a fork ran a plain call again that the grandparent had started.
    found: dict[str, Any] = {}
    run_id: str | None = parent_id
    seen: set[str] = set()
    while run_id is not None and run_id not in seen:
        seen.add(run_id)
        for row in Approval.select().where(Approval.run == run_id, Approval.n == n):
            if row.started_at is None and row.result is None:
                continue
            have = found.get(row.tool_use_id)
            if have is None or (have.result is None and row.result is not None):
                found[row.tool_use_id] = row
        run = Run.get_or_none(Run.id == run_id)
        if run is None or run.parent_id is None or run.forked_at is None or run.forked_at < n:
            break
        run_id = run.parent_id
    copied = []
    for row in found.values():
        copied.append(dict(n=n, tool_use_id=row.tool_use_id, tool_name=row.tool_name, input=row.input,
                           input_hash=row.input_hash, state=AUTO, requested_at=row.requested_at,
                           started_at=row.started_at, result=row.result, result_at=row.result_at))
    return copied


@store_call
def write_fork(store: StoreHandle, fork: Run, rows: list[dict[str, Any]], journal: list[dict[str, Any]]) -> None:
    if attempt_number() and Run.get_or_none(Run.id == fork.id) is not None:
        return  # the earlier try committed; only its answer was lost
    now = store.dialect.now()
    values = {f.name: getattr(fork, f.name) for f in Run._meta.sorted_fields}
    values.update(created_at=now, updated_at=now, attempts=0, not_before=None, lease_token=None,
                  owner_host=None, owner_pid=None, owner_started=None, heartbeat_at=None, error=None,
                  final_text=None)
    with store.write_transaction():
        Run.insert(**values).execute()
        if rows:
            # Indexed below, in this transaction: the copies are not waiting for the index.
            Step.insert_many([{**row, "run": fork.id, "index_pending": 0} for row in rows]).execute()
        if journal:
            Approval.insert_many([{**row, "run": fork.id} for row in journal]).execute()
        index_runs(store, [fork.id])  # its copied steps are searchable as its own


@store_call
def forks_of(store: "StoreHandle", run_ids: list[str]) -> dict[str, list[Run]]:
    """Each of these runs' forks, oldest first."""
    if not run_ids:
        return {}
    found: dict[str, list[Run]] = {}
    for run in Run.select().where(Run.parent_id.in_(run_ids)).order_by(Run.created_at, Run.id):
        found.setdefault(run.parent_id, []).append(run)
    return found
