"""Read a Claude Code session file from a byte offset into steps, liberally.

Claude Code writes one JSON object per line (it is not a published schema; the shapes here are the
ones public readers of these files document, see the test fixtures). What is understood:

- ``user`` with a string or text/image content: the person's prompt, a step with no model call
  (``stop_reason`` ``claude-code:prompt``, its blocks in ``assistant``);
- ``assistant``: one record per content block, the records sharing one ``message.id`` merged into one
  step (text, thinking and tool_use blocks as stored, usage and model from the message);
- ``user`` carrying ``tool_result`` blocks: the results of the step before it (``tool_results``);
- ``summary`` and ``system`` (``compact_boundary`` and any other subtype): markers, steps with no model
  call (``claude-code:summary``, ``claude-code:compact_boundary``, ``claude-code:system:SUBTYPE``), the
  record kept in ``raw``;
- ``isSidechain: true`` (a subagent's conversation): its own thread (``agentId``), a child run;
- ``file-history-snapshot`` and ``queue-operation``: Claude Code's bookkeeping, counted and skipped;
- anything else (another ``type``, a line that is JSON but no object): a step ``claude-code:unknown``
  whose text is the record's JSON as it is in the file.

A line that does not end in a newline is a record still being written: reading stops before it (the
next import reads it whole). So does an assistant step at the end whose tool calls have no result yet,
until the file has been left alone for ``SETTLED_AFTER_S`` (the caller says so): then it is taken as it is.
A line over ``MAX_LINE_BYTES`` is skipped without being read into memory, with a problem line; a line
that is not JSON is skipped with a problem line; undecodable bytes become U+FFFD, with a problem line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

MAX_LINE_BYTES = 16 * 1024 * 1024
SETTLED_AFTER_S = 600  # a session file unchanged this long is over: its last step waits for no tool result
MAIN = ""  # the thread of the session's own conversation; a sidechain's is its agent id
SKIPPED_TYPES = frozenset({"file-history-snapshot", "queue-operation"})
KNOWN_TYPES = frozenset({"user", "assistant", "summary", "system"}) | SKIPPED_TYPES
# Fields a Claude Code record carries that another program's JSONL is unlikely to: the test for "is it theirs".
_MARKS = ("sessionId", "leafUuid", "parentUuid", "messageId")
PROMPT, SUMMARY, COMPACT, UNKNOWN = ("claude-code:prompt", "claude-code:summary", "claude-code:compact_boundary",
                                     "claude-code:unknown")
_READ_CHUNK = 1 << 20


@dataclass
class SessionStep:
    """One step of a thread: a model call (``model`` set), or a prompt or marker (no call, no tokens)."""

    thread: str
    stop_reason: str | None
    assistant: list
    tool_results: list | None = None
    model: str | None = None
    input_tokens: int = 0  # the whole input: uncached + cache writes + cache reads (Dayflow's meaning)
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_1h_tokens: int = 0
    web_search_requests: int = 0
    raw: str | None = None  # a marker's record as it is in the file
    created_at: str | None = None  # the record's timestamp (Dayflow's ISO form), when it has one
    message_id: str | None = None


@dataclass
class ThreadInfo:
    """What the records of one thread say about it (the first value seen of each)."""

    session_id: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    model: str | None = None
    first_prompt: str | None = None
    version: str | None = None
    started_at: str | None = None


@dataclass
class SessionRead:
    steps: list[SessionStep] = field(default_factory=list)
    threads: dict[str, ThreadInfo] = field(default_factory=dict)
    end_offset: int = 0  # where the next read starts
    done: dict[str, int] = field(default_factory=dict)  # per thread: records before this offset are in steps
    problems: list[str] = field(default_factory=list)
    records: int = 0
    skipped: int = 0  # bookkeeping records (SKIPPED_TYPES)
    foreign: str | None = None  # why the file is not Claude Code's (nothing is imported from it)
    waiting: bool = False  # a record still being written, or a step still waiting for its tool results


@dataclass
class _Group:
    """An assistant message being gathered: its records, then the tool results that follow it."""

    start: int
    end: int
    message_id: str | None
    blocks: list = field(default_factory=list)
    results: list | None = None
    usage: dict = field(default_factory=dict)
    model: str | None = None
    stop_reason: str | None = None
    created_at: str | None = None
    pending: set = field(default_factory=set)


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def clean(value: Any) -> Any:
    """Strings a database can store: lone surrogates (``"\\ud800"`` in JSON) become U+FFFD, recursively."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    return value


def plain(value: Any, limit: int | None = None) -> str | None:
    """A scalar text field for a column: a string, without NUL (PostgreSQL stores none), cut to ``limit``."""
    if not isinstance(value, str):
        return None
    text = clean(value).replace("\x00", "\ufffd")
    return text[:limit] if limit else text


