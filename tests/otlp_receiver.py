"""A loopback OTLP/HTTP trace receiver: what a collector (Jaeger, Tempo, Phoenix...) is sent, decoded.

Requests are decoded with ``opentelemetry-proto`` (the protocol's own
messages), so a span the exporter got wrong fails to decode or shows the
wrong fields here, exactly as it would at a real collector.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    trace_id: str  # hex, as OTLP JSON writes it
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]
    status_code: int
    status_message: str
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return self.trace_id, self.span_id


def _value(any_value) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind) if kind else None


def _attributes(items) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


def spans_of(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    found = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(ReceivedSpan(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(), name=span.name, kind=span.kind,
                    start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                    attributes=_attributes(span.attributes),
                    events=[(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in span.events],
                    status_code=span.status.code, status_message=span.status.message, resource=resource))
    return found


def parse_otlp_json_line(line: str) -> ExportTraceServiceRequest:
    """An OTLP JSON line (hex ids, as the OTLP file format writes them) as the protocol message."""
    import json

    data = json.loads(line)
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        # OTLP JSON writes ids in hex; protobuf's own JSON mapping wants base64.
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return ParseDict(data, ExportTraceServiceRequest())


class OtlpReceiver:
    """``with OtlpReceiver() as r: ... r.url, r.spans, r.requests``; ``status`` answers every request."""

    def __init__(self, status: int = 200):
        self.status = status
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if receiver.status != 200:
                    self.send_response(receiver.status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    receiver.requests.append(request)
                    receiver.paths.append(self.path)
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                data = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "OtlpReceiver":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self.lock:
            return [span for request in self.requests for span in spans_of(request)]

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()
            self.paths.clear()

