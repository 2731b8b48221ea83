"""The Messages API's structural rules for a request's ``messages``, as the tests hold them.

Our own statement of what the API rejects, so a request can be checked
without a network. Consecutive user turns are merged first, as the API does;
every rule is then checked on the merged list, which must alternate roles. ``problems`` returns every broken rule; tests assert it is
empty, and test it against requests known to be broken.
"""

from __future__ import annotations

from typing import Any

THINKING = ("thinking", "redacted_thinking")


def _blocks(content: Any) -> list[dict]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def merge_user_turns(messages: list[dict]) -> list[dict]:
    """Consecutive user turns as one turn, their blocks in order (what the API does with them)."""
    merged: list[dict] = []
    for message in messages:
        if merged and message.get("role") == "user" and merged[-1].get("role") == "user":
            merged[-1] = {"role": "user", "content": _blocks(merged[-1]["content"]) + _blocks(message["content"])}
        else:
            merged.append(message)
    return merged


def problems(messages: Any) -> list[str]:
    found: list[str] = []
    if not isinstance(messages, list) or not messages:
        return ["messages must be a non-empty list"]
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not (isinstance(content, str) and content) and not (isinstance(content, list) and content):
            found.append(f"message {i}: empty content")
    if found:
        return found
    messages = merge_user_turns(messages)
    if messages[0].get("role") != "user":
        found.append("the first message must be a user turn")
    seen_tool_ids: set[str] = set()
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant"):
            found.append(f"message {i}: role {role!r}")
            continue
        if set(message) - {"role", "content"}:
            found.append(f"message {i}: unknown fields {sorted(set(message) - {'role', 'content'})}")
        if i and messages[i - 1].get("role") == role:
            found.append(f"message {i}: two {role} turns in a row")
        if not (isinstance(content, str) and content) and not (isinstance(content, list) and content):
            found.append(f"message {i}: empty content")
            continue
        blocks = _blocks(content)
        for j, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "text" and not str(block.get("text", "")).strip():
                found.append(f"message {i} block {j}: empty text block")
            if kind in THINKING and role != "assistant":
                found.append(f"message {i} block {j}: {kind} outside an assistant turn")
            if kind == "thinking" and not block.get("signature"):
                found.append(f"message {i} block {j}: thinking without its signature")
            if kind == "redacted_thinking" and not block.get("data"):
                found.append(f"message {i} block {j}: redacted_thinking without data")
            if kind == "tool_use" and role != "assistant":
                found.append(f"message {i} block {j}: tool_use outside an assistant turn")
            if kind == "tool_result" and role != "user":
                found.append(f"message {i} block {j}: tool_result outside a user turn")
        if role == "assistant":
            ids = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            for tool_id in ids:
                if tool_id in seen_tool_ids:
                    found.append(f"message {i}: tool_use id {tool_id} used twice")
                seen_tool_ids.add(tool_id)
            if ids:
                answer = messages[i + 1] if i + 1 < len(messages) else None
                answered = ([b.get("tool_use_id") for b in _blocks(answer.get("content") or [])
                             if b.get("type") == "tool_result"] if answer and answer.get("role") == "user" else [])
                for tool_id in ids:
                    if tool_id not in answered:
                        found.append(f"message {i}: tool_use {tool_id} has no tool_result in the next turn")
        if role == "user":
            results = [b for b in blocks if b.get("type") == "tool_result"]
            if results:
                kinds = [b.get("type") for b in blocks]
                if kinds[: len(results)] != ["tool_result"] * len(results):
                    found.append(f"message {i}: tool_result blocks must come first in the turn")
                previous = messages[i - 1] if i else {}
                asked = ([b.get("id") for b in _blocks(previous.get("content") or [])
                          if b.get("type") == "tool_use"] if previous.get("role") == "assistant" else [])
                ids = [b.get("tool_use_id") for b in results]
                for tool_id in ids:
                    if tool_id not in asked:
                        found.append(f"message {i}: tool_result {tool_id} answers no tool_use of the turn before")
                if len(set(ids)) != len(ids):
                    found.append(f"message {i}: a tool_use answered twice")
    return found


def cache_breakpoints(request: dict) -> int:
    """Blocks with ``cache_control`` plus the top-level one: the API allows four."""
    count = 1 if request.get("cache_control") else 0
    count += sum(1 for b in _blocks(request.get("system") or []) if "cache_control" in b)
    count += sum(1 for t in request.get("tools") or [] if "cache_control" in t)
    for message in request.get("messages", []):
        count += sum(1 for b in _blocks(message.get("content") or []) if "cache_control" in b)
    return count


def without_breakpoints(messages: list[dict]) -> list[dict]:
    """The history a request was built from: its last message without the cache breakpoint the request adds.

    Dayflow puts ``cache_control`` on the last block of the last message (a string task becomes one text
    block to carry it); everything before it is the stored history byte for byte.
    """
    if not messages:
        return messages
    last = messages[-1]
    content = last.get("content")
    if not isinstance(content, list) or not any(isinstance(b, dict) and "cache_control" in b for b in content):
        return messages
    blocks = [{k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b for b in content]
    if len(blocks) == 1 and blocks[0].get("type") == "text" and set(blocks[0]) == {"type", "text"} \
            and last.get("role") == "user" and len(messages) == 1:
        blocks = blocks[0]["text"]  # the task, sent as one block to carry the breakpoint, is stored as a string
    return messages[:-1] + [{**last, "content": blocks}]
