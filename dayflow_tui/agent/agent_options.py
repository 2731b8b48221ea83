"""An agent's request options, in the Messages API's own shapes, checked when the agent is defined.

``Agent(max_tokens=, thinking=, tool_choice=, temperature=, top_p=, stop_sequences=, metadata=,
server_tools=[...], betas=[...], cache_ttl=)``: each is sent as given (``request.build_request``),
so the names and shapes are the API's (https://platform.claude.com/docs/en/api/messages/create).
What the API would refuse is refused here, one line naming the option, before a run is written:

- ``thinking``: ``{"type": "enabled", "budget_tokens": N}`` (N >= 1,024 and below ``max_tokens``),
  ``{"type": "adaptive"}`` or ``{"type": "disabled"}``; with thinking on, no ``temperature``, a
  ``top_p`` of 0.95 to 1, and ``tool_choice`` only ``auto`` or ``none`` (extended thinking page:
  https://platform.claude.com/docs/en/build-with-claude/extended-thinking).
- ``tool_choice``: ``auto``, ``any``, ``none``, or ``{"type": "tool", "name": ...}`` of one of its tools.
- ``server_tools``: the API's server tool definitions (``{"type": "web_search_20250305", "name":
  "web_search", "max_uses": 3}``), a ``type`` and a ``name`` each, no name twice or shared with a tool.
- ``betas``: the ``anthropic-beta`` header's values (``["context-1m-2025-08-07"]``).
- ``cache_ttl``: the prompt cache's lifetime, ``"5m"`` (the default) or ``"1h"`` (billed 2x input
  to write; for runs that wait on people or tools longer than five minutes).
"""

from __future__ import annotations

import re
from typing import Any

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_TOOL_CHOICES = ("auto", "any", "none", "tool")
CACHE_TTLS = ("5m", "1h")


class AgentOptionError(TypeError):
    """An agent option the API would refuse: one line naming it."""


def _fail(agent: str, option: str, why: str) -> None:
    raise AgentOptionError(f"agent {agent}: {option} {why}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_options(agent: str, tool_names: list[str], *, limits: Any, max_tokens: Any, thinking: Any, tool_choice: Any, temperature: Any, top_p: Any,
                  stop_sequences: Any, metadata: Any, server_tools: Any, betas: Any, cache_ttl: Any) -> None:
    """Refuse (``AgentOptionError``) any option the API would refuse; ``limits`` are the agent's model's
    (``model_limits.ModelLimits``) when it names a model the table knows (None: not checked against a model)."""
    model_max = limits.max_output if limits is not None else None
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            _fail(agent, "max_tokens", f"must be a whole number of tokens, 1 or more (got {max_tokens!r:.40})")
        if model_max is not None and max_tokens > model_max:
            _fail(agent, "max_tokens", f"{max_tokens:,} is more than its model allows ({model_max:,})")
    thinking_on = _check_thinking(agent, thinking, max_tokens)
    if thinking_on and limits is not None and limits.thinking is None:
        _fail(agent, "thinking", "is on, but its model has no thinking (as Dayflow's model table has it; "
              "[models.\"ID\"] thinking = \"extended\" in the settings file corrects it)")
    if thinking_on and thinking["type"] == "enabled" and max_tokens is None and limits is not None \
            and thinking["budget_tokens"] >= limits.sendable():
        _fail(agent, "thinking", f"budget_tokens must be less than the max_tokens sent ({limits.sendable():,})")
    if temperature is not None:
        if not _number(temperature) or not 0 <= temperature <= 1:
            _fail(agent, "temperature", f"must be a number from 0 to 1 (got {temperature!r:.40})")
        if thinking_on:
            _fail(agent, "temperature", "cannot be set with thinking on (the API refuses it)")
    if top_p is not None:
        if not _number(top_p) or not 0 <= top_p <= 1:
            _fail(agent, "top_p", f"must be a number from 0 to 1 (got {top_p!r:.40})")
        if thinking_on and top_p < 0.95:
            _fail(agent, "top_p", "must be 0.95 to 1 with thinking on (the API refuses less)")
    _check_tool_choice(agent, tool_choice, tool_names, thinking_on)
    if stop_sequences is not None:
        if (not isinstance(stop_sequences, (list, tuple))
                or not all(isinstance(s, str) and s.strip() for s in stop_sequences)):
            _fail(agent, "stop_sequences", "must be a list of strings, none of them blank")
    if metadata is not None:
        if not isinstance(metadata, dict) or set(metadata) - {"user_id"}:
            _fail(agent, "metadata", 'must be {"user_id": "..."} (the only field the API takes)')
        user = metadata.get("user_id")
        if user is not None and (not isinstance(user, str) or len(user) > 256):
            _fail(agent, "metadata", "user_id must be a string of at most 256 characters")
    _check_server_tools(agent, server_tools, tool_names)
    if not isinstance(betas, (list, tuple)) or not all(isinstance(b, str) and _NAME.match(b) for b in betas):
        _fail(agent, "betas", 'must be a list of beta names (["context-1m-2025-08-07"])')
    if cache_ttl not in CACHE_TTLS:
        _fail(agent, "cache_ttl", f'must be "5m" or "1h" (got {cache_ttl!r:.40})')


