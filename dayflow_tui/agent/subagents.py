"""Durable subagents (issue #27): a tool whose call hands a task to another agent, run as a child run.

```python
from dayflow_tui import Agent

researcher = Agent(name="researcher", system="Find facts.", tools=(search_web,))
writer = Agent(name="writer", system="Write the brief.", subagents=[researcher])
# the same as tools=(tool_from_agent(researcher),); handback="summary" answers with the child's transcript
# compacted (deterministically, as compaction summarises steps) instead of its final text
```

The call is an idempotent tool keyed by the call itself: its child run's id is fixed by the parent run and
the call's id (``store.create_child_run``), so whatever crashes, one call has one child:

- killed before the child exists: the resumed call makes it, once;
- killed while the child runs: the resumed call resumes that child (its committed steps are not paid
  again), never a new one;
- killed after the child finished, before the parent kept the result: the resumed call reads the child's
  answer and makes no call at all.

The child is a run of its own (``parent_id``, ``parent_call_id``): its steps, lease, cost and transcript,
listed under its parent. Its final text (or its compacted transcript) is the tool's result. A child that
waits for a person pauses the call (``CallPaused``): the parent waits too, and the decision that frees the
child queues the parent again. A child stopped by the tree's dollar budget stops the parent ``budget``
(``budget.TreeBudget``). A child that stops any other way (failed, cancelled) is the tool's error saying so
and naming the child. Several subagent calls of one reply run side by side (``side_by_side``), each in its
own thread with its own connection and lease; their paid calls take turns (``call_gate``), so the
invariant holds over the tree: calls <= committed steps + deaths.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from decimal import Decimal
from typing import Any, Callable

from ..config.errors import RunBusy
from ..store import RunStatus, Store
from ..store.leases import cancel_words
from .budget import tree_budget
from .compaction import pairs_of, summarise_step
from .define import Agent, Tool, subagent_tool
from .messages import messages_and_lengths
from .registry import agent_columns
from .tools import CallPaused, ToolContext

BUSY_WAIT_S = 0.5  # a child another process drives (a worker took it): its end is waited for, this often

__all__ = ["SubagentStopped", "SubtreeWaiting", "call_gate", "run_child", "runs_above", "side_by_side",
           "tool_from_agent", "waiting_below"]


class SubagentStopped(Exception):
    """The child run ended without an answer; the message says how and names it (the model is told)."""


class SubtreeWaiting(CallPaused):
    """The child run (or one below it) waits for a person's decision: the parent waits with it."""


def tool_from_agent(agent: Agent, *, name: str | None = None, description: str | None = None,
                    handback: str | None = None) -> Tool:
    """A tool that hands its ``task`` to ``agent`` as a durable child run; ``Agent(subagents=[agent])`` adds one.

    ``handback``: ``"final"`` (the child's final text) or ``"summary"`` (its transcript, compacted); default
    the agent's own ``handback``.
    """
    return subagent_tool(agent, name=name, description=description, handback=handback)


def run_child(ctx: ToolContext, agent: Agent, task: str, handback: str, *,
              drive: Callable[..., Any]) -> str:
    """Start (or resume, or read) the child run of ``ctx``'s call, driving it with ``drive`` (``runs``'s)."""
    store = ctx.store
    parent = store.get_run(ctx.run_id)
    if parent.cancel_at is not None:
        # Asked to stop while this step's tools ran: no child is started (a cancel reaches the children that
        # exist when it is made; a child made after it would see it only at its parent's next heartbeat).
        raise SubagentStopped(f"the {agent.name} agent was not started: this run was "
                              f"{cancel_words(parent.cancelled_by, parent.cancel_reason)}")
    ref = f"{parent.agent_ref}>{agent.name}" if parent.agent_ref else None
    agent = agent.connected()
    tree = tree_budget(store, parent, alone_too=True)
    share = tree.left() if tree is not None else None  # the child's share: what the tree has left now
    child, lease = store.create_child_run(parent.id, ctx.call_id, task, model=agent.model or parent.model,
                                          max_steps=agent.max_steps, agent=agent_columns(agent, ref),
                                          budget_usd=None if share is None else max(share, Decimal(0)))
    while lease is None and child.status not in _ENDED:
        try:
            lease = store.claim(child.id, fresh_attempts=True)
        except RunBusy:
            time.sleep(BUSY_WAIT_S)  # another process drives it: its answer is waited for, not bought again
            child = store.get_run(child.id)
    if lease is not None:
        above = ((ctx.lease,) if ctx.lease is not None else ()) + tuple(ctx.above)
        drive(store, child.id, lease, agent=agent, above=above)
        child = store.get_run(child.id)
    if child.status == RunStatus.DONE.value:
        return _summary(store, child, agent.name) if handback == "summary" else (child.final_text or "")
    if child.status == RunStatus.WAITING.value:
        raise SubtreeWaiting(f"the {agent.name} agent's run {child.id} waits for a decision")
    raise SubagentStopped(f"the {agent.name} agent's run {child.id} stopped ({child.status}) without an answer"
                          + (f": {child.error}" if child.error else "")
                          + f"; resume it with `dayflow resume {child.id}`")


