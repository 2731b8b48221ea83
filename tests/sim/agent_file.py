"""A random agent for one simulation example, written as a Python file that ``dayflow run`` loads.

Half the agents also offer the built-in ``set_title`` (its effect: the run row's title).
Tools come in four kinds: read-only, idempotent (keyed on ``key``, its effect
a task made through the store), plain (a side effect that must never run
twice), and approval (plain or idempotent, waiting for a person). Every
body appends lines to a side-effect ledger (``SIM_LEDGER``) so the test can
count executions from outside the process:

    read RUN CALL NOTE PID TIME             a read-only body ran
    start RUN CALL NOTE PID TIME            a plain body began its effect ...
    end RUN CALL NOTE PID TIME              ... and finished it
    idem-start RUN CALL KEY PID TIME        an idempotent body began
    idem-end RUN CALL KEY CREATED PID TIME  ... and the store said whether it made the task

Plain and idempotent bodies sleep ``SIM_BODY_PAUSE`` seconds between their
two lines, so a kill can land inside the effect. A line is one ``write`` of
an append-mode file: a process killed with SIGKILL leaves whole lines.

Some agents (the plan decides) also have the real stdio MCP server ``mcp_server.py`` (``mcp.stdio("sim",
...)``: its ``sim__look`` read-only, ``sim__put`` idempotent and ``sim__send`` plain but auto-approved, each
counting its calls in ``SIM_MCP_LEDGER``), and some a subagent tool ``ask_helper``
(``tool_from_agent``): each call runs a child run of the ``helper`` agent, which itself calls a read-only,
a plain and an idempotent tool (and the MCP server's tools when the parent has them), logging to the same ledger under
the child run's id.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path

READ_ONLY, IDEMPOTENT, PLAIN = "read_only", "idempotent", "plain"
TITLE_TOOL = "set_title"
MCP_SERVER = Path(__file__).with_name("mcp_server.py")
MCP_TOOLS = ("sim__look", "sim__put", "sim__send")  # as offered: SERVER__TOOL
MCP_PLAIN = "sim__send"
SUBAGENT_TOOL = "ask_helper"
CHILD_TOOLS = ("look_c", "send_c", "put_c")
CHILD_TASK = "helper task for"  # how every child run's task begins (the scripted model writes it)

_PRELUDE = '''\
"""Written by tests/sim for one simulation example."""
import os
import time

from dayflow_tui.agent.define import Agent, tool


def _log(*fields):
    ledger = os.environ.get("SIM_LEDGER")
    if ledger:
        line = " ".join(str(f) for f in fields) + f" {os.getpid()} {time.time():.6f}\\n"
        with open(ledger, "a", encoding="utf-8") as fh:
            fh.write(line)


def _pause():
    seconds = float(os.environ.get("SIM_BODY_PAUSE") or 0)
    if seconds:
        time.sleep(seconds)

'''


# The helper agent a subagent tool hands its task to: a read-only, a plain and an idempotent tool of its own
# (and the MCP server's, when the parent has it), logging under the child run's id.
_HELPER = '''
@tool(read_only=True)
def look_c(ctx, call: str, note: str = "") -> dict:
    """Read something for the parent; no side effect."""
    _log("read", ctx.run_id, call, note)
    return {{"ok": True, "seen": note}}


@tool()
def send_c(ctx, call: str, note: str = "") -> dict:
    """Send something for the parent: a side effect that must never happen twice."""
    _log("start", ctx.run_id, call, note)
    _pause()
    _log("end", ctx.run_id, call, note)
    return {{"ok": True, "sent": note}}


@tool(idempotent="key")
def put_c(ctx, call: str, key: str, note: str = "") -> dict:
    """Make the task named by key, once (a store write inside a child run: the store faults land there)."""
    _log("idem-start", ctx.run_id, call, key)
    _pause()
    task, created = ctx.store.create_task(idempotency_key="sim-" + key, title="sim " + key, run_id=ctx.run_id)
    _log("idem-end", ctx.run_id, call, key, int(created))
    return {{"ok": True, "created": created}}


helper = Agent(name="helper", system="You are the simulated helper. Use your tools, then answer.",
               tools=(look_c, send_c, put_c){servers})
ask_helper = tool_from_agent(helper, name="ask_helper")

'''


@dataclass(frozen=True)
class ToolSpec:
    name: str
    kind: str  # the kind declared to Dayflow
    body: str  # what the body does: "read", "plain" or "idempotent" (fixed, whatever the declared kind)
    approval: bool = False

    def source(self) -> str:
        options = []
        if self.kind == READ_ONLY:
            options.append("read_only=True")
        elif self.kind == IDEMPOTENT:
            options.append('idempotent="key"')
        if self.approval:
            options.append("needs_approval=True")
        head = f"@tool({', '.join(options)})"
        if self.body == "read":
            return (f'{head}\ndef {self.name}(ctx, call: str, note: str = "") -> dict:\n'
                    f'    """Read something; no side effect."""\n'
                    f'    _log("read", ctx.run_id, call, note)\n'
                    f'    return {{"ok": True, "seen": note}}\n')
        if self.body == "idempotent":
            return (f'{head}\ndef {self.name}(ctx, call: str, key: str, note: str = "") -> dict:\n'
                    f'    """Make the task named by key, once."""\n'
                    f'    _log("idem-start", ctx.run_id, call, key)\n'
                    f'    _pause()\n'
                    f'    task, created = ctx.store.create_task(idempotency_key="sim-" + key, title="sim " + key,\n'
                    f'                                          run_id=ctx.run_id)\n'
                    f'    _log("idem-end", ctx.run_id, call, key, int(created))\n'
                    f'    return {{"ok": True, "created": created}}\n')
        return (f'{head}\ndef {self.name}(ctx, call: str, note: str = "") -> dict:\n'
                f'    """Send something: a side effect that must never happen twice."""\n'
                f'    _log("start", ctx.run_id, call, note)\n'
                f'    _pause()\n'
                f'    _log("end", ctx.run_id, call, note)\n'
                f'    return {{"ok": True, "sent": note}}\n')


@dataclass(frozen=True)
class AgentSpec:
    tools: tuple[ToolSpec, ...]
    prompt: str = "You are a simulated agent. Use your tools, then answer."
    titles: bool = False  # the agent also offers the built-in set_title tool (agent.titles)
    mcp: bool = False  # the agent (and its helper) has the simulation's MCP server
    subagent: bool = False  # the agent offers ask_helper, a subagent tool (a child run per call)

    def source(self) -> str:
        names = ", ".join(t.name for t in self.tools) + (", set_title" if self.titles else "")
        prelude = _PRELUDE + ("from dayflow_tui.agent.titles import set_title\n\n" if self.titles else "")
        servers = ""
        if self.mcp:
            prelude += ("import sys\n\nfrom dayflow_tui import mcp\n\n"
                        f"SIM_MCP = mcp.stdio(\"sim\", sys.executable, {str(MCP_SERVER)!r}, timeout_s=30,"
                        f" auto_approve=[\"send\"])\n\n")
            servers = ", mcp_servers=[SIM_MCP]"
        if self.subagent:
            prelude += "from dayflow_tui.agent.subagents import tool_from_agent\n\n" + _HELPER.format(servers=servers)
            names += f", {SUBAGENT_TOOL}"
        return (prelude + "\n\n".join(t.source() for t in self.tools)
                + f"\n\nagent = Agent(name=\"sim\", system={self.prompt!r}, tools=({names},),"
                  f" task=\"simulate\"{servers})\n")

    @property
    def tool_names(self) -> set[str]:
        """Every tool a request offers (the built-in set_title, the MCP server's and the subagent tool too)."""
        return ({t.name for t in self.tools} | ({TITLE_TOOL} if self.titles else set())
                | (set(MCP_TOOLS) if self.mcp else set()) | ({SUBAGENT_TOOL} if self.subagent else set()))

    @property
    def child_tool_names(self) -> set[str]:
        """The tools a child run's request offers (the helper agent's)."""
        return set(CHILD_TOOLS) | (set(MCP_TOOLS) if self.mcp else set())

    def tool(self, name: str) -> ToolSpec:
        return next(t for t in self.tools if t.name == name)

    def with_tool(self, new: ToolSpec) -> "AgentSpec":
        return replace(self, tools=tuple(new if t.name == new.name else t for t in self.tools))

    def effect_tools(self) -> set[str]:
        """Tools whose body has a side effect that must happen at most once per call."""
        return {t.name for t in self.tools if t.body == "plain"}


def random_agent(rng: random.Random, *, mcp: bool = False, subagent: bool = False) -> AgentSpec:
    """At least one tool of each kind, sometimes two; approval on some plain and idempotent tools."""
    tools = []
    for kind, body, prefix in ((READ_ONLY, "read", "look"), (IDEMPOTENT, "idempotent", "put"),
                               (PLAIN, "plain", "send")):
        for i in range(rng.randint(1, 2)):
            tools.append(ToolSpec(f"{prefix}_{i}", kind, body, approval=kind != READ_ONLY and rng.random() < 0.35))
    if not any(t.approval for t in tools):  # every example has a tool that waits for a person
        plain = next(t for t in tools if t.kind == PLAIN)
        tools[tools.index(plain)] = replace(plain, approval=True)
    # Half the agents offer set_title, decided without drawing from ``rng`` (the known seeds replay alike).
    return AgentSpec(tuple(tools), titles=len(tools) % 2 == 0, mcp=mcp, subagent=subagent)
