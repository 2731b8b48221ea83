"""OpenTelemetry traces of runs, in the GenAI semantic conventions, from what the store recorded.

One trace per run. Its root is an ``invoke_agent`` span (the run: created to
its last change, the run's token totals, a ``dayflow.run.resumed`` event
where each resume began); under it a ``chat`` span per model call (step) and
an ``execute_tool`` span per tool call. Every value comes from the database,
so a trace exported a year later is the trace sent live:

- ``chat``: ``gen_ai.request.model`` / ``gen_ai.response.model``, input and
  output tokens, cache read and cache creation tokens, the stop reason as
  ``gen_ai.response.finish_reasons``; it ends when the step was committed and
  starts ``duration_ms`` (the stored wall time of the API call) before.
- ``execute_tool``: the tool's name and call id, ``ok`` or the error code
  (``error.type``, status ERROR). Per-call times are not stored: a step's
  tools share the span from the step's commit (or the resume that ran them)
  to the commit of their results.
- Content (the messages sent, the reply, tool arguments and results) only
  when asked for (setting ``otel_content``, flag ``--content``).

Ids are derived from the run id (trace), and the run id and step (spans):
exporting again, from any database the run travelled to, sends the same ids,
which a backend that de-duplicates keeps once.

The mapping (``plan_*``) is plain Python; the OpenTelemetry SDK (the optional
``otel`` extra) is imported only to turn plans into spans and send them.
Nothing here imports Textual.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

from .. import __version__
from ..config import settings
from ..config.errors import DayflowError, OtelMissing, UsageError
from ..store import Store, effective_status, safe_url, step_blocks
from ..store.tables.resumes import run_resumes
from ..store.status import RunStatus
from .compaction import compact
from .brief import SYSTEM as SYSTEM_PROMPT
from .events import MAX_TOKENS, StepEvent
from .messages import messages_from
from .transcript import build_steps

if TYPE_CHECKING:
    from ..store.models import Run, RunResume, Step

PROVIDER = "anthropic"
AGENT_NAME = "dayflow"
INSTALL_HINT = "pip install 'dayflow-tui[otel]'"
# Live export: a step's spans leave within this long; at a drive's end, wait at most this for the rest.
LIVE_BATCH_DELAY_MS = 500
LIVE_FLUSH_TIMEOUT_S = 5.0


# -- ids -----------------------------------------------------------------------


def _digest(text: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:size], "big")
    return value or 1  # all-zero ids are invalid in OpenTelemetry


def trace_id_of(run_id: str) -> int:
    """128-bit trace id of a run: the same in every database the run is imported into."""
    return _digest(f"dayflow/run/{run_id}", 16)


def span_id_of(run_id: str, *where: object) -> int:
    """64-bit span id of a part of a run (``"agent"``, ``(n, "chat")``, ``(n, "tool", call_id)``)."""
    return _digest("/".join(["dayflow/run", run_id, *map(str, where)]), 8)


# -- what the store recorded ---------------------------------------------------


@dataclass
class TraceSource:
    run: "Run"
    steps: list["Step"]
    resumes: list["RunResume"]
    status: str  # as users see it: "interrupted" for a running run whose owner is gone

    def step(self, n: int) -> "Step | None":
        return next((s for s in self.steps if s.n == n), None)


def read_source(store: Store, run_id: str) -> TraceSource:
    run = store.get_run(run_id)
    return TraceSource(run=run, steps=store.steps(run.id), resumes=run_resumes(store, run.id),
                       status=str(effective_status(run)))


# -- the mapping: plain data ---------------------------------------------------


@dataclass
class SpanPlan:
    """One span as the SDK will be asked to make it."""

    name: str
    span_id: int
    parent_id: int | None
    kind: str  # "internal" or "client"
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None  # set: status ERROR with this description


def _ns(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def _common(run: "Run", operation: str) -> dict[str, Any]:
    return {"gen_ai.operation.name": operation, "gen_ai.provider.name": PROVIDER,
            # The older name of the same attribute; several backends still read only this one.
            "gen_ai.system": PROVIDER, "gen_ai.conversation.id": run.id}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _result_text(content: Any) -> Any:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content


def _parts(content: Any) -> list[dict[str, Any]]:
    """Messages API content as the GenAI conventions' message parts."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "content": block.get("text", "")})
        elif kind == "tool_use":
            parts.append({"type": "tool_call", "id": block.get("id"), "name": block.get("name"),
                          "arguments": block.get("input")})
        elif kind == "tool_result":
            parts.append({"type": "tool_call_response", "id": block.get("tool_use_id"),
                          "response": _result_text(block.get("content"))})
        elif kind == "thinking":
            parts.append({"type": "reasoning", "content": block.get("thinking", "")})
        else:  # redacted thinking, server tools: their type, as sent
            parts.append({**block, "type": kind})
    return parts


