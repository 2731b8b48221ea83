"""A streamed reply: server-sent events read off the wire, put together into the message the API meant.

Every call streams (``request.call_model``), so a long reply is never refused for taking too long and the
dashboard can show it forming. What is committed is still one message body: the events are folded, on
plain JSON, into exactly the object a non-streaming call returns (the ``message_start`` message, its
blocks as each ``content_block_start`` gave them with their deltas applied, ``message_delta``'s stop
reason and usage), so every field the API sent is kept, including ones this code has never heard of.

Folding follows the SDK's own ``anthropic.lib.streaming._messages.accumulate_event``: text, thinking and
signature deltas append or set; ``input_json_delta`` pieces are joined and parsed once the block stops;
citations are appended; a ``message_delta``'s usage counts are totals that replace what was there.

A stream that cannot be folded (no ``message_start``, an event that is not JSON, a tool's input that is
not a JSON object) is still a paid reply: ``MessageFolder.body`` then returns the events as received,
which ``replies.normalise`` refuses with its reason, and the run ends ``failed`` once, its bytes kept.
A stream that stops early (the connection drops, an ``error`` event such as ``overloaded_error``) is
``StreamBroken``: no reply came, the attempt failed (``runs`` backs off and counts it).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ..config.errors import StreamBroken

# Deltas the dashboard draws as they arrive: (block index, kind, piece of text).
DELTA_KINDS = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking"),
               "input_json_delta": ("input", "partial_json")}


@dataclass(frozen=True)
class ReplyDelta:
    """A piece of a reply still being written, for a front end that shows it forming (never stored)."""

    run_id: str
    n: int  # the step the reply will be
    index: int  # the content block it belongs to
    kind: str  # "text", "thinking", "input" (a tool call's arguments, as JSON text), "start" (a block begins)
    text: str  # the piece; for "start", the block's type and (for a tool call) its name: "tool_use:create_task"


OnDelta = Callable[[ReplyDelta], None]


def sse_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a byte stream, ended by CR, LF or CRLF only (the SSE rule; ``str.splitlines`` and httpx's
    ``iter_lines`` also break at U+0085 and U+2028, which a model's text may hold raw), each decoded as UTF-8."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        start = 0
        while True:
            ends = [at for at in (pending.find(b"\n", start), pending.find(b"\r", start)) if at >= 0]
            if not ends:
                break
            cut = min(ends)
            if pending[cut] == 0x0D:  # CR: alone, or the first half of a CRLF (maybe in the next chunk)
                if cut + 1 == len(pending):
                    break
                width = 2 if pending[cut + 1] == 0x0A else 1
            else:
                width = 1
            yield pending[start:cut].decode("utf-8", "replace")
            start = cut + width
        pending = pending[start:]
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", "replace")


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(event name, data text) for each server-sent event in ``lines`` (the SSE rules: ``data`` lines joined
    with newlines, a blank line ends an event, ``:`` lines are comments)."""
    name, data = "", []
    for line in lines:
        line = line.rstrip("\r\n")
        if not line:
            if data or name:
                yield name or "message", "\n".join(data)
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _colon, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    if data or name:
        yield name or "message", "\n".join(data)