def _check_thinking(agent: str, thinking: Any, max_tokens: Any) -> bool:
    """Whether thinking is on; refuses a shape the API does not take."""
    if thinking is None:
        return False
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive", "disabled"):
        _fail(agent, "thinking", 'must be {"type": "enabled", "budget_tokens": N}, {"type": "adaptive"} '
              'or {"type": "disabled"}')
    shape = thinking["type"]
    allowed = {"type", "budget_tokens", "display"} if shape == "enabled" else {"type", "display"}
    extra = sorted(set(thinking) - allowed)
    if extra:
        _fail(agent, "thinking", f"has a field the API does not take: {extra[0]!r:.40}")
    if shape == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
            _fail(agent, "thinking", "budget_tokens must be a whole number, 1,024 or more")
        if max_tokens is not None and budget >= max_tokens:
            _fail(agent, "thinking", f"budget_tokens ({budget:,}) must be less than max_tokens ({max_tokens:,})")
    return shape != "disabled"


def _check_tool_choice(agent: str, choice: Any, tool_names: list[str], thinking_on: bool) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in _TOOL_CHOICES:
        _fail(agent, "tool_choice", 'must be {"type": "auto"}, {"type": "any"}, {"type": "none"} or '
              '{"type": "tool", "name": "..."}')
    extra = sorted(set(choice) - {"type", "name", "disable_parallel_tool_use"})
    if extra:
        _fail(agent, "tool_choice", f"has a field the API does not take: {extra[0]!r:.40}")
    if choice["type"] == "tool" and choice.get("name") not in tool_names:
        _fail(agent, "tool_choice", f"names {str(choice.get('name'))[:64]!r}, which is not one of its tools")
    if "disable_parallel_tool_use" in choice and not isinstance(choice["disable_parallel_tool_use"], bool):
        _fail(agent, "tool_choice", "disable_parallel_tool_use must be true or false")
    if thinking_on and choice["type"] in ("any", "tool"):
        _fail(agent, "tool_choice", f"{choice['type']!r} cannot be used with thinking on (only auto or none)")


def _check_server_tools(agent: str, server_tools: Any, tool_names: list[str]) -> None:
    if not isinstance(server_tools, (list, tuple)):
        _fail(agent, "server_tools", "must be a list of the API's server tool definitions")
    seen = set(tool_names)
    for item in server_tools:
        if not isinstance(item, dict) or not isinstance(item.get("type"), str) or not item.get("type"):
            _fail(agent, "server_tools", 'entries must be like {"type": "web_search_20250305", "name": "web_search"}')
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            _fail(agent, "server_tools", f"entry {item['type'][:60]!r} needs a name (letters, digits, _ and -)")
        if name in seen:
            _fail(agent, "server_tools", f"name {name!r} is used twice (a tool or another server tool has it)")
        seen.add(name)
        uses = item.get("max_uses")
        if uses is not None and (not isinstance(uses, int) or isinstance(uses, bool) or uses < 1):
            _fail(agent, "server_tools", f"{name}: max_uses must be a whole number, 1 or more")