def _messages(messages: list[dict]) -> list[dict[str, Any]]:
    return [{"role": m.get("role"), "parts": _parts(m.get("content"))} for m in messages]


def _history_before(source: TraceSource, n: int) -> list[dict]:
    """The message list as it stood when step ``n`` was called (rebuilt from the rows, as a resume does)."""
    return messages_from(source.run, [s for s in source.steps if s.n < n])


def plan_chat(source: TraceSource, step: "Step", *, content: bool) -> SpanPlan:
    run = source.run
    end = _ns(step.created_at) or 0
    start = end - (step.duration_ms or 0) * 1_000_000
    attributes = {
        **_common(run, "chat"),
        "gen_ai.request.model": run.model,
        "gen_ai.request.max_tokens": MAX_TOKENS,
        "gen_ai.response.model": step.model or run.model,
        "gen_ai.response.finish_reasons": [step.stop_reason or "unknown"],
        # input_tokens is the whole input, as the conventions ask: uncached + cache writes + cache reads.
        "gen_ai.usage.input_tokens": step.input_tokens,
        "gen_ai.usage.output_tokens": step.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": step.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": step.cache_creation_input_tokens,
        "dayflow.run.id": run.id,
        "dayflow.step": step.n,
    }
    if step.duration_ms is not None:
        attributes["dayflow.call.duration_ms"] = step.duration_ms
    if step.request_est_tokens is not None:
        attributes["dayflow.request.estimated_tokens"] = step.request_est_tokens
    if step.compacted_est_tokens is not None:
        attributes["dayflow.request.compacted_tokens"] = step.compacted_est_tokens
    if content:
        with contextlib.suppress(Exception):  # a damaged row loses its content, not the span
            history = _history_before(source, step.n)
            if step.compacted_est_tokens is not None:
                # The call was sent a compacted view; compaction is deterministic code, so this is that view.
                history = compact(history, threshold_tokens=0)
            attributes["gen_ai.system_instructions"] = _json([{"type": "text", "content": SYSTEM_PROMPT}])
            attributes["gen_ai.input.messages"] = _json(_messages(history))
            output = {"role": "assistant", "parts": _parts(step_blocks(step, "assistant")),
                      "finish_reason": step.stop_reason}
            attributes["gen_ai.output.messages"] = _json([output])
    return SpanPlan(name=f"chat {run.model}", span_id=span_id_of(run.id, step.n, "chat"),
                    parent_id=span_id_of(run.id, "agent"), kind="client", start_ns=start, end_ns=end,
                    attributes=attributes)


