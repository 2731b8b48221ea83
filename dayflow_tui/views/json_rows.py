"""Stored JSON as rows to show: the JSON view's payloads, and ``dayflow show --raw``'s documents.

A step's reply and tool results are kept as the text the API sent; here they
become foldable payloads (the dashboard's JSON view) or one plain document
per step (``show --raw`` / ``--jsonl``). A stored column that is not valid
JSON (a damaged row) is kept as the text it holds, never hidden.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..safe_text import printable, printable_json


@dataclass(frozen=True)
class Payload:
    """One foldable part of what is shown: a title and its value (parsed JSON, or text that was not)."""

    title: str
    value: object = None
    text: str | None = None  # set when the stored text is not JSON: shown as it is, not highlighted

    @classmethod
    def from_stored(cls, title: str, stored: str | None) -> "Payload":
        try:
            return cls(title, json.loads(stored)) if stored is not None else cls(title, None)
        except (TypeError, ValueError):
            return cls(title, text=stored)

    def document(self) -> str:
        """What copy and the editor get: pretty JSON, or the text as stored (made printable)."""
        return printable(self.text) if self.text is not None else printable_json(self.value)


def _block_title(block: object, names: dict[str, str]) -> str:
    if not isinstance(block, dict):
        return type(block).__name__
    kind = str(block.get("type", "?"))
    if kind == "tool_use":
        return f"tool_use {block.get('name', '?')} ({block.get('id', '?')})"
    if kind == "tool_result":
        used = str(block.get("tool_use_id", "?"))
        failed = " error" if block.get("is_error") else ""
        return f"tool_result{failed} for {names.get(used, '?')} ({used})"
    if kind == "text":
        return f"text ({len(str(block.get('text', ''))):,} characters)"
    return kind


def step_payloads(view) -> list[Payload]:
    """A step's stored JSON (a ``StepView``) as payloads: each block of the reply, then each tool result."""
    names = {call.id: call.name for call in view.calls}
    payloads = []
    for part, stored in (("assistant", view.raw_assistant), ("user", view.raw_tool_results)):
        if stored is None:
            continue
        whole = Payload.from_stored(f"{part} (not JSON as stored)", stored)
        blocks = whole.value if whole.text is None else None
        if isinstance(blocks, dict) and isinstance(blocks.get("content"), list):
            blocks = blocks["content"]
        if isinstance(blocks, list) and blocks:
            payloads.extend(Payload(f"{part} · {_block_title(block, names)}", block) for block in blocks)
        else:
            payloads.append(whole if whole.text is not None else Payload(part, whole.value))
    return payloads


def request_payloads(messages: list) -> list[Payload]:
    """The next request's messages, one payload each."""
    payloads = []
    for number, message in enumerate(messages, 1):
        role = message.get("role", "?") if isinstance(message, dict) else "?"
        content = message.get("content") if isinstance(message, dict) else None
        blocks = f", {len(content)} blocks" if isinstance(content, list) else ""
        payloads.append(Payload(f"message {number} · {role}{blocks}", message))
    return payloads


def step_document(run_id: str, step) -> dict:
    """One stored step as plain data (``show --raw``): the blocks and tool results as stored, the reply body
    as the API sent it, tokens; a column that is not JSON is given as text under ``*_unreadable``."""
    from ..agent.replies import stored_raw

    doc: dict = {"run_id": run_id, "n": step.n, "stop_reason": step.stop_reason, "model": step.model,
                 "input_tokens": step.input_tokens, "output_tokens": step.output_tokens,
                 "cache_creation_input_tokens": step.cache_creation_input_tokens,
                 "cache_read_input_tokens": step.cache_read_input_tokens, "duration_ms": step.duration_ms,
                 "created_at": step.created_at}
    _parsed(step.assistant, "assistant", doc)
    _parsed(step.tool_results, "tool_results", doc)
    _parsed(stored_raw(step.raw, step.assistant), "reply_as_received", doc)
    return doc


def _parsed(text: str | None, name: str, into: dict) -> None:
    if text is None:
        into[name] = None
        return
    try:
        into[name] = json.loads(text)
    except ValueError:
        into[name] = None
        into[f"{name}_unreadable"] = text