def _stamp(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _count(usage: Any, key: str) -> int:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31 else 0


def _thread_of(record: dict) -> str:
    if record.get("isSidechain") is True:
        agent = record.get("agentId")
        return plain(agent, 64) if isinstance(agent, str) and agent else "sidechain"
    return MAIN


def is_claude_code(record: Any) -> bool:
    """Does this first record look like one of Claude Code's?"""
    return (isinstance(record, dict) and isinstance(record.get("type"), str)
            and any(key in record for key in _MARKS))


class _Reader:
    def __init__(self, path: Path, start: int, done: dict[str, int], first: bool):
        self.path = path
        self.read = SessionRead(end_offset=start, done=dict(done))
        self.open: dict[str, _Group] = {}
        self.first = first  # reading from the file's start: its first record says whose file it is
        self.decided = not first

    # -- the threads --------------------------------------------------------

    def info(self, thread: str, record: dict) -> ThreadInfo:
        info = self.read.threads.setdefault(thread, ThreadInfo())
        for attr, key, limit in (("session_id", "sessionId", 200), ("cwd", "cwd", 4096),
                                 ("git_branch", "gitBranch", 1000), ("version", "version", 100)):
            if getattr(info, attr) is None and plain(record.get(key)):
                setattr(info, attr, plain(record.get(key), limit))
        if info.started_at is None:
            info.started_at = _stamp(record.get("timestamp"))
        return info

    def emit(self, step: SessionStep, end: int) -> None:
        self.read.steps.append(step)
        self.read.done[step.thread] = max(self.read.done.get(step.thread, 0), end)

    def close(self, thread: str) -> None:
        group = self.open.pop(thread, None)
        if group is None:
            return
        usage = group.usage
        uncached, output = _count(usage, "input_tokens"), _count(usage, "output_tokens")
        write, read = _count(usage, "cache_creation_input_tokens"), _count(usage, "cache_read_input_tokens")
        hour = _count(usage.get("cache_creation"), "ephemeral_1h_input_tokens")
        searches = _count(usage.get("server_tool_use"), "web_search_requests")
        self.emit(SessionStep(thread=thread, stop_reason=group.stop_reason, assistant=group.blocks,
                              tool_results=group.results, model=group.model,
                              input_tokens=uncached + write + read, output_tokens=output,
                              cache_creation_input_tokens=write, cache_read_input_tokens=read,
                              cache_write_1h_tokens=min(hour, write), web_search_requests=searches,
                              created_at=group.created_at, message_id=group.message_id), group.end)

    def marker(self, thread: str, kind: str, text: str, raw: str, record: Any, end: int) -> None:
        self.close(thread)
        stamp = _stamp(record.get("timestamp")) if isinstance(record, dict) else None
        self.emit(SessionStep(thread=thread, stop_reason=kind, assistant=[{"type": "text", "text": text}],
                              raw=raw, created_at=stamp), end)

    # -- one record ---------------------------------------------------------

    def record(self, text: str, start: int, end: int) -> bool:
        """Handle one line; False: the file is not Claude Code's (nothing of it is to be imported)."""
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:
            if not self.decided:
                self.read.foreign = f"its first line is not JSON ({getattr(exc, 'msg', 'too deeply nested')})"
                return False
            self.read.problems.append(f"at byte {start:,}: not a JSON record; skipped")
            return True
        if not self.decided:
            if not is_claude_code(record):
                self.read.foreign = ("its first record has no Claude Code fields (type with sessionId, "
                                     "parentUuid, leafUuid or messageId)")
                return False
            self.decided = True
        record = clean(record)
        self.read.records += 1
        thread = _thread_of(record) if isinstance(record, dict) else MAIN
        if start < self.read.done.get(thread, 0):
            return True  # in a step stored by an earlier import (re-read for another thread's open step)
        kind = record.get("type") if isinstance(record, dict) else None
        raw = text.rstrip("\r\n")
        if kind in SKIPPED_TYPES:
            self.read.skipped += 1
            return True
        if kind == "summary":
            summary = record.get("summary")
            self.marker(thread, SUMMARY, summary if isinstance(summary, str) else raw, raw, record, end)
            return True
        if kind == "system":
            subtype = record.get("subtype")
            subtype = plain(subtype, 60) if isinstance(subtype, str) else "?"
            content = record.get("content")
            if subtype == "compact_boundary":
                meta = record.get("compactMetadata")
                words = content if isinstance(content, str) and content else "Conversation compacted"
                if isinstance(meta, dict):
                    words += f" ({', '.join(f'{k}={v}' for k, v in meta.items() if isinstance(v, (str, int)))})"
                self.marker(thread, COMPACT, words, raw, record, end)
            else:
                self.marker(thread, f"claude-code:system:{subtype}",
                            content if isinstance(content, str) and content else raw, raw, record, end)
            return True
        message = record.get("message") if isinstance(record, dict) else None
        if kind == "assistant" and isinstance(message, dict) and isinstance(message.get("content"), str):
            message = {**message, "content": [{"type": "text", "text": message["content"]}]}
        if kind == "assistant" and isinstance(message, dict) and isinstance(message.get("content"), list):
            self.assistant(thread, record, message, start, end)
            return True
        if kind == "user" and isinstance(message, dict) and isinstance(message.get("content"), (str, list)):
            self.user(thread, record, message, start, end)
            return True
        self.marker(thread, UNKNOWN, raw, raw, record, end)
        return True

    def assistant(self, thread: str, record: dict, message: dict, start: int, end: int) -> None:
        info = self.info(thread, record)
        message_id = message.get("id") if isinstance(message.get("id"), str) else None
        group = self.open.get(thread)
        if group is None or message_id is None or group.message_id != message_id:
            self.close(thread)
            group = self.open[thread] = _Group(start=start, end=end, message_id=message_id,
                                               created_at=_stamp(record.get("timestamp")))
        blocks = [b for b in message["content"] if isinstance(b, dict)]
        group.blocks.extend(blocks)
        group.pending |= {b.get("id") for b in blocks if b.get("type") == "tool_use" and isinstance(b.get("id"), str)}
        if isinstance(message.get("usage"), dict):
            group.usage = message["usage"]
        model = plain(message.get("model"), 200)
        if model:
            group.model = model
            info.model = info.model or model
        if isinstance(message.get("stop_reason"), str):
            group.stop_reason = plain(message["stop_reason"], 200)
        group.end = end

    def user(self, thread: str, record: dict, message: dict, start: int, end: int) -> None:
        info = self.info(thread, record)
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else \
            [b for b in content if isinstance(b, dict)]
        answers = [b for b in blocks if b.get("type") == "tool_result"]
        group = self.open.get(thread)
        if answers:
            if group is None:  # results whose call is in an earlier step (or none): a step of their own
                self.emit(SessionStep(thread=thread, stop_reason="claude-code:results", assistant=[],
                                      tool_results=blocks, created_at=_stamp(record.get("timestamp"))), end)
                return
            group.results = (group.results or []) + blocks
            group.pending -= {b.get("tool_use_id") for b in answers}
            group.end = end
            return
        self.close(thread)
        if info.first_prompt is None:
            text = "\n".join(b.get("text") for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str))
            if text.strip() and record.get("isMeta") is not True:
                info.first_prompt = plain(text)
        self.emit(SessionStep(thread=thread, stop_reason=PROMPT, assistant=blocks,
                              created_at=_stamp(record.get("timestamp"))), end)

    # -- the end --------------------------------------------------------------

    def finish(self, position: int, settled: bool) -> SessionRead:
        starts = []
        for thread, group in list(self.open.items()):
            if group.pending and not settled:
                starts.append(group.start)  # its tool calls still run: read again next time
                self.read.waiting = True
            else:
                self.close(thread)
        self.read.end_offset = min([position] + starts)
        _fill_times(self.read.steps)
        return self.read


