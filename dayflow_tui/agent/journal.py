"""The per-call journal: every path that runs a tool runs it through here, so a call never runs twice.

The loop, an approved or denied step, a worker, a resume and a fork's first
drive all answer a step's calls one by one with ``answer_call``. A result
already kept is reused. A plain tool (a side effect that must never happen
twice) is marked started in its own commit before its body runs; started
with no kept result means a process died inside it, so it is not run again
but answered "outcome unknown", and the model (or the person reading) decides.
Each result is kept the moment it exists, before the next call starts.
"""

from __future__ import annotations

import json
from typing import Any

from ..store import Lease, Store
from ..testhook import pause_point
from .define import PLAIN
from .tools import ToolContext, run_tool, tool_result

OUTCOME_UNKNOWN = ("this call was started before the process stopped and recorded no result, so it was not run "
                   "again; check its effect before calling it again")


def answer_call(store: Store, ctx: ToolContext, lease: Lease, n: int, block: dict, row: Any = None, *,
                args: Any = None, answer: dict | None = None) -> dict:
    """Step ``n``'s tool_result for ``block``, kept in the journal before it is returned.

    ``row`` is the call's journal row if it has one (``store.approvals``); ``args`` replace the model's
    arguments (a person's edit); ``answer`` is a result decided without running anything (a denial).
    """
    if row is not None and row.result is not None:
        return json.loads(row.result)
    if answer is None:
        tool = ctx.tools_of.tool_named(block.get("name"))
        plain = tool is not None and tool.kind == PLAIN
        if plain and row is not None and row.started_at is not None:
            answer = tool_result(block, {"ok": False, "error": {"code": "outcome_unknown",
                                                               "message": OUTCOME_UNKNOWN}}, True)
        else:
            if plain:
                store.start_call(ctx.run_id, n, block, lease)
            pause_point("tools")
            ctx.call_id = call_id(block)
            payload, is_error = run_tool(ctx, block.get("name", ""), block.get("input") if args is None else args)
            answer = tool_result(block, payload, is_error)
    store.keep_call_result(ctx.run_id, n, block, answer, lease)
    return answer


def kept_rows(store: Store, run_id: str, n: int) -> dict[str, Any]:
    """Step ``n``'s journal rows by call id."""
    return {row.tool_use_id: row for row in store.approvals(run_id, n)}


def call_id(block: dict) -> str:
    return str(block.get("id") or "")