def plan_tools(source: TraceSource, step: "Step", *, content: bool) -> list[SpanPlan]:
    """The step's tool calls; none until their results were committed."""
    if step.tools_done_at is None:
        return []
    [view] = build_steps([step])
    if view.problem:
        return []
    run = source.run
    start = _ns(step.created_at) or 0
    end = _ns(step.tools_done_at) or start
    for resume in source.resumes:  # the tools of a step committed just before a crash ran in the resume
        at = _ns(resume.at)
        if at is not None and start < at <= end:
            start = at
    plans = []
    for call in view.calls:
        attributes = {**_common(run, "execute_tool"), "gen_ai.tool.name": call.name,
                      "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function",
                      "dayflow.run.id": run.id, "dayflow.step": step.n, "dayflow.tool.outcome": call.outcome}
        if call.item_count is not None:
            attributes["dayflow.tool.item_count"] = call.item_count
        if call.is_error:
            attributes["error.type"] = call.error_code or "error"
        if content:
            attributes["gen_ai.tool.call.arguments"] = _json(call.input)
            if call.result is not None:
                attributes["gen_ai.tool.call.result"] = call.result
        plans.append(SpanPlan(name=f"execute_tool {call.name}", span_id=span_id_of(run.id, step.n, "tool", call.id),
                              parent_id=span_id_of(run.id, "agent"), kind="internal", start_ns=start, end_ns=end,
                              attributes=attributes, error=call.outcome if call.is_error else None))
    return plans


def plan_agent(source: TraceSource, *, content: bool) -> SpanPlan:
    run = source.run
    start = _ns(run.created_at) or 0
    end = max(_ns(run.updated_at) or start, start)
    attributes = {
        **_common(run, "invoke_agent"),
        "gen_ai.agent.name": AGENT_NAME,
        "gen_ai.request.model": run.model,
        "gen_ai.usage.input_tokens": run.input_tokens,
        "gen_ai.usage.output_tokens": run.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": run.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": run.cache_creation_tokens,
        "dayflow.run.id": run.id,
        "dayflow.run.status": source.status,
        "dayflow.run.steps": run.step_count,
        "dayflow.run.resumes": len(source.resumes),
    }
    if run.error and run.status != RunStatus.DONE.value:
        attributes["dayflow.run.error"] = run.error
    if content:
        attributes["gen_ai.input.messages"] = _json(_messages([{"role": "user", "content": run.user_msg}]))
        if run.final_text:
            attributes["gen_ai.output.messages"] = _json(
                [{"role": "assistant", "parts": _parts(run.final_text), "finish_reason": "end_turn"}])
    events = [("dayflow.run.resumed", _ns(r.at) or start,
               {"dayflow.resume.after_step": r.after_step, "dayflow.resume.previous_status": r.previous_status,
                "host.name": r.owner_host, "process.pid": r.owner_pid}) for r in source.resumes]
    error = None
    if run.status == RunStatus.FAILED.value:
        attributes["error.type"] = "run_failed"
        error = run.error or "failed"
    return SpanPlan(name=f"invoke_agent {AGENT_NAME}", span_id=span_id_of(run.id, "agent"), parent_id=None,
                    kind="internal", start_ns=start, end_ns=end, attributes=attributes, events=events, error=error)


def plan_run(source: TraceSource, *, content: bool) -> list[SpanPlan]:
    """Every span of the run: the agent span first, then each step's chat and tool spans."""
    plans = [plan_agent(source, content=content)]
    for step in source.steps:
        plans.append(plan_chat(source, step, content=content))
        plans.extend(plan_tools(source, step, content=content))
    return plans


# -- the SDK -------------------------------------------------------------------


