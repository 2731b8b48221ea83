"""Where a run's agent comes from, and whether it is still the agent the run started with.

A run records a reference to its agent (``pkg.module:attr``, or
``/abs/path/file.py:attr`` made absolute when the run is created, or nothing
for the built-in brief) and the agent's shape (system prompt, tool schemas,
model) with its sha256. A resume or a worker loads the agent again from the
reference and compares: a changed agent is refused with what changed, unless
a person allows it (``--allow-changed-agent``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from ..config.errors import AgentChanged, AgentNotFound, NoSuchFile
from .define import Agent


def builtin() -> Agent:
    from .brief import AGENT

    return AGENT


def resolve_ref(spec: str) -> str:
    """A reference that finds the agent again from any working directory (a file path made absolute)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise AgentNotFound(f"{spec!r}: name an agent as MODULE:ATTR or path/to/file.py:ATTR")
    if target.endswith(".py") or "/" in target or target.startswith("."):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise NoSuchFile(f"{spec!r}: no file {path}")
        return f"{path}:{attr}"
    return spec


def load_agent(ref: str | None) -> Agent:
    """The agent ``ref`` names (None: the built-in brief); ``AgentNotFound`` with one line otherwise.

    ``PARENT_REF>NAME`` is the subagent ``NAME`` of the agent ``PARENT_REF`` (a child run's record).
    """
    if ref and ">" in ref:
        parent_ref, _sep, name = ref.rpartition(">")
        parent = load_agent(parent_ref)
        found = next((t.subagent for t in parent.tools if t.subagent is not None and t.subagent.name == name), None)
        if found is None:
            raise AgentNotFound(f"agent {ref}: {parent.name} has no subagent {name!r}")
        return found.connected()
    if not ref or ref == "brief":
        return builtin()
    target, _sep, attr = ref.rpartition(":")
    try:
        if target.endswith(".py") or "/" in target:
            name = "dayflow_agent_" + hashlib.sha256(target.encode()).hexdigest()[:12]
            module = sys.modules.get(name)
            if module is None:
                spec = importlib.util.spec_from_file_location(name, target)
                if spec is None or spec.loader is None:
                    raise AgentNotFound(f"agent {ref}: {target} cannot be imported")
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(name, None)
                    raise
        else:
            import os

            if os.getcwd() not in sys.path:  # as `python -m` does: a module beside where you run dayflow
                sys.path.append(os.getcwd())
            module = importlib.import_module(target)
    except AgentNotFound:
        raise
    except (Exception, SystemExit) as exc:  # the user's code: any failure is one line, not a traceback
        from ..redaction import redacted_line

        raise AgentNotFound(f"agent {ref} cannot be imported: {redacted_line(f'{type(exc).__name__}: {exc}', 300)}"
                            ) from None
    agent = getattr(module, attr, None)
    if agent is None:
        raise AgentNotFound(f"agent {ref}: {target} has no {attr!r}")
    if callable(agent) and not isinstance(agent, Agent):
        try:
            agent = agent()
        except Exception as exc:
            raise AgentNotFound(f"agent {ref}: calling {attr}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(agent, Agent):
        raise AgentNotFound(f"agent {ref}: {attr} is a {type(agent).__name__}, not a dayflow Agent")
    return agent.connected()  # an agent with MCP servers: their tools listed (the servers start here)


def agent_columns(agent: Agent, ref: str | None) -> dict[str, Any]:
    """The run's record of its agent."""
    return {"agent": agent.name, "agent_ref": ref, "agent_fingerprint": agent.fingerprint(),
            "agent_shape": json.dumps(agent.describe(), ensure_ascii=False, sort_keys=True)}


def what_changed(before: dict, after: dict) -> list[str]:
    changes = []
    if before.get("system") != after.get("system"):
        changes.append("the system prompt")
    if before.get("model") != after.get("model"):
        changes.append(f"the model ({before.get('model')} -> {after.get('model')})")
    old, new = before.get("tools", {}), after.get("tools", {})
    changes += [f"tool {name} added" for name in sorted(set(new) - set(old))]
    changes += [f"tool {name} removed" for name in sorted(set(old) - set(new))]
    changes += [f"tool {name}'s arguments" for name in sorted(set(old) & set(new)) if old[name] != new[name]]
    old_options, new_options = before.get("options") or {}, after.get("options") or {}
    changes += [f"option {name}" for name in sorted(set(old_options) | set(new_options))
                if old_options.get(name) != new_options.get(name)]
    old_rules, new_rules = before.get("tool_rules"), after.get("tool_rules", {})
    if isinstance(old_rules, dict):
        for name in sorted(set(old_rules) & set(new_rules)):
            was, now = old_rules[name] or {}, new_rules[name] or {}
            if was.get("kind") != now.get("kind"):
                changes.append(f"tool {name}'s kind ({was.get('kind')} -> {now.get('kind')})")
            elif was.get("key") != now.get("key"):
                changes.append(f"tool {name}'s idempotency key ({was.get('key')} -> {now.get('key')})")
            if was.get("approval") != now.get("approval"):
                changes.append(f"tool {name}'s approval rule ({_rule_words(was.get('approval'))} -> "
                               f"{_rule_words(now.get('approval'))})")
    old_servers, new_servers = before.get("mcp_servers") or {}, after.get("mcp_servers") or {}
    changes += [f"MCP server {name}'s settings" for name in sorted(set(old_servers) | set(new_servers))
                if old_servers.get(name) != new_servers.get(name)]
    old_mcp, new_mcp = before.get("mcp_tools") or {}, after.get("mcp_tools") or {}
    # A tool the run knew whose recorded hints differ (or were not recorded: a run started before they were).
    changes += [f"tool {name}'s MCP annotations" for name in sorted(set(new_mcp) & set(old))
                if old_mcp.get(name) != new_mcp[name]]
    return changes or ["its definition"]


def _rule_words(rule: Any) -> str:
    if rule is True:
        return "always asks"
    if rule is False or rule is None:
        return "never asks"
    return "a predicate" if str(rule).startswith("predicate:") else str(rule)[:40]


def _records_rules(run: Any) -> bool:
    try:
        return "tool_rules" in json.loads(run.agent_shape or "{}")
    except (TypeError, ValueError):
        return False


def agent_for_run(run: Any, *, allow_changed: bool = False) -> tuple[Agent, dict[str, Any] | None]:
    """The run's agent, loaded again and checked; with ``allow_changed``, also the new record to store."""
    agent = load_agent(getattr(run, "agent_ref", None))
    recorded = getattr(run, "agent_fingerprint", None)
    if recorded is None or recorded == agent.fingerprint():
        return agent, None
    if recorded == agent.legacy_fingerprint() and not _records_rules(run):
        return agent, None  # recorded before kinds and approval rules were fingerprinted: nothing more to compare
    try:
        before = json.loads(run.agent_shape) if run.agent_shape else {}
    except ValueError:
        before = {}
    changes = what_changed(before, agent.describe())
    if not allow_changed:
        raise AgentChanged(f"run {run.id}: agent {agent.name} changed since the run started ({', '.join(changes)}); "
                           f"resume with --allow-changed-agent to go on with the new definition")
    return agent, agent_columns(agent, getattr(run, "agent_ref", None))


def recorded_options(run: Any) -> dict[str, Any]:
    """The request options the run's agent had when the run recorded it (``Agent.options``; none: {})."""
    try:
        shape = json.loads(getattr(run, "agent_shape", None) or "{}")
    except (TypeError, ValueError):
        return {}
    options = shape.get("options") if isinstance(shape, dict) else None
    return options if isinstance(options, dict) else {}


def options_text(options: dict[str, Any]) -> str:
    """One line of an agent's options: ``max_tokens 20000 · thinking enabled (8000) · web_search (max 3)``.

    Raw values from a database row: the caller shows it as text, never markup.
    """
    parts = []
    order = ("max_tokens", "thinking", "tool_choice", "temperature", "top_p", "stop_sequences", "metadata",
             "server_tools", "betas", "cache_ttl")
    for name, value in sorted(options.items(), key=lambda item: (order.index(item[0]) if item[0] in order
                                                                 else len(order), item[0])):
        if name == "thinking" and isinstance(value, dict):
            budget = value.get("budget_tokens")
            parts.append(f"thinking {value.get('type')}" + (f" ({budget})" if budget is not None else ""))
        elif name == "server_tools" and isinstance(value, list):
            parts += [f"{t.get('name')}" + (f" (max {t['max_uses']})" if t.get("max_uses") else "")
                      for t in value if isinstance(t, dict)]
        elif name == "tool_choice" and isinstance(value, dict):
            parts.append(f"tool_choice {value.get('type')}" + (f" {value['name']}" if value.get("name") else ""))
        elif isinstance(value, list):
            parts.append(f"{name} {', '.join(str(v) for v in value)}")
        elif isinstance(value, dict):
            parts.append(f"{name} {json.dumps(value, ensure_ascii=False, sort_keys=True)}")
        else:
            parts.append(f"{name} {value}")
    return " · ".join(parts)
