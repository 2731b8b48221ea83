"""Compaction: a long history becomes a shorter request without losing its decisions.

Every step re-sends the whole history, so late in a run each call carries
every earlier tool payload. ``compact`` replaces the old exchanges with a
deterministic, model-less summary and keeps the task and the latest
exchanges exactly as they are. It is a view on the request only: the
database keeps every step in full.

Shape of the result (all decisions below are tested in tests/agent/test_compaction.py):

- In: ``[task] [a1][u1] ... [aN][uN]``; out: ``[task] [summary] [the last keep_last pairs]``.
- A *pair* is one step: an assistant turn and, when it called tools, the
  user turn that answers it. A trailing assistant turn without results (an
  end_turn or pause_turn step) is a pair on its own, so ``keep_last=1``
  keeps exactly that turn.
- The task is the very same message object, not one byte changed, and the
  summary is a user turn of its own right after it. Two user turns in a row
  are valid: the API merges consecutive user turns into one, and the merged
  turn holds only text (the task, then the summary), so no tool_result rule
  is affected; the first kept pair then starts with an assistant turn, as
  the roles require.
- The summary's first block starts with ``Earlier in this run (compacted):``;
  then one text block per summarised step. A step's block depends only on
  that step, so as a run grows the summary of request k is a prefix of the
  summary of request k+1. The last summary block carries a cache breakpoint
  (one of the API's four; the request's top-level automatic caching takes
  another) so the next request re-reads the task and the summary from the
  prompt cache instead of paying for them again.
- Thinking: the kept pairs are untouched, so their thinking and
  redacted_thinking blocks go back byte for byte with their signatures (the
  API rejects edited thinking and needs the latest turn's thinking intact).
  Thinking in summarised steps is dropped whole, never quoted or edited:
  the API ignores thinking from earlier turns anyway, and the summary's text
  block is a user block, which starts a new turn for the thinking rules.
- Tool payloads are dropped. Kept per call: tool name, arguments, ok or the
  error code and message, how many items came back, and for a created task
  its id, key and whether it was new.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..money.tokens import estimate_tokens

__all__ = ["SUMMARY_PREFIX", "SummarisedCall", "compact", "estimate_tokens", "pairs_of", "summarise_step",
           "summarised_calls"]

SUMMARY_PREFIX = "Earlier in this run (compacted):"
SUMMARY_HEADER = (
    f"{SUMMARY_PREFIX} the older steps of this run were replaced by the summary below, one entry per step: "
    "the tools called with their arguments, ok or the error code, how many items came back, and every task "
    "created. Tool payloads were dropped; call a read tool again if you need one. The steps after this "
    "summary are verbatim."
)
# Long values are cut in the summary; task titles and keys (at most 200 characters) always fit whole.
_MAX_ARG_CHARS = 200
_MAX_TEXT_CHARS = 300
_CACHE_BREAKPOINT = {"type": "ephemeral"}


def compact(messages: list[dict], *, keep_last: int = 1, threshold_tokens: int = 40_000,
            size: int | None = None) -> list[dict]:
    """``messages`` with old exchanges summarised, or ``messages`` itself (the same object).

    Nothing changes when the estimate is at or below ``threshold_tokens``,
    when there are no more than ``keep_last`` pairs, or when the summary
    would not be smaller than what it replaces.
    """
    if keep_last < 0:
        raise ValueError(f"keep_last must be 0 or more, got {keep_last}")
    if size is None:  # the caller's ``estimate_tokens(messages)``, when it has it
        size = estimate_tokens(messages) if messages else 0
    if size <= threshold_tokens:
        return messages
    task, pairs = messages[0], pairs_of(messages)
    if len(pairs) <= keep_last:
        return messages
    old = pairs[: len(pairs) - keep_last]
    kept = pairs[len(pairs) - keep_last:]
    summary = [{"type": "text", "text": SUMMARY_HEADER}]
    summary += [{"type": "text", "text": summarise_step(n, pair)} for n, pair in enumerate(old, start=1)]
    summary[-1] = {**summary[-1], "cache_control": dict(_CACHE_BREAKPOINT)}
    compacted = [task, {"role": "user", "content": summary}] + [message for pair in kept for message in pair]
    if estimate_tokens(compacted) >= size:
        return messages
    return compacted


def pairs_of(messages: list[dict]) -> list[list[dict]]:
    """The steps after the task: each an assistant turn plus the user turn answering it, if any."""
    if messages[0].get("role") != "user":
        raise ValueError("the first message must be the user's task")
    pairs: list[list[dict]] = []
    for index, message in enumerate(messages[1:], start=1):
        role = message.get("role")
        if role == "assistant":
            pairs.append([message])
        elif role == "user" and pairs and len(pairs[-1]) == 1:
            pairs[-1].append(message)
        else:
            previous = messages[index - 1].get("role")
            raise ValueError(f"message {index}: a {role!r} turn cannot follow a {previous!r} turn here")
    return pairs


def _as_blocks(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[:limit]}… (+{len(flat) - limit} chars)"


def _arguments(args: Any) -> str:
    """The call's arguments as compact JSON, long string values cut (titles and keys fit whole)."""
    if isinstance(args, dict):
        args = {key: _one_line(value, _MAX_ARG_CHARS) if isinstance(value, str) and len(value) > _MAX_ARG_CHARS
                else value for key, value in args.items()}
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def _result_text(block: dict) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _outcome(result: dict | None) -> str:
    """ok or the error code, item count, and the task decision: no payload."""
    if result is None:
        return "no result"
    text = _result_text(result)
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        if result.get("is_error"):
            return f"error: {_one_line(text, _MAX_TEXT_CHARS)}"
        return f"ok, {len(text)} chars of text (dropped)"
    error = payload.get("error")
    if result.get("is_error") or payload.get("ok") is False:
        code = error.get("code", "error") if isinstance(error, dict) else "error"
        message = error.get("message", "") if isinstance(error, dict) else str(error or "")
        return f"error {code}: {_one_line(str(message), _MAX_TEXT_CHARS)}" if message else f"error {code}"
    parts = ["ok"]
    task = payload.get("task")
    if isinstance(task, dict):
        verb = "created task" if payload.get("created") else "task already existed:"
        parts.append(f"{verb} #{task.get('id')} key {json.dumps(task.get('idempotency_key'), ensure_ascii=False)}")
    count = payload.get("count")
    if isinstance(count, int) and not isinstance(count, bool):
        parts.append(f"{count} item(s) (dropped)")
    return ", ".join(parts)


