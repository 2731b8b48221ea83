"""Where a request asks the prompt cache to keep its prefix: the breakpoints, placed the same way every time.

Two ``cache_control`` breakpoints (the API takes at most four): one after the system prompt, which
caches the tools and the system prompt (the API caches in the order tools, system, messages), and one
on the last block of the last message, which caches the whole history for the next step. The next
request re-sends that history byte for byte, so it reads it from the cache and writes only what was
added (https://platform.claude.com/docs/en/build-with-claude/prompt-caching). The history itself is
never changed: the message that carries the breakpoint is a copy, so the same history always makes
the same request bytes, and what the store keeps is what the API sent.
"""

from __future__ import annotations

from typing import Any

# Blocks that may not carry cache_control themselves (a breakpoint goes on the block before them).
_NOT_CACHEABLE = {"thinking", "redacted_thinking"}


def control(ttl: str) -> dict:
    """The ``cache_control`` value for a lifetime (``"5m"``: the API's default, so no ttl field is sent)."""
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def system_with_breakpoint(system: str, ttl: str) -> Any:
    """The system prompt as one text block carrying the breakpoint (an empty prompt stays as it is)."""
    if not system:
        return system
    return [{"type": "text", "text": system, "cache_control": control(ttl)}]


def tools_with_breakpoint(tools: list[dict], ttl: str) -> list[dict]:
    """With no system prompt to carry it, the last tool carries the breakpoint (a copy)."""
    if not tools:
        return tools
    return tools[:-1] + [{**tools[-1], "cache_control": control(ttl)}]


def messages_with_breakpoint(messages: list[dict], ttl: str) -> list[dict]:
    """``messages`` with the breakpoint on the last cacheable block of the last message (copies, never edits)."""
    if not messages:
        return messages
    last = messages[-1]
    content = last.get("content")
    if isinstance(content, str):
        if not content:
            return messages
        blocks = [{"type": "text", "text": content, "cache_control": control(ttl)}]
    elif isinstance(content, list):
        at = next((i for i in range(len(content) - 1, -1, -1) if isinstance(content[i], dict)
                   and content[i].get("type") not in _NOT_CACHEABLE
                   and not (content[i].get("type") == "text" and not content[i].get("text"))), None)
        if at is None:
            return messages
        blocks = list(content)
        blocks[at] = {**content[at], "cache_control": control(ttl)}
    else:
        return messages
    return messages[:-1] + [{**last, "content": blocks}]


def has_message_breakpoint(request: dict) -> bool:
    """Whether the last message carries a breakpoint (so the whole history is cached), or top-level caching."""
    if isinstance(request.get("cache_control"), dict):
        return True
    messages = request.get("messages") or []
    content = messages[-1].get("content") if messages else None
    return isinstance(content, list) and any(isinstance(b, dict) and "cache_control" in b for b in content)