class MessageFolder:
    """Folds a reply's events into its message, keeping the events as received for a reply that will not fold."""

    def __init__(self, on_piece: Callable[[int, str, str], None] | None = None):
        self.on_piece = on_piece
        self.received: list[str] = []  # the events as they came, SSE-framed
        self.message: dict | None = None
        self.stopped = False
        self.problem: str | None = None  # why the events do not make a message (the reply is kept as received)
        self._json: dict[int, list[str]] = {}

    def feed_sse(self, name: str, data: str) -> None:
        """One event as read off the wire."""
        self.received.append(f"event: {name}\ndata: {data}\n\n")
        if name == "ping":
            return
        try:
            event = json.loads(data)
        except ValueError as exc:
            self._fail(f"the {name!r} event is not JSON ({exc.msg})")
            return
        if name == "error" or (isinstance(event, dict) and event.get("type") == "error"):
            error = event.get("error") if isinstance(event, dict) else None
            error = error if isinstance(error, dict) else {}
            kind = error.get("type") if isinstance(error.get("type"), str) else None
            raise StreamBroken(f"the reply's stream ended with an error event ({kind or 'no type'}): "
                               f"{' '.join(str(error.get('message') or '').split())[:200]}", error_type=kind)
        self.feed(event)

    def feed(self, event: Any) -> None:
        """One event as JSON (or an object with ``to_dict``: the SDK's and the offline model's events)."""
        if hasattr(event, "to_dict"):
            event = event.to_dict(mode="json")
        if self.problem is not None or self.stopped:
            return
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self._fail("an event is not an object with a type")
            return
        try:
            self._apply(event)
        except ValueError as exc:  # the folder's own reasons, and a tool input that is not JSON
            self._fail(f"a {event['type']!r} event does not fit the message so far: {str(exc)[:120]}")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            self._fail(f"a {event['type']!r} event does not fit the message so far ({type(exc).__name__} "
                       f"{str(exc)[:60]})")

    def _apply(self, event: dict) -> None:
        kind = event["type"]
        if kind == "message_start":
            if self.message is not None:
                raise ValueError("a second message_start")
            self.message = copy.deepcopy(event["message"])
            if not isinstance(self.message.get("content"), list):
                self.message["content"] = []
            return
        if kind == "ping":
            return
        if self.message is None:
            raise ValueError(f"{kind} before message_start")
        content: list = self.message["content"]
        if kind == "content_block_start":
            index = event.get("index", len(content))
            if index != len(content):
                raise IndexError(index)
            block = copy.deepcopy(event["content_block"])
            content.append(block)
            if self.on_piece is not None:
                label = block.get("type", "")
                if isinstance(block.get("name"), str):
                    label += ":" + block["name"]
                self.on_piece(index, "start", label)
        elif kind == "content_block_delta":
            index, delta = event["index"], event["delta"]
            block = content[index]
            what = delta.get("type")
            if what == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif what == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif what == "signature_delta":
                block["signature"] = delta["signature"]
            elif what == "input_json_delta":
                self._json.setdefault(index, []).append(delta["partial_json"])
            elif what == "citations_delta":
                block["citations"] = [*(block.get("citations") or []), delta["citation"]]
            else:
                raise ValueError(f"unknown delta {what!r}")
            if self.on_piece is not None and what in DELTA_KINDS:
                piece_kind, field = DELTA_KINDS[what]
                self.on_piece(index, piece_kind, delta[field])
        elif kind == "content_block_stop":
            pieces = self._json.pop(event["index"], None)
            if pieces is not None and "".join(pieces):
                arguments = json.loads("".join(pieces))
                if not isinstance(arguments, dict):
                    raise ValueError("a tool call's input is not a JSON object")
                content[event["index"]]["input"] = arguments
        elif kind == "message_delta":
            for key, value in (event.get("delta") or {}).items():
                if key.startswith("stop_") or value is not None:
                    self.message[key] = value
            if isinstance(event.get("usage"), dict):
                usage = self.message.setdefault("usage", {})
                usage.update((key, value) for key, value in event["usage"].items() if value is not None)
        elif kind == "message_stop":
            self.stopped = True
        # Any other event type is new to this code and changes nothing it knows of (the SSE rules: ignore).

    def _fail(self, why: str) -> None:
        if self.problem is None:
            self.problem = why

    def body(self) -> str:
        """The reply's body: the folded message as compact JSON, or (when it would not fold) the events as
        received, which ``replies.normalise`` refuses with a reason."""
        if self.problem is None and self.message is not None and self.stopped:
            return json.dumps(self.message, ensure_ascii=False, separators=(",", ":"))
        why = self.problem or ("the stream sent no message_start" if self.message is None
                               else "the stream ended without message_stop")
        return f"dayflow: a streamed reply that does not make a message: {why}\n" + "".join(self.received)


def events_of(message: dict, *, piece: int = 12) -> Iterator[dict]:
    """The events a server streams for ``message`` (a whole reply as JSON), its text cut in ``piece``-character
    deltas: the offline model's stream and the test servers' are made here. Folding them gives ``message``
    back, field for field and in order."""
    message = copy.deepcopy(message)
    blocks = message.get("content") or []
    usage = message.get("usage") or {}
    start = {**message, "content": []}
    stops = {key: message[key] for key in ("stop_reason", "stop_sequence") if key in message}
    start.update(dict.fromkeys(stops))
    if "usage" in message:
        start["usage"] = {**usage, "output_tokens": min(1, usage.get("output_tokens", 0) or 0)}
    yield {"type": "message_start", "message": start}
    for index, block in enumerate(blocks):
        first, deltas = _block_start(block, piece)
        yield {"type": "content_block_start", "index": index, "content_block": first}
        for delta in deltas:
            yield {"type": "content_block_delta", "index": index, "delta": delta}
        yield {"type": "content_block_stop", "index": index}
    yield {"type": "message_delta", "delta": stops,
           **({"usage": {"output_tokens": usage.get("output_tokens", 0)}} if "usage" in message else {})}
    yield {"type": "message_stop"}


def _block_start(block: dict, piece: int) -> tuple[dict, list[dict]]:
    """A block's ``content_block_start`` form and the deltas that complete it."""
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str) and not block.get("citations"):
        return {**block, "text": ""}, [{"type": "text_delta", "text": part} for part in _cut(block["text"], piece)]
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        deltas = [{"type": "thinking_delta", "thinking": part} for part in _cut(block["thinking"], piece)]
        if "signature" in block:
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        return {**block, "thinking": "", **({"signature": ""} if "signature" in block else {})}, deltas
    if kind in ("tool_use", "server_tool_use") and isinstance(block.get("input"), dict) and block["input"]:
        text = json.dumps(block["input"], ensure_ascii=False, separators=(",", ":"))
        return {**block, "input": {}}, [{"type": "input_json_delta", "partial_json": part}
                                        for part in _cut(text, piece * 2)]
    return block, []  # sent whole in its start event (results of server tools, redacted thinking, ...)


def _cut(text: str, size: int) -> list[str]:
    return [text[at:at + size] for at in range(0, len(text), size)] or []


def sse_bytes(events: Iterable[dict]) -> bytes:
    """``events`` framed as a server sends them (``event:`` and ``data:`` lines, a blank line after each), in
    UTF-8; an event holding a lone surrogate (bytes that were never UTF-8) is sent with JSON escapes instead."""
    return b"".join(f"event: {e['type']}\ndata: {_data(e)}\n\n".encode() for e in events)


def _data(event: dict) -> str:
    data = json.dumps(event, ensure_ascii=False)
    try:
        data.encode()
    except UnicodeEncodeError:
        return json.dumps(event)
    return data
