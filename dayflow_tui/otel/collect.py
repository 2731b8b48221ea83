"""GenAI spans received by ``dayflow collect`` made into read-only runs (``source`` otel).

The span names and attributes are the OpenTelemetry GenAI semantic conventions'
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/ and
.../gen-ai-agent-spans/): an ``invoke_agent {name}`` span is a run, the ``chat
{model}`` spans under it are its steps, the ``execute_tool {name}`` spans its
tool calls and results.

When a run is written: live, step by step. An SDK sends a span when it ends, so an
agent's chat and tool spans come long before its ``invoke_agent`` span. A run
exists (status running) from its first chat span, keyed by the trace and the span
the chat hangs under (its agent's, taken to be so while that span has not come:
``Assembler.owner``); each chat becomes a step once ``settled`` (nothing it needs
can still come: its named tools, or for a sender without content a later chat or
the agent span; or it waited ``settle_s``), in start order; the agent span ends
the run (done, or failed from its status). An agent span under another agent's
span is a child run of it (``parent_id``, ``parent_call_id``). Spans of a trace
idle past ``collect_hold_s`` are let go (said on stderr); chats still waiting when
the receiver stops are stored as they stand (``sweep(force=True)``).

Never twice, never rewritten: the run's id is derived from its trace and agent
span ids, and its position (``Store.imported_file`` under ``otlp:TRACE/SPAN``)
records every chat span id written as a step (and ``agent-span`` once ended); a
retried request, the same spans from another receiver on the same database, or
two requests at once write nothing twice (``Store.append_imported`` moves the
position only from where it was read; one lock per trace in this process). A chat
that comes after a later one of its agent was stored is appended at the end
(``Taken.late``): stored steps are never rewritten.

Which step a tool belongs to: the chat span among its ancestors, if any; else
the last chat span of the same agent that started before it (time order), else
the first. Content comes from ``gen_ai.output.messages`` / ``gen_ai.input.messages``
(attributes, or the attributes of a ``gen_ai.client.inference.operation.details``
event), from ``gen_ai.choice`` events, and from ``gen_ai.tool.call.arguments`` /
``gen_ai.tool.call.result``; a step without any carries its usage and a note
saying the sender did not capture content.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from ..store.status import RunStatus
from ..store.tables.imported import OTEL, FileState, ImportedRun, ImportedStep
from .receive import Span

NO_CONTENT = "[no content: the sender did not capture the messages; usage only]"
CHAT_OPERATIONS = ("chat", "text_completion", "generate_content")
MAX_DEPTH = 64  # parent chains followed this far (a hostile cycle ends here)
MAX_TOKENS = 2**31 - 1  # a step's token counts fit the steps table's integer columns on every backend
SETTLE_S = 30.0  # a chat span waits at most this long for its tool spans before it is stored as it stands
MAX_HELD = 200_000  # spans held in memory at most; past it the oldest traces are let go


def operation(span: Span) -> str:
    found = span.attributes.get("gen_ai.operation.name")
    if isinstance(found, str) and found:
        return found
    if span.name == "agent run":  # Pydantic AI before the conventions named it
        return "invoke_agent"
    if span.name == "running tool" or span.name.startswith(("running tool:", "running tool ")):  # not "running tools"
        return "execute_tool"
    return span.name.split(" ", 1)[0]


def run_id_of(trace_id: str, span_id: str) -> str:
    return "ot" + hashlib.sha256(f"otel/{trace_id}/{span_id}".encode()).hexdigest()[:14]


def iso(ns: int) -> str:
    """The store's form of a moment (milliseconds, Z); a time no datetime holds is the epoch."""
    try:
        moment = datetime.fromtimestamp(ns // 1_000_000 / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        moment = datetime.fromtimestamp(0, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, min(value, MAX_TOKENS))
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return max(0, min(int(value), MAX_TOKENS))
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 30:
        return min(int(value.strip()), MAX_TOKENS)
    return 0


def _text(value: Any, limit: int = 500) -> str | None:
    """A value for a plain text column: text, cut, without NUL (which PostgreSQL's text cannot hold)."""
    if value is None:
        return None
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    return value[:limit].replace("\x00", "\ufffd")


def _json_list(value: Any) -> list | None:
    """A messages attribute: a JSON string of a list (the conventions), or already a list."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    if isinstance(value, dict):
        value = [value]
    return value if isinstance(value, list) else None


def _content_attr(span: Span, key: str) -> list | None:
    found = _json_list(span.attributes.get(key))
    if found is not None:
        return found
    for _name, _at, attributes in span.events:
        found = _json_list(attributes.get(key))
        if found is not None:
            return found
    return None


def _block_of(part: Any) -> dict | None:
    """A GenAI message part as a Messages API content block."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": _str(part.get("content", part.get("text", "")))}
    if kind == "tool_call":
        arguments = part.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass
        return {"type": "tool_use", "id": _str(part.get("id") or ""), "name": _str(part.get("name") or "?"),
                "input": arguments if arguments is not None else {}}
    if kind == "reasoning":
        return {"type": "thinking", "thinking": _str(part.get("content", ""))}
    if kind == "tool_call_response":
        return None
    return {**part}  # another kind, kept as sent


