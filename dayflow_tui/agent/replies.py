"""A paid reply: its body as received, and the step it becomes.

The body is kept as text exactly as the API sent it; the blocks, usage and
stop reason are read from that text here, defensively. A reply that cannot
be used (not a JSON object, content that is not a list of blocks, token
counts no column can hold, two tool calls with one id) is not an exception
that loses the reply: ``normalise`` says why, and the driver commits the
body anyway and ends the run ``failed`` with that reason, once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# No real call uses a hundred million tokens; a count past it is a broken reply, not a bill.
MAX_TOKENS_PER_CALL = 100_000_000
# Stored as a JSON string literal when the body holds what a text column refuses (NUL, lone surrogates).
ESCAPED_PREFIX = "dayflow-escaped-json:"
# Stored without its content array when that array is, byte for byte, the step's stored blocks: the
# body is rebuilt exactly by putting the blocks back at the offset kept here (a reply is not stored twice).
PACKED_PREFIX = "dayflow-packed:"

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class BadReply(ValueError):
    """The reply cannot be turned into a step; the message is the one-line reason."""


@dataclass
class Reply:
    """What a paid call returned: the body text (when the client gives one) and the decoded fields."""

    raw: str
    blocks: list[dict]
    stop_reason: str | None
    model: str | None
    usage: tuple[int, int, int, int]  # whole input (uncached + cache writes + reads), output, cache write, cache read
    # Billed apart: the cache writes kept for an hour (of cache write), and the web searches made.
    cache_write_1h: int = 0
    web_searches: int = 0


def body_text(response: Any) -> str:
    """The response body as text: the HTTP body of a raw SDK response, or the serialised reply object."""
    http = getattr(response, "http_response", None)
    if http is not None:
        return http.text
    if isinstance(response, (str, bytes)):
        return response.decode("utf-8", "replace") if isinstance(response, bytes) else response
    # A reply object (the offline model, a client without raw responses) is serialised compactly, as the
    # API sends it, so its content array matches the stored blocks and is not stored twice.
    if hasattr(response, "to_dict"):
        return _compact(response.to_dict(mode="json"))
    if hasattr(response, "model_dump"):
        return _compact(response.model_dump(mode="json", exclude_unset=True))
    return _compact(response)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def storable_raw(raw: str, assistant_json: str | None = None) -> str:
    """The body as a text column holds it, losslessly.

    PostgreSQL refuses NUL and lone surrogates: such a body is kept as an
    escaped JSON string. A body whose content array is exactly
    ``assistant_json`` (the step's stored blocks) is kept without it.
    """
    if "\x00" in raw or _LONE_SURROGATE.search(raw):
        return ESCAPED_PREFIX + json.dumps(raw, ensure_ascii=True)
    if assistant_json and not raw.startswith((ESCAPED_PREFIX, PACKED_PREFIX)):
        at = raw.find(assistant_json)
        if at >= 0 and raw.find(assistant_json, at + 1) < 0:
            return f"{PACKED_PREFIX}{at}:{raw[:at]}{raw[at + len(assistant_json):]}"
    return raw


def stored_raw(value: str | None, assistant_json: str | None = None) -> str | None:
    """The body as received, from what ``storable_raw`` stored (``assistant_json``: the step's stored blocks)."""
    if value is None:
        return None
    if value.startswith(ESCAPED_PREFIX):
        return json.loads(value[len(ESCAPED_PREFIX):])
    if value.startswith(PACKED_PREFIX):
        at_text, _colon, rest = value[len(PACKED_PREFIX):].partition(":")
        at = int(at_text)
        return rest[:at] + (assistant_json or "") + rest[at:]
    return value


def storable_text(text: str | None) -> str | None:
    """Model text for a plain column (final text, errors): NUL shown as an escape, the rest as sent."""
    if text is None:
        return None
    return _LONE_SURROGATE.sub("\ufffd", text).replace("\x00", "\\u0000")


def mend_surrogates(value: Any) -> Any:
    """Lone surrogates (a JSON ``\\udcff`` escape: bytes that were never UTF-8) become U+FFFD.

    They cannot be stored as UTF-8 text, printed or sent back; left in, the
    paid response could never be committed and every resume would fail on it.
    """
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [mend_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {mend_surrogates(k): mend_surrogates(v) for k, v in value.items()}
    return value


def _count(usage: dict, name: str) -> int:
    value = usage.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadReply(f"usage.{name} is not a whole number ({type(value).__name__})")
    if not 0 <= value <= MAX_TOKENS_PER_CALL:
        raise BadReply(f"usage.{name} is out of range ({value})")
    return value


def normalise(raw: str) -> Reply:
    """Decode a reply body; ``BadReply`` names the first thing that makes it unusable."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise BadReply(f"the body is not JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(body, dict):
        raise BadReply(f"the body is a JSON {type(body).__name__}, not a message object")
    if body.get("type", "message") != "message":
        raise BadReply(f"the body is of type {str(body.get('type'))[:40]!r}, not a message")
    content = body.get("content")
    if not isinstance(content, list) or not all(isinstance(b, dict) and isinstance(b.get("type"), str)
                                                for b in content):
        raise BadReply("content is not a list of blocks with a type")
    blocks = mend_surrogates(content)
    ids = []
    for block in blocks:
        if block["type"] == "tool_use":
            if not isinstance(block.get("id"), str) or not block["id"] or not isinstance(block.get("name"), str):
                raise BadReply("a tool_use block has no id or name")
            ids.append(block["id"])
    if len(set(ids)) != len(ids):
        raise BadReply("two tool_use blocks share one id")
    stop_reason = body.get("stop_reason")
    if stop_reason is not None and not isinstance(stop_reason, str):
        raise BadReply(f"stop_reason is a {type(stop_reason).__name__}, not text")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadReply(f"model is a {type(model).__name__}, not text")
    usage = body.get("usage") or {}
    if not isinstance(usage, dict):
        raise BadReply("usage is not an object")
    uncached, output = _count(usage, "input_tokens"), _count(usage, "output_tokens")
    cache_write = _count(usage, "cache_creation_input_tokens")
    cache_read = _count(usage, "cache_read_input_tokens")
    # The breakdowns (https://platform.claude.com/docs/en/build-with-claude/prompt-caching, "Tracking cache
    # performance"; the web search tool's "Usage"): absent from older replies, 0 then.
    breakdown = usage.get("cache_creation")
    hour = _count(breakdown, "ephemeral_1h_input_tokens") if isinstance(breakdown, dict) else 0
    servers = usage.get("server_tool_use")
    searches = _count(servers, "web_search_requests") if isinstance(servers, dict) else 0
    # input_tokens means the whole input of the call: uncached + cache writes + cache reads.
    return Reply(raw=raw, blocks=blocks, stop_reason=mend_surrogates(stop_reason),
                 model=mend_surrogates(model), usage=(uncached + cache_write + cache_read, output, cache_write,
                                                      cache_read), cache_write_1h=min(hour, cache_write),
                 web_searches=searches)
