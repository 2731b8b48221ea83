"""What a run recorded of its MCP tools (``Agent.describe``'s ``mcp_tools`` and ``mcp_servers``), for the
dashboard's step view and run preview: read from the run row already in hand, never the database.

Raw values from a database row: the callers show them as text, never markup.
"""

from __future__ import annotations

import json
from typing import Any

# MCP's hints in the order the specification lists them; any others (and ``title``) follow, sorted.
_HINT_ORDER = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def recorded_mcp_tools(run: Any) -> dict[str, dict[str, Any]]:
    """The run's MCP tools as its agent recorded them: offered name -> {"server", "annotations", "kind",
    "approval"} (none: {}). Raw values from a database row: shown as text, never markup."""
    shape = _shape(run)
    listed, rules = shape.get("mcp_tools"), shape.get("tool_rules")
    if not isinstance(listed, dict):
        return {}
    found = {}
    for name, facts in listed.items():
        if not isinstance(facts, dict):
            continue
        rule = rules.get(name) if isinstance(rules, dict) and isinstance(rules.get(name), dict) else {}
        annotations = facts.get("annotations")
        found[str(name)] = {"server": str(facts.get("server") or ""),
                            "annotations": annotations if isinstance(annotations, dict) else {},
                            "kind": rule.get("kind"), "approval": rule.get("approval")}
    return found


def mcp_hints_text(facts: dict) -> str:
    """One line of what an MCP tool's server said of it and what Dayflow made of that:
    ``destructiveHint true · idempotentHint false -> plain, asks a person``."""
    annotations = facts.get("annotations") or {}
    keys = [k for k in _HINT_ORDER if k in annotations] + sorted(k for k in annotations if k not in _HINT_ORDER)
    said = " · ".join(f"{key} {json.dumps(annotations[key], ensure_ascii=False)}" for key in keys)
    approval = facts.get("approval")
    asks = "asks a person" if approval is True else ("never asks" if approval in (False, None) else str(approval))
    made = f"{facts.get('kind') or '?'}, {asks}"
    return f"{said or 'no annotations'} -> {made}"


def recorded_mcp_servers(run: Any) -> dict[str, str]:
    """The run's MCP servers: name -> where it is (``http URL`` or ``stdio COMMAND ARGS``)."""
    servers = _shape(run).get("mcp_servers")
    if not isinstance(servers, dict):
        return {}
    found = {}
    for name, facts in servers.items():
        facts = facts if isinstance(facts, dict) else {}
        if facts.get("transport") == "http":
            found[str(name)] = f"http {facts.get('url')}"
        else:
            args = facts.get("args") if isinstance(facts.get("args"), list) else []
            found[str(name)] = "stdio " + " ".join(str(part) for part in [facts.get("command"), *args])
    return found


def _shape(run: Any) -> dict:
    try:
        shape = json.loads(getattr(run, "agent_shape", None) or "{}")
    except (TypeError, ValueError):
        return {}
    return shape if isinstance(shape, dict) else {}