def _str(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _assistant_blocks(chat: Span) -> list[dict] | None:
    """The reply's blocks (read once per span: a trace is looked at again at each of its requests; do not change
    the list)."""
    if "blocks" not in chat.memo:
        chat.memo["blocks"] = _read_assistant_blocks(chat)
    return chat.memo["blocks"]


def _read_assistant_blocks(chat: Span) -> list[dict] | None:
    """The reply's blocks from the output messages or ``gen_ai.choice`` events; None when none was captured."""
    output = _content_attr(chat, "gen_ai.output.messages")
    if output is not None:
        blocks = []
        for message in output:
            if isinstance(message, dict):
                for part in message.get("parts") or []:
                    block = _block_of(part)
                    if block is not None:
                        blocks.append(block)
        return blocks
    blocks = []
    for name, _at, attributes in chat.events:
        if name in ("gen_ai.choice", "gen_ai.assistant.message"):
            message = attributes.get("message", attributes.get("content"))
            if isinstance(message, str):
                try:
                    message = json.loads(message)
                except ValueError:
                    pass
            if isinstance(message, dict):
                content = message.get("content")
                if content:
                    blocks.append({"type": "text", "text": _str(content)})
                for call in message.get("tool_calls") or []:
                    if isinstance(call, dict):
                        function = call.get("function") if isinstance(call.get("function"), dict) else {}
                        arguments = function.get("arguments", call.get("arguments"))
                        if isinstance(arguments, str):
                            try:
                                arguments = json.loads(arguments)
                            except ValueError:
                                pass
                        blocks.append({"type": "tool_use", "id": _str(call.get("id") or ""),
                                       "name": _str(function.get("name") or call.get("name") or "?"),
                                       "input": arguments if arguments is not None else {}})
            elif message is not None:
                blocks.append({"type": "text", "text": _str(message)})
    return blocks or None


def _first_user_text(messages: list | None) -> str | None:
    for message in messages or []:
        if isinstance(message, dict) and message.get("role") == "user":
            texts = []
            for part in message.get("parts") or []:
                if isinstance(part, dict) and part.get("type") == "text":
                    texts.append(_str(part.get("content", "")))
                elif isinstance(part, str):
                    texts.append(part)
            if texts:
                return "".join(texts)
    return None


def _finish_reason(chat: Span) -> str | None:
    reasons = chat.attributes.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and reasons:
        return _text(reasons[0], 100)
    if isinstance(reasons, str):
        return _text(reasons, 100)
    return None


def _model(span: Span) -> str | None:
    found = span.attributes.get("gen_ai.response.model") or span.attributes.get("gen_ai.request.model")
    if found:
        return _text(found, 200)
    if span.name.startswith("chat "):
        return _text(span.name[5:205])
    return None


def _tool_call_id(tool: Span) -> str:
    found = tool.attributes.get("gen_ai.tool.call.id")
    return _str(found) if found else f"span-{tool.span_id}"


def _tool_name(tool: Span) -> str:
    found = tool.attributes.get("gen_ai.tool.name")
    if found:
        return _str(found)
    return tool.name.split(" ", 1)[1] if " " in tool.name else tool.name


def _tool_failed(tool: Span) -> bool:
    return tool.status_code == 2 or bool(tool.attributes.get("error.type"))


@dataclass
class Trace:
    spans: dict[str, Span] = field(default_factory=dict)
    last_seen: float = 0.0
    anchors: set[str] = field(default_factory=set)  # span ids this receiver made runs for (agents, or guessed)
    arrived: dict[str, float] = field(default_factory=dict)  # span id -> when it first came (the clock's time)
    pending: bool = False  # a chat span is waiting to be stored
    states: dict[str, FileState] = field(default_factory=dict)  # positions as this receiver last wrote them
    finished: bool = False  # every run of it ended and placed, nothing waiting: let go once quiet for settle_s
    parents: set[str] = field(default_factory=set)  # agent span ids whose run's parent was written here
    lock: threading.Lock = field(default_factory=threading.Lock)


TOOL_CALL_REASONS = ("tool_calls", "tool_call", "tool_use", "function_call")


class Assembler:
    """The spans of one trace read as agents, their steps and their tools.

    ``anchors``: span ids that already have a run (a chat's owner stops at one, as at an agent span).
    """

    def __init__(self, spans: dict[str, Span], anchors: set[str] | frozenset = frozenset()):
        self.spans = spans
        self.anchors = anchors

    def owner(self, span: Span) -> tuple[str | None, str | None]:
        """(the agent span id above ``span``, the chat span id between them, if any).

        A chain that breaks at a span not received yet ends there: that span is taken to be the agent
        (the conventions put chat spans right under their ``invoke_agent``; an SDK sends the agent's span last).
        """
        chat = None
        seen = 0
        parent = span.parent_id
        while parent is not None and seen < MAX_DEPTH:
            seen += 1
            above = self.spans.get(parent)
            if above is None or parent in self.anchors:
                return parent, chat
            kind = operation(above)
            if kind == "invoke_agent":
                return above.span_id, chat
            if kind in CHAT_OPERATIONS and chat is None:
                chat = above.span_id
            parent = above.parent_id
        return None, chat

    def parent_of(self, agent_id: str) -> tuple[str | None, str | None]:
        """(the agent span id an agent runs under, the tool call id between them): nested agents are child runs."""
        agent = self.spans.get(agent_id)
        if agent is None:
            return None, None
        call = None
        parent, seen = agent.parent_id, 0
        while parent is not None and seen < MAX_DEPTH:
            seen += 1
            above = self.spans.get(parent)
            if above is None:
                return (parent, call) if parent in self.anchors else (None, None)
            kind = operation(above)
            if kind == "invoke_agent" or parent in self.anchors:
                return above.span_id, call
            if kind == "execute_tool" and call is None:
                call = _tool_call_id(above)
            parent = above.parent_id
        return None, None

    def agents(self) -> list[Span]:
        return sorted((s for s in self.spans.values() if operation(s) == "invoke_agent"),
                      key=lambda s: (s.start_ns, s.span_id))

    def grouped(self) -> dict[str, tuple[list[Span], list[tuple[Span, str | None]]]]:
        """Every owner's (chat spans, (tool span, chat between)) in one pass over the trace."""
        found: dict[str, tuple[list[Span], list[tuple[Span, str | None]]]] = {}
        for span in self.spans.values():
            kind = operation(span)
            if kind in CHAT_OPERATIONS or kind == "execute_tool":
                owner, via_chat = self.owner(span)
                if owner is None:
                    continue
                chats, tools = found.setdefault(owner, ([], []))
                if kind in CHAT_OPERATIONS:
                    chats.append(span)
                else:
                    tools.append((span, via_chat))
        return found

    def steps_of(self, agent: Span) -> list[tuple[Span, list[Span]]]:
        chats, tools = self.grouped().get(agent.span_id, ([], []))
        return attach(chats, tools)


def _named_calls(chat: Span) -> set[str] | None:
    """The tool call ids a chat's reply names; None when the sender did not capture its content."""
    blocks = _assistant_blocks(chat)
    if blocks is None:
        return None
    return {b.get("id") for b in blocks if b.get("type") == "tool_use"}


def attach(chats: list[Span], tools: list[tuple[Span, str | None]]) -> list[tuple[Span, list[Span]]]:
    """Chats in start order, each with its tools.

    A tool goes to the chat above it; else to the chat whose reply names its call id; else to the last chat
    started before it, unless that chat's reply is known and does not name the tool's (sent) call id: then
    the tool's own chat has not come yet and the tool waits.
    """
    order = sorted(chats, key=lambda c: (c.start_ns, c.end_ns, c.span_id))
    named = {c.span_id: _named_calls(c) for c in order}
    naming = {call: chat_id for chat_id, calls in named.items() for call in calls or ()}
    by_chat: dict[str, list[Span]] = {c.span_id: [] for c in order}
    for tool, via_chat in sorted(tools, key=lambda item: (item[0].start_ns, item[0].span_id)):
        if via_chat in by_chat:
            by_chat[via_chat].append(tool)
            continue
        sent_id = tool.attributes.get("gen_ai.tool.call.id")
        if sent_id and _str(sent_id) in naming:
            by_chat[naming[_str(sent_id)]].append(tool)
            continue
        if not order:
            continue
        home = order[0]
        for chat in order:
            if chat.start_ns <= tool.start_ns:
                home = chat
        if sent_id and named[home.span_id] is not None:
            continue  # the reply there does not name this call: its chat is still to come
        by_chat[home.span_id].append(tool)
    return [(c, by_chat[c.span_id]) for c in order]


def settled(chat: Span, tools: list[Span], *, later: bool, agent_seen: bool, waited: bool) -> bool:
    """May this chat be stored as a step now (is nothing it needs still to come)?

    With content: every tool call its reply names has its ``execute_tool`` span (by call id; tools sent
    without call ids: as many as it names, once a later chat came). Without content: its finish reason says
    no tool was called, or a later chat of its agent came (its tools ran before that chat started, and an SDK
    sends spans in the order they end), or its agent's span came. Either way: once it has waited
    ``settle_s`` since it arrived, it is stored as it stands (a tool span that never comes, such as a
    handoff's, holds nothing up for good).
    """
    if waited:
        return True
    blocks = _assistant_blocks(chat)
    if blocks is None:
        reason = _finish_reason(chat)
        return later or agent_seen or (reason is not None and reason not in TOOL_CALL_REASONS)
    calls = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
    have = {_tool_call_id(t) for t in tools}
    unmatched = not any(t.attributes.get("gen_ai.tool.call.id") for t in tools)  # tools sent without call ids
    return calls <= have or (later and unmatched and len(tools) >= len(calls))


def step_of(chat: Span, tools: list[Span]) -> ImportedStep:
    attrs = chat.attributes
    blocks = _assistant_blocks(chat)
    captured = blocks is not None
    blocks = list(blocks or [])
    called = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
    for tool in tools:  # a tool the reply's content does not list (no content captured): named from its span
        if _tool_call_id(tool) not in called:
            arguments = tool.attributes.get("gen_ai.tool.call.arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    pass
            blocks.append({"type": "tool_use", "id": _tool_call_id(tool), "name": _tool_name(tool),
                           "input": arguments if arguments is not None else {}})
    if not captured:
        blocks.insert(0, {"type": "text", "text": NO_CONTENT})
    results = None
    if tools:
        order = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        ranked = sorted(tools, key=lambda t: order.index(_tool_call_id(t)) if _tool_call_id(t) in order else len(order))
        results = []
        for tool in ranked:
            result = tool.attributes.get("gen_ai.tool.call.result")
            block = {"type": "tool_result", "tool_use_id": _tool_call_id(tool),
                     "content": _str(result) if result is not None else ""}
            if _tool_failed(tool):
                block["is_error"] = True
            results.append(block)
    response_id = attrs.get("gen_ai.response.id")
    raw = {"id": _str(response_id) if response_id is not None else None, "type": "otel_span",
           "trace_id": chat.trace_id, "span_id": chat.span_id, "name": chat.name,
           "attributes": {k: v for k, v in attrs.items() if k not in ("gen_ai.input.messages",
                                                                       "gen_ai.output.messages",
                                                                       "gen_ai.system_instructions")}}
    return ImportedStep(stop_reason=_finish_reason(chat), assistant=blocks, tool_results=results, model=_model(chat),
                        input_tokens=_int(attrs.get("gen_ai.usage.input_tokens")),
                        output_tokens=_int(attrs.get("gen_ai.usage.output_tokens")),
                        cache_creation_input_tokens=_int(attrs.get("gen_ai.usage.cache_creation.input_tokens")),
                        cache_read_input_tokens=_int(attrs.get("gen_ai.usage.cache_read.input_tokens")),
                        raw=json.dumps(raw, ensure_ascii=False, separators=(",", ":")), created_at=iso(chat.end_ns),
                        duration_ms=min((chat.end_ns - chat.start_ns) // 1_000_000, 2**31 - 1))


def run_of(trace_id: str, agent_id: str, agent: Span | None, steps: list[tuple[Span, list[Span]]],
           parent: tuple[str | None, str | None], *, end: Span | None = None) -> ImportedRun:
    """The run of agent span ``agent_id``: ``running`` until its span (``end``; ``agent`` when it is an
    ``invoke_agent`` span) has come, then done or failed from that span's status."""
    end = end if end is not None else agent
    attrs = agent.attributes if agent is not None else {}
    name = attrs.get("gen_ai.agent.name")
    if not name and agent is not None:
        name = agent.name.split(" ", 1)[1] if " " in agent.name else None
    task = _first_user_text(_content_attr(agent, "gen_ai.input.messages")) if agent is not None else None
    if task is None and steps:
        task = _first_user_text(_content_attr(steps[0][0], "gen_ai.input.messages"))
    model = attrs.get("gen_ai.request.model") or (_model(steps[0][0]) if steps else None)
    answer = None
    output = _content_attr(agent, "gen_ai.output.messages") if agent is not None else None
    if output:
        texts = [b["text"] for m in output if isinstance(m, dict) for b in map(_block_of, m.get("parts") or [])
                 if b and b.get("type") == "text"]
        answer = "".join(texts) or None
    status, error = RunStatus.RUNNING.value, None
    if end is not None:
        failed = end.status_code == 2 or bool(end.attributes.get("error.type"))
        status = RunStatus.FAILED.value if failed else RunStatus.DONE.value
        if failed:
            error = _text(end.status_message or end.attributes.get("error.type") or "the agent span's status is ERROR")
    parent_id, call_id = parent
    started = end.start_ns if end is not None else (steps[0][0].start_ns if steps else 0)
    return ImportedRun(run_id=run_id_of(trace_id, agent_id), external_id=f"{trace_id}/{agent_id}", source=OTEL,
                       agent=_text(name, 200) if name else OTEL, model=_text(model, 200) if model else None,
                       user_msg=_text(task, 100_000), final_text=_text(answer, 1_000_000),
                       created_at=iso(started), status=status, error=error,
                       parent_id=run_id_of(trace_id, parent_id) if parent_id else None,
                       parent_call_id=_text(call_id, 64) if parent_id and call_id else None)


def position_key(trace_id: str, agent_id: str) -> str:
    return f"otlp:{trace_id}/{agent_id}"


ENDED = "agent-span"  # a position's ``done`` key: the agent span came and ended the run


@dataclass
class Taken:
    spans: int = 0
    new_runs: int = 0
    steps: int = 0
    runs: list[tuple[str, int]] = field(default_factory=list)  # (run id, steps added)
    dropped: int = 0  # held traces let go (idle too long)
    late: int = 0  # chat spans stored after a later-starting step of their run (appended, not inserted)


class Collector:
    """What ``dayflow collect`` holds between requests: each trace's spans, and which runs it made.

    Thread-safe: requests for different traces write at once; requests for the same trace take turns
    (the trace's lock), and the store's compare-and-set position keeps a second receiver on the same
    database (or a retry) from writing anything twice.
    """

    def __init__(self, store: Any, *, hold_s: float, settle_s: float = SETTLE_S,
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.hold_s = hold_s
        self.settle_s = settle_s
        self.clock = clock
        self.traces: dict[str, Trace] = {}
        self.lock = threading.Lock()  # the ``traces`` dict itself

    def held(self) -> int:
        """Spans of traces that have not made a run yet: not written."""
        with self.lock:
            return sum(len(t.spans) for t in self.traces.values() if not t.anchors)

    def take(self, spans: list[Span]) -> Taken:
        """Keep a request's spans, then write every run they start, extend or end (each in one transaction)."""
        taken = Taken(spans=len(spans))
        by_trace: dict[str, list[Span]] = {}
        for span in spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        now = self.clock()
        for trace_id, mine in by_trace.items():
            with self.lock:
                trace = self.traces.get(trace_id)
                if trace is None:
                    trace = self.traces[trace_id] = Trace()
                trace.last_seen = now
            with trace.lock:
                for span in mine:
                    trace.spans[span.span_id] = span  # the same span again (a retry): one entry
                    trace.arrived.setdefault(span.span_id, now)
                self._write(trace_id, trace, taken)
        self._let_go(now, taken)
        return taken

    def _let_go(self, now: float, taken: Taken) -> None:
        with self.lock:
            # Written whole and quiet for settle_s: memory is for traces still going (a straggler after this is
            # a fresh Trace: a late chat is appended, a late tool span is not added, as for any late span).
            for trace_id in [t for t, trace in self.traces.items()
                             if trace.finished and now - trace.last_seen >= self.settle_s]:
                del self.traces[trace_id]
            for trace_id in [t for t, trace in self.traces.items() if now - trace.last_seen > self.hold_s]:
                taken.dropped += 1
                del self.traces[trace_id]
            held = sum(len(t.spans) for t in self.traces.values())
            for trace_id in sorted(self.traces, key=lambda t: self.traces[t].last_seen):
                if held <= MAX_HELD:
                    break
                held -= len(self.traces.pop(trace_id).spans)
                taken.dropped += 1

    def sweep(self, *, force: bool = False) -> Taken:
        """Store the chats that waited ``settle_s`` (all of them, ``force``: the receiver is stopping)."""
        taken = Taken()
        now = self.clock()
        with self.lock:
            waiting = [(t, trace) for t, trace in self.traces.items() if trace.pending]
        for trace_id, trace in waiting:
            with trace.lock:
                oldest = min(trace.arrived.values(), default=now)
                if trace.pending and (force or now - oldest >= self.settle_s):
                    self._write(trace_id, trace, taken, force=force)
        self._let_go(now, taken)
        return taken

    def _write(self, trace_id: str, trace: Trace, taken: Taken, force: bool = False) -> None:
        trace.pending = False
        assembler = Assembler(trace.spans, trace.anchors)
        grouped = assembler.grouped()
        owners = {a.span_id for a in assembler.agents()} | set(grouped)
        owners = {o for o in owners if o in trace.spans and operation(trace.spans[o]) == "invoke_agent"
                  or o in trace.anchors or grouped.get(o, ([], []))[0]}
        trace.anchors |= owners
        assembler = Assembler(trace.spans, trace.anchors)
        grouped = assembler.grouped()
        # Parents before children: a child run's parent row exists when it is written.
        for agent_id in sorted(owners, key=lambda o: (self._depth(assembler, o), o)):
            self._write_run(trace_id, trace, assembler, agent_id, grouped.get(agent_id, ([], [])), taken, force)
        # Let go once every run ended and knows its place (a root, or its parent written): a span still to come
        # could only be a straggler, which a fresh Trace handles the same way.
        trace.finished = bool(trace.anchors) and not trace.pending and all(
            a in trace.spans and (trace.spans[a].parent_id is None or a in trace.parents) for a in trace.anchors)

    @staticmethod
    def _depth(assembler: Assembler, agent_id: str) -> int:
        depth, at = 0, agent_id
        while depth < MAX_DEPTH:
            above, _call = assembler.parent_of(at)
            if above is None:
                break
            depth, at = depth + 1, above
        return depth

    def _write_run(self, trace_id: str, trace: Trace, assembler: Assembler, agent_id: str,
                   group: tuple[list[Span], list[tuple[Span, str | None]]], taken: Taken, force: bool) -> None:
        end = trace.spans.get(agent_id)  # the span that ends the run when it comes
        # A guessed owner that came and is not an agent span (a framework's step span, a request's span): it still
        # ends the run, but names nothing.
        agent = end if end is not None and operation(end) == "invoke_agent" else None
        steps = attach(*group)
        key = position_key(trace_id, agent_id)
        # The position as last written here saves a read per request; a stale one (another receiver wrote) only
        # makes the compare-and-set below write nothing, and is then read again.
        state = trace.states[agent_id] if agent_id in trace.states else self.store.imported_file(key)
        done = dict(state.done) if state is not None else {}
        stored = [chat for chat, _tools in steps if chat.span_id in done]
        newest = max((c.start_ns for c in stored), default=None)
        ready = []
        now = self.clock()
        for index, (chat, tools) in enumerate(steps):
            if chat.span_id in done:
                continue
            waited = force or now - trace.arrived.get(chat.span_id, now) >= self.settle_s
            if not settled(chat, tools, later=index + 1 < len(steps), agent_seen=end is not None, waited=waited):
                trace.pending = True
                break  # steps go in start order: a later one waits for this one
            ready.append((chat, tools))
        parent = assembler.parent_of(agent_id)
        ending = end is not None and ENDED not in done
        parenting = parent[0] is not None and agent_id not in trace.parents
        if state is not None and not ready and not ending and not parenting:
            return
        run = run_of(trace_id, agent_id, agent, steps, parent, end=end)
        steps_done = sum(1 for k in done if k != ENDED)
        for offset, (chat, tools) in enumerate(ready, start=1):
            run.steps.append(step_of(chat, tools))
            done[chat.span_id] = steps_done + offset
            if newest is not None and chat.start_ns < newest:
                taken.late += 1
        if end is not None:
            done[ENDED] = 0
        steps_done += len(ready)
        added = self.store.append_imported(key, was=state, run_id=run.run_id, size=steps_done, offset=steps_done,
                                           mtime_ns=0, done=done, runs=[run])
        if ready and not added:  # the position moved under us (another receiver, or a lost answer): read it again
            trace.states.pop(agent_id, None)
            trace.pending = True  # looked at again by the next request for the trace, or the sweep
            return
        if ready:
            trace.states[agent_id] = FileState(key, run.run_id, steps_done, steps_done, 0, dict(done))
        else:  # whether the write landed is not known from its answer
            trace.states.pop(agent_id, None)
        if parent[0] is not None:
            trace.parents.add(agent_id)
        taken.new_runs += state is None
        count = added.get(run.run_id, 0)
        taken.steps += count
        taken.runs.append((run.run_id, count))
