"""The built-in offline model: a deterministic stand-in for the Messages API.

It reads only the request it is given (never the database), so a brief
written after a resume proves the stored history round-tripped:

- step 1 calls the read tools (inbox, calendar today and week, tasks);
- step 2 creates a task for every mail that asks for action (key ``mail-<id>``);
- step 3 writes the brief from the tool results found in the history.

Under compaction it also reads the summary (``compaction.summarised_calls``):
tasks the summary says were created are not created again, and reads whose
payloads were summarised away are made again before the brief is written.

Responses are shaped like ``anthropic.types.Message`` (``offline_message``:
the SDK's fields and serialisation, without importing the SDK, so offline
runs start fast) with usage estimated from the request size, including the
cache reads a real prompt cache gives.
``DAYFLOW_OFFLINE_DELAY`` (seconds) slows each call so a run can be watched.
``DAYFLOW_CALL_LOG`` (a file) gets one line per call, ``<pid> <messages>
<unix time>``, for tests that count calls across processes and for the
benchmark that times a process's start to its first call.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from datetime import date, timedelta
from typing import Any, Iterator

from .cache_points import has_message_breakpoint
from .compaction import summarised_calls
from .offline_message import OfflineMessage
from ..money.estimate import cache_ttl
from ..money.tokens import estimate_tokens

_ASKS = re.compile(r"\b(could you|can you|please|action required)\b", re.I)
_NO_ACTION = re.compile(r"no (further )?action needed", re.I)
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_DUE = re.compile(r"\b(?:by|before) (tomorrow|" + "|".join(_WEEKDAYS) + r")\b", re.I)


def asks_for_action(mail: dict) -> bool:
    text = f"{mail.get('subject', '')} {mail.get('snippet', '')}"
    return bool(_ASKS.search(text)) and not _NO_ACTION.search(text)


def due_date(mail: dict, received: date) -> str | None:
    found = _DUE.search(f"{mail.get('subject', '')} {mail.get('snippet', '')}")
    if not found:
        return None
    word = found.group(1).lower()
    if word == "tomorrow":
        return (received + timedelta(days=1)).isoformat()
    ahead = (_WEEKDAYS.index(word) - received.weekday()) % 7 or 7
    return (received + timedelta(days=ahead)).isoformat()


def _tool_results(messages: list[dict]) -> list[tuple[str, dict, dict]]:
    """(tool name, input, parsed result payload) for every answered tool call in the history."""
    calls: dict[str, tuple[str, dict]] = {}
    found = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                args = block.get("input")
                calls[block["id"]] = (block["name"], args if isinstance(args, dict) else {})
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in calls:
                name, args = calls[block["tool_use_id"]]
                raw = block.get("content")
                if isinstance(raw, list):
                    raw = "".join(part.get("text", "") for part in raw if isinstance(part, dict))
                try:
                    payload = json.loads(raw) if isinstance(raw, str) else {}
                except ValueError:
                    payload = {}
                found.append((name, args, payload if isinstance(payload, dict) else {}))
    return found


class _Messages:
    def __init__(self, client: "OfflineClient"):
        self._client = client

    def create(self, *, model: str, messages: list[dict], max_tokens: int = 4096, system: Any = None,
               tools: list[dict] | None = None, stream: bool = False, **_: Any) -> Any:
        """The reply, or with ``stream=True`` its events (``agent.streaming``), the wait spread over them so a
        new user sees the reply forming, as from the real API."""
        delay = self._client.delay
        message = self._reply(delay / 2 if stream else delay, model=model, messages=messages, system=system,
                              tools=tools, **_)
        if not stream:
            return message
        return _streamed(message.to_dict(mode="json"), delay / 2)

    def _reply(self, wait_s: float, *, model: str, messages: list[dict], system: Any, tools: list[dict] | None,
               **_: Any) -> OfflineMessage:
        self._client.calls += 1
        log = _settings().call_log
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()} {len(messages)} {time.time():.6f}\n")
        if wait_s:
            time.sleep(wait_s)
        names = [t.get("name") for t in tools or [] if isinstance(t, dict)]
        if set(names) == _BRIEF_TOOLS or not names:
            content, stop_reason = _respond(messages)
        else:  # a user's agent: read once with every read-only tool, then answer
            content, stop_reason = _respond_generic(messages, tools or [], self._client.read_only)
        request = {"system": system, "tools": tools, "messages": messages, "cache_control": _.get("cache_control")}
        total = estimate_tokens({"system": system, "tools": tools, "messages": messages})
        cache_read, cache_write = _cache_usage(request, total)
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
        return OfflineMessage.model_validate({
            "id": f"msg_offline_{digest[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": total - cache_read - cache_write,
                      "cache_creation_input_tokens": cache_write,
                      "cache_read_input_tokens": cache_read,
                      "output_tokens": estimate_tokens(content)},
        })


def _streamed(message: dict, spread_s: float) -> Iterator[dict]:
    """``message``'s stream events, ``spread_s`` seconds spread across them."""
    from .streaming import events_of

    events = list(events_of(message))
    for event in events:
        if spread_s:
            time.sleep(spread_s / len(events))
        yield event