def _summary(store: Store, child: Any, name: str) -> str:
    """The child's transcript compacted as compaction summarises steps: one entry per step, no tool payloads.

    Deterministic: it depends only on the committed steps, so a resumed parent is handed the same text.
    """
    messages, _lengths = messages_and_lengths(child, store.replay_steps(child.id))
    entries = [summarise_step(n, pair) for n, pair in enumerate(pairs_of(messages), start=1)]
    return "\n\n".join([f"The {name} agent's run {child.id} ({len(entries)} step(s)), compacted:", *entries])


def side_by_side(ctx: ToolContext, calls: list[dict], answer: Callable[[ToolContext, dict], dict],
                 *, concurrent: Callable[[dict], bool]) -> list[dict]:
    """``answer(ctx, call)`` for each call, results in the calls' order.

    The calls ``concurrent`` picks (subagent calls whose child has work to do) run at once, each in a thread
    of its own with a copy of ``ctx`` (its call id is its own) and its own database connection; the others
    run meanwhile on this thread, one by one in their order, as they always do. A call that pauses (its
    child waits for a person) or fails lets the others finish first, then the first in order is raised.
    """
    chosen = [i for i, block in enumerate(calls) if concurrent(block)]
    if len(chosen) < 2:
        return [answer(ctx, block) for block in calls]
    results: dict[int, dict] = {}
    raised: dict[int, BaseException] = {}

    def one(index: int) -> None:
        try:
            results[index] = answer(dataclasses.replace(ctx), calls[index])
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            raised[index] = exc
        finally:
            ctx.store.close_thread_connection()

    threads = [threading.Thread(target=one, args=(i,), name=f"dayflow-subagent-{i}", daemon=True) for i in chosen]
    for thread in threads:
        thread.start()
    try:
        for index, block in enumerate(calls):
            if index not in chosen and not raised:
                try:
                    results[index] = answer(ctx, block)
                except BaseException as exc:  # noqa: BLE001 - raised once the children are back
                    raised[index] = exc
    finally:
        for thread in threads:
            thread.join()
    if raised:
        # A failure outranks a pause: a paused call is answered on the next drive either way.
        failing = [i for i in sorted(raised) if not isinstance(raised[i], CallPaused)]
        raise raised[(failing or sorted(raised))[0]]
    return [results[i] for i in range(len(calls))]


def runs_above(store: Store, run: Any) -> list[Any]:
    """The runs over a subagent's run, its parent first and the tree's root last (empty for a run alone)."""
    above = []
    while run.parent_id is not None and run.parent_call_id is not None:
        run = store.get_run(run.parent_id)
        above.append(run)
    return above


def waiting_below(store: Store, run_id: str) -> list[Any]:
    """The subagents' runs under ``run_id`` that wait for a person (the tree waits on them), nearest first."""
    return [child for child in store.runs_below(run_id) if child.status == RunStatus.WAITING.value]


def call_gate(store: Store, run: Any) -> threading.Lock:
    """The lock a tree's runs hold from a paid call's start to its reply's commit, one call at a time.

    Children side by side overlap in everything else (their tools, their commits, a child waiting for a
    person); their paid calls take turns. A kill -9 of the process then loses at most the one call in
    flight, so the tree keeps the invariant: calls <= committed steps + deaths.
    """
    root = run
    while root.parent_id is not None and root.parent_call_id is not None:
        root = store.get_run(root.parent_id)
    with _GATES_LOCK:
        return _GATES.setdefault(root.id, threading.Lock())


_GATES: dict[str, threading.Lock] = {}
_GATES_LOCK = threading.Lock()

_ENDED = {RunStatus.DONE.value, RunStatus.FAILED.value, RunStatus.BUDGET.value, RunStatus.CANCELLED.value,
          RunStatus.WAITING.value}