def summarise_step(n: int, pair: list[dict]) -> str:
    """One step as a few lines: what was said (cut), each call, its outcome. Depends only on the step."""
    assistant, answer = pair[0], (pair[1] if len(pair) > 1 else None)
    blocks = _as_blocks(assistant.get("content") or [])
    results = {}
    user_texts = []
    if answer is not None:
        for block in _as_blocks(answer.get("content") or []):
            if block.get("type") == "tool_result":
                results[block.get("tool_use_id")] = block
            elif block.get("type") == "text":
                user_texts.append(block.get("text", ""))
    lines = [f"Step {n}:"]
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and block.get("text", "").strip():
            lines.append(f"- said: {_one_line(block['text'], _MAX_TEXT_CHARS)}")
        elif kind == "tool_use":
            lines.append(f"- called {block.get('name')} {_arguments(block.get('input'))} -> "
                         f"{_outcome(results.get(block.get('id')))}")
        elif kind in ("thinking", "redacted_thinking"):
            continue  # dropped whole (see the module docstring)
        elif kind is not None and kind != "text":
            lines.append(f"- {kind} block (dropped)")
    for text in user_texts:
        lines.append(f"- user said: {_one_line(text, _MAX_TEXT_CHARS)}")
    if len(lines) == 1:
        lines.append("- (no text or tool calls)")
    return "\n".join(lines)


@dataclass(frozen=True)
class SummarisedCall:
    """One tool call as a compacted request still tells it (read back from the summary's text)."""

    step: int
    name: str
    input: Any
    outcome: str  # "ok, created task #4 key \"mail-1\"", "error invalid_input: ...", ...

    @property
    def ok(self) -> bool:
        return self.outcome.startswith("ok")

    @property
    def created(self) -> bool:
        return self.outcome.startswith("ok, created task #")

    @property
    def error_code(self) -> str | None:
        found = _ERROR.match(self.outcome)
        return found.group(1) if found else None


_STEP = re.compile(r"^Step (\d+):")
_ERROR = re.compile(r"^error (\S+?)(?::|$)")
_CALLED = "- called "


def summarised_calls(messages: list[dict]) -> list[SummarisedCall]:
    """The calls a compacted request summarises, in order; empty when it is not compacted.

    The reading side of ``summarise_step``: a model that only sees the
    request (the offline model) uses it to know what was done before.
    """
    content = messages[1].get("content") if len(messages) > 1 and messages[1].get("role") == "user" else None
    if not isinstance(content, list):
        return []
    texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    start = next((i for i, text in enumerate(texts) if text.startswith(SUMMARY_PREFIX)), None)
    if start is None:
        return []
    calls = []
    decoder = json.JSONDecoder()
    for text in texts[start + 1:]:
        step = _STEP.match(text)
        if step is None:
            continue
        for line in text.splitlines()[1:]:
            if not line.startswith(_CALLED):
                continue
            name, _, rest = line[len(_CALLED):].partition(" ")
            try:
                args, end = decoder.raw_decode(rest)
            except ValueError:
                continue
            if rest[end:].startswith(" -> "):
                calls.append(SummarisedCall(int(step.group(1)), name, args, rest[end + 4:]))
    return calls