def available() -> bool:
    """Is the SDK installed? Asked without importing it (commands that send nothing stay fast)."""
    try:
        return all(importlib.util.find_spec(name) is not None
                   for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"))
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def require_sdk(why: str) -> None:
    if not available():
        raise OtelMissing(f"{why} needs OpenTelemetry, which is not installed: {INSTALL_HINT}")


class _Emitter:
    """Turns plans into SDK spans with the planned ids, handing each finished span to ``processor``."""

    def __init__(self, run_id: str, processor: Any):
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.id_generator import IdGenerator
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        class PlannedIds(IdGenerator):
            """The SDK asks for ids as it starts a span; these are the ones planned for it."""

            def __init__(self) -> None:
                self.trace_id = 0
                self.span_id = 0

            def generate_trace_id(self) -> int:
                return self.trace_id

            def generate_span_id(self) -> int:
                return self.span_id

        self.run_id = run_id
        self.ids = PlannedIds()
        self.lock = threading.Lock()
        # ALWAYS_ON: a sampler named in the environment must not drop part of an export.
        self.provider = TracerProvider(resource=Resource.create({"service.name": AGENT_NAME,
                                                                 "service.version": __version__}),
                                       sampler=ALWAYS_ON, id_generator=self.ids, shutdown_on_exit=False)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("dayflow_tui", __version__)

    def emit(self, plans: list[SpanPlan]) -> None:
        from opentelemetry import trace as api
        from opentelemetry.context import Context
        from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

        trace_id = trace_id_of(self.run_id)
        with self.lock:
            for plan in plans:
                self.ids.trace_id, self.ids.span_id = trace_id, plan.span_id
                context = Context()  # a root, whatever span the calling code has open
                if plan.parent_id is not None:
                    parent = SpanContext(trace_id, plan.parent_id, is_remote=False,
                                         trace_flags=TraceFlags(TraceFlags.SAMPLED))
                    context = api.set_span_in_context(NonRecordingSpan(parent), context)
                kind = SpanKind.CLIENT if plan.kind == "client" else SpanKind.INTERNAL
                span = self.tracer.start_span(plan.name, context=context, kind=kind, attributes=plan.attributes,
                                              start_time=plan.start_ns)
                for name, at, attributes in plan.events:
                    span.add_event(name, attributes, timestamp=at)
                if plan.error is not None:
                    span.set_status(Status(StatusCode.ERROR, plan.error))
                span.end(end_time=max(plan.end_ns, plan.start_ns))

    def shutdown(self) -> None:
        self.provider.shutdown()


def spans_of(source: TraceSource, *, content: bool) -> list:
    """The run's spans as the SDK's ``ReadableSpan`` objects."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    emitter = _Emitter(source.run.id, SimpleSpanProcessor(memory))
    emitter.emit(plan_run(source, content=content))
    emitter.shutdown()
    return list(memory.get_finished_spans())


def traces_url(url: str) -> str:
    """An OTLP/HTTP base URL (``http://host:4318``) gets the traces path; a full one is kept."""
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{safe_url(url)}: not an OTLP/HTTP URL (http://HOST:4318 or "
                         "http://HOST:4318/v1/traces)")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


class _Problems(logging.Handler):
    """Keeps the SDK's log lines (export failures) instead of letting them reach the terminal."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                text += f": {record.exc_info[1]}"
            self.lines.append(" ".join(text.split()))


@contextlib.contextmanager
def _captured_logs() -> Iterator[_Problems]:
    logger = logging.getLogger("opentelemetry")
    handler = _Problems()
    logger.addHandler(handler)
    previous = logger.propagate
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = previous


def send_otlp(url: str, spans: list, *, timeout_s: float = 10.0) -> None:
    """Send spans in one OTLP/HTTP request (the SDK's exporter: its retries, ``OTEL_EXPORTER_OTLP_*`` headers)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=traces_url(url), timeout=timeout_s)
    try:
        with _captured_logs() as problems:
            result = exporter.export(spans)
    finally:
        exporter.shutdown()
    if result is not SpanExportResult.SUCCESS:
        reason = problems.lines[-1] if problems.lines else "no reason given"
        raise DayflowError(f"{safe_url(url)}: the OTLP receiver did not take the spans ({_cut(reason)})")


def _cut(text: str, limit: int = 200) -> str:
    from ..redaction import redact_and_cut

    return redact_and_cut(text, limit)


def otlp_json(spans: list) -> str:
    """One OTLP/JSON ``ExportTraceServiceRequest`` (the OTLP file format's line): hex ids, integer enums."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource in request.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return _json(request)


def _hex_ids(item: dict[str, Any]) -> None:
    import base64

    for key in ("traceId", "spanId", "parentSpanId"):
        if item.get(key):
            item[key] = base64.b64decode(item[key]).hex()


# -- live export while a run is driven ------------------------------------------


def live_export_wanted() -> bool:
    return bool(settings.current().otel_endpoint)


def require_live_export() -> None:
    """Refuse to start or resume a run when ``otel_endpoint`` is set but the SDK is missing (before any claim)."""
    if live_export_wanted():
        require_sdk("the otel_endpoint setting")


class LiveTrace:
    """Sends a driven run's spans as its steps commit: ``chat`` at the response, ``execute_tool`` at the results,
    ``invoke_agent`` when the drive ends (again at each resume: same ids, a later end, one more resume event).

    Telemetry never stops a run: a receiver that is down, a row that cannot be
    read, costs spans (``problem`` says why; ``dayflow export --otlp`` sends
    them again), never a step.
    """

    def __init__(self, store: Store, run_id: str, endpoint: str, *, content: bool):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.store = store
        self.run_id = run_id
        self.endpoint = endpoint
        self.content = content
        self.problem: str | None = None
        self._steps: dict[int, "Step"] = {}
        self._logs = _Problems()
        logger = logging.getLogger("opentelemetry")
        logger.addHandler(self._logs)
        logger.propagate = False  # a dashboard's screen or a CLI's output is no place for the SDK's log
        self.processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint),
                                                             timeout=LIVE_FLUSH_TIMEOUT_S),
                                            schedule_delay_millis=LIVE_BATCH_DELAY_MS)
        self.emitter = _Emitter(run_id, self.processor)

    def _source(self, n: int) -> TraceSource:
        """The run with its steps up to ``n``, reading only what changed since the last event."""
        if not self._steps and n > 1:
            self._steps = {s.n: s for s in self.store.steps(self.run_id)}
        else:
            self._steps.update({s.n: s for s in self.store.steps(self.run_id, from_n=n)})
        run = self.store.get_run(self.run_id)
        return TraceSource(run=run, steps=[self._steps[k] for k in sorted(self._steps)],
                           resumes=run_resumes(self.store, self.run_id), status=run.status)

    def on_step(self, event: StepEvent) -> None:
        try:
            source = self._source(event.n)
            step = source.step(event.n)
            if step is None:
                return
            if event.phase == "response":
                self.emitter.emit([plan_chat(source, step, content=self.content)])
            else:
                self.emitter.emit(plan_tools(source, step, content=self.content))
        except Exception as exc:  # telemetry must never cost a step
            self.problem = f"{type(exc).__name__}: {_cut(str(exc))}"

    def watching(self, on_step: Callable[[StepEvent], None] | None) -> Callable[[StepEvent], None]:
        def both(event: StepEvent) -> None:
            self.on_step(event)
            if on_step is not None:
                on_step(event)

        return both

    def finish(self) -> str | None:
        """Send the agent span as the run stands now, wait for the rest; a line saying what failed, or None."""
        try:
            source = read_source(self.store, self.run_id)
            self.emitter.emit([plan_agent(source, content=self.content)])
        except Exception as exc:
            self.problem = f"{type(exc).__name__}: {_cut(str(exc))}"
        try:
            flushed = self.processor.force_flush(int(LIVE_FLUSH_TIMEOUT_S * 1000))
            self.emitter.shutdown()
        finally:
            logging.getLogger("opentelemetry").removeHandler(self._logs)
        if self._logs.lines and self.problem is None:
            self.problem = _cut(self._logs.lines[-1])
        elif not flushed and self.problem is None:
            self.problem = f"timed out after {LIVE_FLUSH_TIMEOUT_S:.0f} s"
        if self.problem is None:
            return None
        return (f"traces of run {self.run_id} not fully sent to {safe_url(self.endpoint)}: {self.problem} "
                f"(send them again: dayflow export {self.run_id} --otlp URL)")


def live_trace(store: Store, run_id: str) -> LiveTrace | None:
    """A ``LiveTrace`` when the ``otel_endpoint`` setting names a receiver, else None."""
    chosen = settings.current()
    if not chosen.otel_endpoint:
        return None
    require_sdk("the otel_endpoint setting")
    return LiveTrace(store, run_id, chosen.otel_endpoint, content=chosen.otel_content)
