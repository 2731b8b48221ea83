"""OTLP export: planned spans made into the SDK's spans, sent to an OTLP/HTTP receiver or written as OTLP JSON.

The OpenTelemetry SDK (the optional ``otel`` extra) is imported only inside
these functions, when spans are really made or sent: commands that send no
trace never load it. Nothing here imports Textual.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import logging
import threading
from typing import Any, Iterator
from urllib.parse import urlsplit, urlunsplit

from ..version import __version__
from ..config.errors import DayflowError, OtelMissing, UsageError
from ..redaction import redact_and_cut
from ..store import safe_url
from .plan import AGENT_NAME, SpanPlan, TraceSource, as_json, plan_run, trace_id_of

INSTALL_HINT = "pip install 'dayflow-tui[otel]'"


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


class Emitter:
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
    emitter = Emitter(source.run.id, SimpleSpanProcessor(memory))
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


class Problems(logging.Handler):
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
def _captured_logs() -> Iterator[Problems]:
    logger = logging.getLogger("opentelemetry")
    handler = Problems()
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
        raise DayflowError(f"{safe_url(url)}: the OTLP receiver did not take the spans ({cut(reason)})")


def cut(text: str, limit: int = 200) -> str:
    """A line from the SDK or a receiver, redacted and cut, for a warning."""
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
    return as_json(request)


def _hex_ids(item: dict[str, Any]) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if item.get(key):
            item[key] = base64.b64decode(item[key]).hex()
