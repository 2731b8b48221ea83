"""Tool calls that wait for a person: stop the run before they run, answer them once decided.

The loop asks ``answer_calls`` for a step's tool results. Without a call
that needs approval it runs the tools as always. With one, the first time
round the other calls run, their results and the waiting calls are committed
with the run set ``waiting`` (the lease given up), and ``None`` tells the
loop to stop: no model call is made while a run waits. Once every waiting
call is decided, whoever drives the run next answers each call from its
row: a result already kept is reused, an approved call runs (with the
arguments the person approved) and its result is kept at once, a denied call
gets an ``is_error`` result carrying the reason. So a call never runs twice,
whichever moment a process dies at.
"""

from __future__ import annotations

import getpass
import json
from typing import Any

from ..config import settings
from ..config.errors import UsageError
from ..store import Lease, Run, Store, this_host
from ..store.tables.approvals import APPROVED, AUTO, DENIED, PENDING, CallToAsk
from ..store.tables.runs import approval_tools
from .journal import answer_call, call_id, kept_rows
from .subagents import side_by_side
from .tools import CallPaused, ToolContext, ToolInputError, tool_result, validate


class RunWaiting(Exception):
    """The run stopped ``waiting`` for a person's decision (the loop returns; nothing failed)."""


def approval_tools_for_new_run(agent: Any = None) -> tuple[str, ...]:
    """The tools the settings say need approval, checked against the tools the run's agent has."""
    names = settings.current().require_approval
    if not names:
        return ()
    if agent is None:
        from .brief import AGENT as agent
    known = [t.name for t in agent.tools]
    unknown = [name for name in names if name not in known]
    if unknown and agent.name == "brief":
        raise UsageError(f"require_approval names {unknown[0]!r}, which is not a tool "
                         f"(tools: {', '.join(known)})")
    return tuple(name for name in names if name in known)  # another agent's tools are its own business


def _waits(gated: frozenset[str], agent: Any, block: dict) -> bool:
    if block.get("type") != "tool_use":
        return False
    if block.get("name") in gated:
        return True
    found = agent.tool_named(block.get("name")) if agent is not None else None
    return found is not None and found.wants_approval(block.get("input"))


def needs_a_person(run: Run, assistant: list[dict], agent: Any = None) -> bool:
    """Does a tool call of this reply wait for a decision (the run's list, or the tool's own rule)?"""
    gated = approval_tools(run)
    return any(_waits(gated, agent, b) for b in assistant)


