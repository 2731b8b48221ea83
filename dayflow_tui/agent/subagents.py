"""Durable subagents (issue #27): a tool whose call hands a task to another agent, run as a child run.

```python
from dayflow_tui import Agent
from dayflow_tui.agent.subagents import tool_from_agent

researcher = Agent(name="researcher", system="Find facts.", tools=(search_web,))
agent = Agent(name="writer", system="Write the brief.", tools=(tool_from_agent(researcher),))
```

The call is an idempotent tool keyed by the call itself: its child run's id is fixed by the parent run and
the call's id (``store.create_child_run``), so whatever crashes, one call has one child:

- killed before the child exists: the resumed call makes it, once;
- killed while the child runs: the resumed call resumes that child (its committed steps are not paid
  again), never a new one;
- killed after the child finished, before the parent kept the result: the resumed call reads the child's
  answer and makes no call at all.

The child is a run of its own (``parent_id``, ``parent_call_id``): its steps, lease, cost and transcript,
listed under its parent. Its final text is the tool's result; a child that stops any other way (failed,
out of budget, waiting for a person, cancelled) is the tool's error saying so and naming the child, which
a person can resume or decide and then resume the parent. A cancel of the parent cancels its children too
(``store.cancel_run``); a call made after the cancel was asked starts no child. The invariant holds over the tree: each child's
calls are its own committed steps, plus at most one per death.
"""

from __future__ import annotations

import time

from ..config.errors import RunBusy
from ..store import RunStatus, cancel_words
from . import runs
from .define import IDEMPOTENT, Agent, Tool, ToolDefinitionError
from .registry import agent_columns
from .tools import ToolContext

BUSY_WAIT_S = 0.5  # a child another process drives (a worker took it): its end is waited for, this often


class SubagentStopped(Exception):
    """The child run ended without an answer; the message says how and names it (the model is told)."""


def tool_from_agent(agent: Agent, *, name: str | None = None, description: str | None = None) -> Tool:
    """A tool that hands its ``task`` to ``agent`` as a durable child run and answers with its final text."""
    if not isinstance(agent, Agent):
        raise ToolDefinitionError(f"{agent!r} is not a dayflow Agent")
    tool_name = name or agent.name
    first = next((line.strip() for line in agent.system.splitlines() if line.strip()), "")
    about = description or (f"Hand a task to the {agent.name} agent, which works on it on its own and answers "
                            f"with its result. {first}".strip())
    schema = {"type": "object", "properties": {"task": {
        "type": "string", "minLength": 1, "maxLength": 20000,
        "description": f"What the {agent.name} agent should do, with everything it needs to know."}},
        "required": ["task"], "additionalProperties": False}

    def hand_over(ctx: ToolContext, task: str) -> str:
        return _run_child(ctx, agent, task)

    return Tool(tool_name, about[:1000], schema, hand_over, IDEMPOTENT, None, True, False, subagent=agent)


def _run_child(ctx: ToolContext, agent: Agent, task: str) -> str:
    store = ctx.store
    parent = store.get_run(ctx.run_id)
    if parent.cancel_at is not None:
        # Asked to stop while this step's tools ran: no child is started (a cancel finds only the children
        # that exist when it is made; ``store.cancel_run``).
        raise SubagentStopped(f"the {agent.name} agent was not started: this run was "
                              f"{cancel_words(parent.cancelled_by, parent.cancel_reason)}")
    ref = f"{parent.agent_ref}>{agent.name}" if parent.agent_ref else None
    agent = agent.connected()
    child, lease = store.create_child_run(parent.id, ctx.call_id, task, model=agent.model or parent.model,
                                          max_steps=agent.max_steps, agent=agent_columns(agent, ref))
    while lease is None and child.status not in _ENDED:
        try:
            lease = store.claim(child.id, fresh_attempts=True)
        except RunBusy:
            time.sleep(BUSY_WAIT_S)  # another process drives it: its answer is waited for, not bought again
            child = store.get_run(child.id)
    if lease is not None:
        runs.drive_claimed(store, child.id, lease, agent=agent)
        child = store.get_run(child.id)
    if child.status == RunStatus.DONE.value:
        return child.final_text or ""
    raise SubagentStopped(f"the {agent.name} agent's run {child.id} stopped ({child.status}) without an answer"
                          + (f": {child.error}" if child.error else "")
                          + f"; resume it with `dayflow resume {child.id}`")


_ENDED = {RunStatus.DONE.value, RunStatus.FAILED.value, RunStatus.BUDGET.value, RunStatus.CANCELLED.value,
          RunStatus.WAITING.value}
