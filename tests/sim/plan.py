"""What one simulation example does: a seeded agent and a sequence of actions, each a junction or a fault.

A plan is drawn from a seed and is independent of what happens when it runs:
an action names *which* run or call it acts on as a fraction (``pick``) of
the candidates found at that moment, so removing an action (shrinking) leaves
the others meaningful. A plan prints as one JSON line that
``DAYFLOW_SIM_PLAN`` replays exactly.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass

from .agent_file import AgentSpec, ToolSpec, random_agent

# Junctions: the verbs that start one or two real ``dayflow`` processes.
VERBS = {
    "start": 6,          # dayflow run AGENT TASK: a new run driven here
    "queue": 3,          # dayflow run AGENT TASK --queue: a new run for a worker
    "resume": 6,         # dayflow resume RUN
    "worker": 5,         # dayflow worker --once
    "approve": 5,        # dayflow approve RUN --all
    "approve_one": 3,    # dayflow approve RUN CALL --hash PREFIX
    "deny": 3,           # dayflow deny RUN --all --reason ...
    "edit_approve": 3,   # dayflow approve RUN CALL --edit - (new arguments on stdin)
    "decide_again": 2,   # a second decision on a decided call: refused, nothing changes
    "empty_hash": 1,     # dayflow approve RUN CALL --hash "": a usage error (64), the call still waits
    "fork": 4,           # dayflow fork RUN --at K, then resume the fork (or fork --run)
    "edit_agent": 4,     # the agent file edited (a tool's kind, its approval flag, the prompt), then a resume
    "race": 2,           # dayflow resume RUN and dayflow worker --once started together
    "cancel": 3,         # dayflow cancel RUN: of a run at rest, or of a new run while it is driven (then killed)
}
DRIVING = {"start", "resume", "worker", "approve", "approve_one", "deny", "edit_approve", "fork", "race"}
# Where a kill -9 is aimed: inside a tool body (the ledger's start line), inside a commit (the trace's
# "commit", the process paused in the write transaction), just after one, while a model call is in flight
# (the server holds the answer), or at a random time; with an MCP server, inside a plain or idempotent MCP
# tool's body (the server's ledger line from this client; the server itself is not killed); with a subagent
# tool, inside a child run (a fraction after its Nth model request arrived: mid-call, or in its commit or
# tools), or just after a child run committed its final step, before the parent kept the answer.
KILL_MOMENTS = ("body", "commit", "committed", "api", "anytime")
MCP_MOMENTS = ("mcp",)
CHILD_MOMENTS = ("child", "child-done")
# Faults laid over one driving action.
FAULTS = {"sqlite": ("burst429", "burst529", "lock", "store_error", "broken_stream"),
          "postgres": ("burst429", "burst529", "lock", "store_error", "pg_drop", "broken_stream")}
EDITS = ("kind", "approval", "prompt")


@dataclass(frozen=True)
class Action:
    verb: str
    pick: float = 0.0
    pick2: float = 0.0
    kill: tuple | None = None  # (moment, nth occurrence, fraction of the window)
    fault: tuple | None = None  # (kind, seconds or retry-after, count)
    edit: str = ""

    def __str__(self) -> str:
        parts = [self.verb]
        if self.edit:
            parts.append(f"edit={self.edit}")
        if self.kill:
            parts.append(f"kill@{self.kill[0]}#{self.kill[1]}+{self.kill[2]:.2f}")
        if self.fault:
            parts.append(f"fault={self.fault[0]}({self.fault[1]:g},{self.fault[2]})")
        parts.append(f"pick={self.pick:.2f}")
        return " ".join(parts)


@dataclass(frozen=True)
class Plan:
    seed: str
    backend: str
    agent: AgentSpec
    actions: tuple[Action, ...]

    def to_json(self) -> str:
        return json.dumps({"seed": self.seed, "backend": self.backend,
                           "agent": [asdict(t) for t in self.agent.tools], "titles": self.agent.titles,
                           "mcp": self.agent.mcp, "subagent": self.agent.subagent,
                           "actions": [asdict(a) for a in self.actions]}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        data = json.loads(text)
        agent = AgentSpec(tuple(ToolSpec(**t) for t in data["agent"]), titles=data.get("titles", False),
                          mcp=data.get("mcp", False), subagent=data.get("subagent", False))
        actions = tuple(Action(**{**a, "kill": tuple(a["kill"]) if a["kill"] else None,
                                  "fault": tuple(a["fault"]) if a["fault"] else None}) for a in data["actions"])
        return cls(data["seed"], data["backend"], agent, actions)

    def describe(self) -> str:
        tools = ", ".join(f"{t.name}({t.kind}{', approval' if t.approval else ''})" for t in self.agent.tools)
        tools += ", set_title" if self.agent.titles else ""
        tools += ", MCP sim__look/put/send" if self.agent.mcp else ""
        tools += ", ask_helper (a child run per call)" if self.agent.subagent else ""
        lines = [f"agent: {tools}"] + [f"  {i + 1}. {a}" for i, a in enumerate(self.actions)]
        return "\n".join(lines)

    def replaced(self, index: int, action: Action) -> "Plan":
        return Plan(self.seed, self.backend, self.agent, self.actions[:index] + (action,) + self.actions[index + 1:])

    def without(self, index: int) -> "Plan":
        return Plan(self.seed, self.backend, self.agent, self.actions[:index] + self.actions[index + 1:])


def draw_action(rng: random.Random, backend: str, agent: AgentSpec | None = None) -> Action:
    verb = rng.choices(list(VERBS), weights=list(VERBS.values()))[0]
    kill = fault = None
    if verb in DRIVING and verb != "race" and rng.random() < 0.6:
        # A decision runs the approved call's body at once: aim there half the time.
        deciding = verb in ("approve", "approve_one", "edit_approve") and rng.random() < 0.5
        moments = KILL_MOMENTS + (MCP_MOMENTS if agent and agent.mcp else ()) + (
            CHILD_MOMENTS if agent and agent.subagent else ())
        kill = ("body" if deciding else rng.choice(moments), rng.choice((1, 1, 1, 2, 3)), round(rng.random(), 3))
    if verb in DRIVING and rng.random() < 0.3:
        kind = rng.choice(FAULTS[backend])
        if kind.startswith("burst"):
            fault = (kind, rng.choice((0.2, 0.5, 1.0)), rng.randint(1, 4))
        elif kind == "lock":
            fault = (kind, round(rng.uniform(0.2, 2.0), 2), 1)
        elif kind == "broken_stream":
            fault = (kind, 0.0, rng.randint(1, 3))
        else:
            fault = (kind, 0.0, 1)
    if verb == "cancel":
        # A kill here is aimed at the driver just after the cancel (cancel_actions.py); no fault is laid.
        kill = ("after-cancel", 1, round(rng.random(), 3)) if rng.random() < 0.5 else None
        fault = None
    if verb == "race":
        fault = None  # two processes at once carry no fault of their own (drawn anyway: seeds replay alike)
    return Action(verb, round(rng.random(), 3), round(rng.random(), 3), kill, fault,
                  rng.choice(EDITS) if verb == "edit_agent" else "")


def draw_plan(seed: str, backend: str, length: int) -> Plan:
    rng = random.Random(seed)
    # Half the agents have the MCP server, half the subagent tool: drawn apart from ``rng`` (so the tools and
    # actions of a seed without them replay as before).
    tree = random.Random(f"{seed}:tree")
    agent = random_agent(rng, mcp=tree.random() < 0.5, subagent=tree.random() < 0.5)
    first = Action("start", 0.0, 0.0, None, None)
    return Plan(seed, backend, agent, (first,) + tuple(draw_action(rng, backend, agent) for _ in range(length - 1)))