def answer_calls(store: Store, run: Run, lease: Lease, ctx: ToolContext, n: int,
                 assistant: list[dict]) -> list[dict]:
    """The tool results of step ``n``, a call of which needs a person; raises ``RunWaiting`` after stopping
    the run for a decision.

    Every call runs through the per-call journal (``journal.answer_call``), on the way to the wait and
    after the decision alike: an approved plain tool killed in its body is answered "outcome unknown" on
    resume, never run a second time.
    """
    gated = approval_tools(run)
    agent = ctx.tools_of
    calls = [b for b in assistant if b.get("type") == "tool_use"]
    kept = kept_rows(store, run.id, n)
    # Asked already, or past asking: a call with a kept result, or started with none (a fork's copy of its
    # parent's journal), is answered from its row; asking a person about it would change nothing.
    asked = {tool_use_id for tool_use_id, row in kept.items()
             if row.state != AUTO or row.result is not None or row.started_at is not None}
    to_ask = [b for b in calls if _waits(gated, agent, b) and call_id(b) not in asked]
    if to_ask:
        # First time round (or again after a crash on the way): the calls that need nobody run now, each
        # kept as it completes; then the waiting ones are recorded and the run stops for a decision.
        waiting = {call_id(b) for b in to_ask}
        free = [b for b in calls if call_id(b) not in waiting and call_id(b) not in asked]
        asks = [CallToAsk(call_id(b), str(b.get("name")), b.get("input"), waits=True) for b in to_ask]
        try:
            side_by_side(ctx, free, lambda each, block: answer_call(store, each, lease, n, block,
                                                                  kept.get(call_id(block))),
                         concurrent=lambda block: _hands_over(agent, block))
        except CallPaused:
            # A subagent's run waits too: its call is recorded with the others (no answer), and runs again
            # when this run is driven next, finding its child where it stopped.
            asks += [CallToAsk(call_id(b), str(b.get("name")), b.get("input"), waits=False)
                     for b in free if _hands_over(agent, b)]
        store.wait_for_approval(run.id, n, asks, lease)
        raise RunWaiting(run.id)
    if any(row.state == PENDING for row in kept.values()):
        raise RunWaiting(run.id)  # not claimable while waiting; reached only by a driver that raced a new request
    def answer(each: ToolContext, block: dict) -> dict:
        row = kept.get(call_id(block))
        if row is not None and row.result is None and row.state == DENIED:
            reason = row.reason or "no reason given"
            denial = tool_result(block, {"ok": False, "error": {
                "code": "denied", "message": f"a person denied this call ({row.decided_by}): {reason}"}}, True)
            return answer_call(store, each, lease, n, block, row, answer=denial)
        edited = (json.loads(row.edited_input) if row is not None and row.state == APPROVED
                  and row.edited_input is not None else None)
        return answer_call(store, each, lease, n, block, row, args=edited)

    def has_work(block: dict) -> bool:  # a subagent's call not answered yet: its child runs side by side
        row = kept.get(call_id(block))
        return _hands_over(agent, block) and (row is None or (row.result is None and row.state != DENIED))

    return side_by_side(ctx, calls, answer, concurrent=has_work)


def _hands_over(agent: Any, block: dict) -> bool:
    """Is this call a subagent's (its answer comes from a child run)?"""
    found = agent.tool_named(block.get("name")) if agent is not None else None
    return found is not None and found.subagent is not None


def parse_edit(text: str, tool: Any = None) -> dict:
    """Arguments a person typed, as a JSON object that fits ``tool``'s schema (when the tool is known).

    ``UsageError`` with one line saying what is wrong; the same check for the CLI and the dashboard's dialog.
    """
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"the edited arguments are not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError("the edited arguments must be a JSON object")
    if tool is not None:
        try:
            validate(tool.input_schema, value)
        except ToolInputError as exc:
            raise UsageError(f"the edited arguments do not fit {tool.name}: {exc}") from None
    return value


def tool_of_run(agent_ref: str | None, name: str | None) -> Any:
    """The run's tool called ``name``, or None when its agent cannot be loaded (the decision still checks JSON)."""
    try:
        from .registry import load_agent

        return load_agent(agent_ref).tool_named(name)
    except Exception:
        return None


def validated_edit(store: Store, run_id: str, tool_use_id: str | None, text: str) -> tuple[str, Any]:
    """Arguments a person typed for a waiting call, checked against the tool's schema before anything is written.

    Returns the call's id and the parsed arguments.
    """
    value = parse_edit(text)
    waiting = [row for row in store.approvals(run_id) if row.state == PENDING
               and (tool_use_id is None or row.tool_use_id == tool_use_id)]
    if len(waiting) != 1:
        # Let the store say precisely what is wrong (several waiting, none, decided already).
        target = store.approvals(run_id)
        name = next((r.tool_name for r in target if r.tool_use_id == tool_use_id), None)
        if name is None:
            return tool_use_id or "", value
    else:
        name = waiting[0].tool_name
        tool_use_id = waiting[0].tool_use_id
    run = store.get_run(run_id)
    return tool_use_id or "", parse_edit(text, tool_of_run(run.agent_ref, name))


def decider() -> tuple[str, str]:
    """Who decides, and on which host: the ``user`` setting (else the login name), this host's name."""
    user = settings.current().user
    if not user:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "unknown"
    return user, this_host()
