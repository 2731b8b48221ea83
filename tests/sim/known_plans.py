"""Plans the simulation shrank from failures it found (issue #24), replayed first in every run.

Each failed on the code before the fixes of issue #24 (commit ``b12a36d``)
and must pass from then on. A random draw meets such a junction only now
and then; these meet it every time, at the cost of a few processes each.
The seeds are the ones the failures were found with: they fix the scripted
model's replies, so the same calls come back.
"""

from __future__ import annotations

import json

from .agent_file import IDEMPOTENT, PLAIN, READ_ONLY, AgentSpec, ToolSpec
from .plan import Action, Plan

_LOOK = ToolSpec("look_0", READ_ONLY, "read")
_TREE = "known:tree:77"  # its first run's first step calls sim__send, then ask_helper (a one-tool-step child)
# Where the kills of a known plan must land (``kills_at``): a plan that met none of its junctions proves little.
MUST_LAND = {_TREE: {"mcp": 1, "child": 1, "child-done": 1}}
_FORK_OF_FORK = ('''{"seed":"20261205:postgres:512","backend":"BACKEND","agent":[{"name":"look_0","kind":"read_only","body":"read","approval":false},{"name":"look_1","kind":"read_only","body":"read","approval":false},{"name":"put_0","kind":"idempotent","body":"idempotent","approval":false},{"name":"put_1","kind":"idempotent","body":"idempotent","approval":false},{"name":"send_0","kind":"plain","body":"plain","approval":true},{"name":"send_1","kind":"plain","body":"plain","approval":false}],"actions":[{"verb":"start","pick":0.0,"pick2":0.0,"kill":null,"fault":null,"edit":""},{"verb":"fork","pick":0.758,"pick2":0.428,"kill":null,"fault":null,"edit":""},{"verb":"approve_one","pick":0.183,"pick2":0.848,"kill":["body",3,0.321],"fault":null,"edit":""},{"verb":"fork","pick":0.846,"pick2":0.45,"kill":null,"fault":null,"edit":""},{"verb":"approve","pick":0.522,"pick2":0.731,"kill":null,"fault":null,"edit":""}]}''')


def known_plans(backend: str) -> list[tuple[str, Plan]]:
    """(what it found, the plan) for ``backend``."""
    return [
        ("an approved plain tool killed in its body ran again on resume (item 1)",
         Plan("known:approve-kill", backend,
              AgentSpec((_LOOK, ToolSpec("send_0", PLAIN, "plain", approval=True))),
              (Action("start"), Action("approve", kill=("body", 1, 0.5)), Action("resume")))),
        ("an agent edit (needs_approval dropped) did not stop `approve --all` on a waiting run (item 2)",
         Plan("4242:sqlite:3", backend,
              AgentSpec((_LOOK, ToolSpec("look_1", READ_ONLY, "read"),
                         ToolSpec("put_0", IDEMPOTENT, "idempotent", approval=True),
                         ToolSpec("put_1", IDEMPOTENT, "idempotent", approval=True),
                         ToolSpec("send_0", PLAIN, "plain", approval=True),
                         ToolSpec("send_1", PLAIN, "plain", approval=True))),
              (Action("start"), Action("edit_agent", pick=0.705, pick2=0.783, edit="approval")))),
        ("a fork of a user's agent asked with the built-in brief's tools (item 3)",
         Plan("201:sqlite:0", backend,
              AgentSpec((_LOOK, ToolSpec("put_0", IDEMPOTENT, "idempotent", approval=True),
                         ToolSpec("send_0", PLAIN, "plain"), ToolSpec("send_1", PLAIN, "plain"))),
              (Action("start"), Action("fork", pick=0.596, pick2=0.618)))),
        ("a store error inside a tool became its committed result, naming the database (item 4)",
         Plan("manual:2", backend,
              AgentSpec((_LOOK, ToolSpec("put_0", IDEMPOTENT, "idempotent"))),
              (Action("start", fault=("store_error", 0.0, 1)), Action("resume")))),
        ("a 529 burst past the SDK's retries set the run failed (item 5)",
         Plan("known:overloaded", backend,
              AgentSpec((_LOOK, ToolSpec("send_0", PLAIN, "plain"))),
              (Action("start", fault=("burst529", 0.2, 3)),))),
        # Found in a 1,722-example run (2026-12-05): it fails about one replay in four on the old code (the
        # kill must land after the grandparent's start mark), and every time the fork's journal is looked at.
        ("a fork of a fork ran a plain call again that the grandparent had started before it was made",
         Plan.from_json(_FORK_OF_FORK.replace('"BACKEND"', json.dumps(backend)))),
        # Cancel (issue #29), met every time: of a run while it is driven (it fails with a driver that ignores
        # the cancel), then of another whose driver is killed a moment after; of an ended run (refused) and of
        # the newest run (cancelled already, or at rest with its cancel asked of a driver that died); a worker
        # settles it; a fork of a cancelled run goes on.
        ("cancel while driven, the driver killed after; cancels at rest; a fork of a cancelled run",
         Plan("known:cancel", backend,
              AgentSpec((_LOOK, ToolSpec("put_0", IDEMPOTENT, "idempotent"), ToolSpec("send_0", PLAIN, "plain"))),
              (Action("start"), Action("cancel", pick=0.1, pick2=0.9),
               Action("cancel", pick=0.4, pick2=0.9, kill=("after-cancel", 1, 0.3)),
               Action("cancel", pick=0.0, pick2=0.1), Action("cancel", pick=0.99, pick2=0.1), Action("worker"),
               Action("fork", pick=0.99, pick2=0.2)))),
        # Streaming (issue #26), met every time: two replies cut part-way (closed, or overloaded_error mid-stream)
        # are failed attempts, never committed; the run backs off, a worker and a resume finish it, one paid
        # call per committed step.
        ("replies whose streams break part-way, then a worker and a resume",
         Plan("known:broken-stream", backend,
              AgentSpec((_LOOK, ToolSpec("put_0", IDEMPOTENT, "idempotent"), ToolSpec("send_0", PLAIN, "plain"))),
              (Action("start", fault=("broken_stream", 0.0, 2)), Action("worker", fault=("broken_stream", 0.0, 1)),
               Action("resume"), Action("worker")))),
        # MCP and subagents (issue #27), met every time: the first step calls the plain MCP tool, then the
        # subagent tool. Killed inside the MCP body (the server, not killed with its client, finishes it); the
        # resume answers it outcome_unknown and runs the child, killed mid-call; the next resume resumes that
        # child, killed once it has committed its answer, before the parent kept it; the settling (a worker, a
        # resume) hands the answer over without a call.
        ("a kill inside a plain MCP call, inside a child run, and after a child finished before its parent kept it",
         Plan(_TREE, backend, AgentSpec((_LOOK, ToolSpec("send_0", PLAIN, "plain")), mcp=True, subagent=True),
              (Action("start", pick2=0.9, kill=("mcp", 1, 0.5)), Action("resume", kill=("child", 1, 0.3)),
               Action("resume", kill=("child-done", 1, 0.0))))),
    ]