def _cache_usage(request: dict, total: int) -> tuple[int, int]:
    """(read, written) as a real prompt cache reports them for this request's breakpoints.

    With a breakpoint on the last message, the previous call (two messages ago: a reply and its results)
    wrote everything up to its own last message, so that prefix is read and the rest written. With only
    the system prompt's breakpoint, the tools and system prompt are read after the first call and nothing
    of the history is cached. With no breakpoint, nothing is read or written.
    """
    if cache_ttl(request) is None:
        return 0, 0
    messages = request["messages"]
    if has_message_breakpoint(request):
        previous = {"system": request["system"], "tools": request["tools"], "messages": messages[:-2]}
        read = min(estimate_tokens(previous), total) if len(messages) > 2 else 0
        return read, total - read
    prefix = estimate_tokens({"system": request["system"], "tools": request["tools"], "messages": []})
    first = sum(1 for m in messages if m.get("role") == "assistant") == 0
    return (0, prefix) if first else (min(prefix, total), 0)


class OfflineClient:
    """Quacks like ``anthropic.Anthropic`` for ``client.messages.create``; counts its calls."""

    def __init__(self, delay: float | None = None):
        self.delay = _settings().offline_delay_s if delay is None else delay
        self.calls = 0
        self.messages = _Messages(self)
        self.read_only: frozenset[str] | None = None  # a user agent's read-only tools (None: not told)

    def know_agent(self, agent: Any) -> None:
        """The driver says which tools are safe to call on any agent (only the kinds: nothing else is read).

        A subagent's tool is one of them: its call is a child run keyed by the call, never bought twice, so an
        offline run of a parent shows its children at work (each child's own read-only tools, then its answer).
        """
        self.read_only = frozenset(t.name for t in agent.tools
                                   if t.kind == "read_only" or getattr(t, "subagent", None) is not None)


def _settings():
    from ..config import settings

    return settings.current()


_BRIEF_TOOLS = {"read_inbox", "read_calendar", "read_tasks", "create_task"}


def _example_args(schema: dict, task: str = "") -> dict:
    """The least arguments a schema accepts: its required fields, each with a plain value of its type (a
    subagent's ``task`` is the run's own task, so a child is handed what its parent was asked)."""
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    args: dict = {}
    for name in schema.get("required", []) if isinstance(schema, dict) else []:
        spec = props.get(name, {})
        if spec.get("enum"):
            args[name] = spec["enum"][0]
        elif spec.get("type") in ("integer", "number"):
            args[name] = spec.get("minimum", 1)
        elif spec.get("type") == "boolean":
            args[name] = False
        elif spec.get("type") == "array":
            args[name] = []
        elif spec.get("type") == "object":
            args[name] = {}
        elif name == "task" and task:
            args[name] = task[:spec.get("maxLength", 20000)]
        else:
            args[name] = "example"
    return args


def _respond_generic(messages: list[dict], tools: list[dict], read_only: frozenset[str] | None
                     ) -> tuple[list[dict], str]:
    step = sum(1 for m in messages if m.get("role") == "assistant") + 1
    answered: list[tuple[str, str]] = []
    names: dict[str, str] = {}
    for message in messages:
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
            elif block.get("type") == "tool_result":
                content = block.get("content")
                text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
                answered.append((names.get(str(block.get("tool_use_id")), "?"), text))
    safe = [t for t in tools if read_only is not None and t.get("name") in read_only]
    task = next((_plain_text(m.get("content")) for m in messages if m.get("role") == "user"
                 and _plain_text(m.get("content"))), "")
    if step == 1 and safe:
        calls = [_tool_use(step, i, t["name"], _example_args(t.get("input_schema", {}), task))
                 for i, t in enumerate(safe)]
        return [{"type": "text", "text": f"Reading with {len(calls)} tool(s) first."}] + calls, "tool_use"
    lines = [f"Offline answer (no ANTHROPIC_API_KEY) to: {str(task).splitlines()[0][:200] if task else 'the task'}"]
    for name, text in answered:
        lines.append(f"- {name}: {' '.join(text.split())[:300]}")
    if not answered:
        lines.append("- no tool was called (the offline model calls only read-only tools)")
    return [{"type": "text", "text": "\n".join(lines)}], "end_turn"