def _fill_times(steps: list[SessionStep]) -> None:
    """A record without a timestamp (a summary) takes the time of the step after it, else of the one before."""
    later = None
    for step in reversed(steps):
        if step.created_at is None:
            step.created_at = later
        later = step.created_at
    earlier = None
    for step in steps:
        if step.created_at is None:
            step.created_at = earlier
        earlier = step.created_at


def read_session(path: str | Path, *, start: int = 0, done: dict[str, int] | None = None,
                 max_line: int = MAX_LINE_BYTES, settled: bool = False) -> SessionRead:
    """The steps of ``path`` from byte ``start`` on (``done``: what an earlier read stored, per thread).

    ``settled``: the file has not changed for long (the session is over): a step still waiting for tool results
    is taken as it is (a call interrupted for good). A line without its newline still waits.

    Never raises for what the file holds; an unreadable file raises ``OSError``.
    """
    path = Path(path)
    reader = _Reader(path, start, done or {}, first=start == 0)
    position = start
    with open(path, "rb") as fh:
        fh.seek(start)
        while True:
            line = fh.readline(max_line + 1)
            if not line:
                break
            if not line.endswith(b"\n"):
                if len(line) <= max_line:
                    reader.read.waiting = True  # the last record is still being written
                    break
                skipped = len(line)
                while True:  # a record too big to read: step over it a chunk at a time, never holding it
                    chunk = fh.readline(_READ_CHUNK)
                    if not chunk:
                        break
                    skipped += len(chunk)
                    if chunk.endswith(b"\n"):
                        break
                if not chunk or not chunk.endswith(b"\n"):
                    reader.read.waiting = True  # still being written: decided when it ends
                    break
                reader.read.problems.append(f"at byte {position:,}: a record of {skipped:,} bytes, more than "
                                            f"{max_line:,}; skipped")
                position += skipped
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                text = line.decode("utf-8", "replace")
                reader.read.problems.append(f"at byte {position:,}: not valid UTF-8; the undecodable bytes "
                                            "are shown as U+FFFD")
            if text.strip():
                if not reader.record(text, position, position + len(line)):
                    reader.read.steps.clear()
                    return reader.read
            position += len(line)
    return reader.finish(position, settled)