def _plain_text(content: Any) -> str:
    """A user message's words: its string, or its text blocks (the last message carries a cache breakpoint)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _tool_use(step: int, index: int, name: str, args: dict) -> dict:
    return {"type": "tool_use", "id": f"toolu_off{step:02d}{index:02d}", "name": name, "input": args}


def _earlier_results(messages: list[dict]) -> list[tuple[str, dict, dict]]:
    """What a compacted request's summary still says: tasks created and errors met (payloads are gone)."""
    found = []
    for call in summarised_calls(messages):
        args = call.input if isinstance(call.input, dict) else {}
        if call.name == "create_task" and call.ok:
            task = {"title": args.get("title", ""), "due": args.get("due"), "idempotency_key": args.get("idempotency_key")}
            found.append((call.name, args, {"ok": True, "created": call.created, "task": task}))
        elif not call.ok and call.error_code:
            found.append((call.name, args, {"ok": False, "error": {"code": call.error_code}}))
    return found


def _respond(messages: list[dict]) -> tuple[list[dict], str]:
    step = sum(1 for m in messages if m.get("role") == "assistant") + 1
    # Under compaction the reads' payloads may be summarised away: they are read again (a brief needs
    # them), but tasks the summary says were created are not created again.
    earlier = _earlier_results(messages)
    results = _tool_results(messages)
    read = {name for name, _args, _payload in results}
    if not {"read_inbox", "read_calendar", "read_tasks"} <= read:
        calls = [("read_inbox", {"limit": 20}), ("read_calendar", {"range": "today"}),
                 ("read_calendar", {"range": "week"}), ("read_tasks", {"include_done": False})]
        return ([{"type": "text", "text": "Let me look at your inbox, calendar and tasks."}]
                + [_tool_use(step, i, name, args) for i, (name, args) in enumerate(calls)], "tool_use")
    if "create_task" not in read and not any(name == "create_task" for name, _a, _p in earlier):
        mails = next((p.get("mails", []) for n, _a, p in results if n == "read_inbox"), [])
        asking = [m for m in mails if isinstance(m, dict) and asks_for_action(m)]
        if asking:
            calls = []
            for mail in asking:
                args = {"title": f"Follow up: {mail.get('subject', '')}"[:200],
                        "idempotency_key": f"mail-{mail.get('id')}",
                        "notes": f"From {mail.get('from', '')}: {mail.get('snippet', '')}"[:2000]}
                received = str(mail.get("received", ""))[:10]
                try:
                    due = due_date(mail, date.fromisoformat(received))
                except ValueError:
                    due = None
                if due:
                    args["due"] = due
                calls.append(args)
            text = f"{len(asking)} mail(s) ask for something; creating follow-up tasks."
            return ([{"type": "text", "text": text}]
                    + [_tool_use(step, i, "create_task", a) for i, a in enumerate(calls)], "tool_use")
    return [{"type": "text", "text": _brief(earlier + results)}], "end_turn"


def _brief(results: list[tuple[str, dict, dict]]) -> str:
    today_events = next((p.get("events", []) for n, a, p in results
                         if n == "read_calendar" and a.get("range") == "today"), [])
    week_events = next((p.get("events", []) for n, a, p in results
                        if n == "read_calendar" and a.get("range") == "week"), [])
    open_tasks = next((p.get("tasks", []) for n, _a, p in results if n == "read_tasks"), [])
    created = [(p.get("task") or {}, bool(p.get("created"))) for n, _a, p in results
               if n == "create_task" and p.get("ok")]
    errors = [p.get("error", {}).get("code", "error") for _n, _a, p in results if p.get("ok") is False]
    unread = next((sum(1 for m in p.get("mails", []) if m.get("unread")) for n, _a, p in results
                   if n == "read_inbox"), 0)

    lines = ["## Today"]
    if today_events:
        for event in today_events:
            where = f" ({event['location']})" if event.get("location") else ""
            lines.append(f"- {event['start'][11:16]}–{event['end'][11:16]} {event['title']}{where}")
    else:
        lines.append("- Nothing on the calendar.")
    lines.append(f"- {unread} unread mail(s); {len(week_events)} event(s) this week.")
    lines += ["", "## Tasks"]
    for task, was_created in created:
        due = f" (due {task['due']})" if task.get("due") else ""
        lines.append(f"- {'new' if was_created else 'existing'}: {task.get('title', '')}{due}")
    listed = {task.get("idempotency_key") for task, _c in created}
    for task in (t for t in open_tasks if t.get("idempotency_key") not in listed):  # a re-read list holds them
        due = f" (due {task['due']})" if task.get("due") else ""
        lines.append(f"- open: {task.get('title', '')}{due}")
    if not created and not open_tasks:
        lines.append("- No open tasks.")
    if errors:
        lines.append(f"- {len(errors)} tool error(s): {', '.join(sorted(set(errors)))}")
    dated = sorted((t for t, _c in created if t.get("due")), key=lambda t: t["due"])
    focus = dated[0]["title"] if dated else (today_events[0]["title"] if today_events else "Clear the inbox")
    lines += ["", "## One thing", f"{focus}."]
    return "\n".join(lines)
