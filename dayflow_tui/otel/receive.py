"""An OTLP/HTTP traces request decoded into plain spans (``dayflow collect``).

The body is an ``ExportTraceServiceRequest`` (opentelemetry-proto), as protobuf
(``application/x-protobuf``) or as OTLP/JSON (``application/json``: the proto3
JSON mapping, except that trace and span ids are hex strings and enums may be
numbers). Everything is checked before anything is kept: a body that does not
parse, or a span whose ids are not 16 and 8 bytes, makes the whole request
``BadRequest`` (one line), so a bad request writes nothing.

opentelemetry-proto (the ``collect`` extra) is imported only inside these
functions. Every value read here is untrusted text; nothing here prints it.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..config.errors import BadOtlpRequest as BadRequest
from ..config.errors import OtelMissing

INSTALL_HINT = "pip install 'dayflow-tui[collect]'"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def available() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.proto.collector.trace.v1.trace_service_pb2") is not None
    except (ImportError, ValueError):
        return False


def require_proto() -> None:
    if not available():
        raise OtelMissing(f"dayflow collect needs opentelemetry-proto, which is not installed: {INSTALL_HINT}")


@dataclass
class Span:
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    status_code: int = 0  # 0 unset, 1 ok, 2 error
    status_message: str = ""
    service: str | None = None
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # what otel.collect read of it


def unzip(body: bytes, encoding: str, limit: int) -> bytes:
    """A gzip'd body inflated, never past ``limit`` bytes (413 beyond)."""
    encoding = (encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise BadRequest(f"Content-Encoding {encoding[:40]!r} is not taken (gzip or none)", 415)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"the gzip body does not inflate ({exc})") from None
    if len(out) > limit:
        raise BadRequest(f"the body inflates past the limit of {limit:,} bytes", 413)
    return out


def decode(body: bytes, content_type: str) -> list[Span]:
    """Every span of one request, or ``BadRequest``."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    kind = (content_type or "").split(";")[0].strip().lower()
    request = ExportTraceServiceRequest()
    if kind == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, ValueError, RecursionError) as exc:
            raise BadRequest(f"the protobuf body does not parse as an ExportTraceServiceRequest ({_short(exc)})") \
                from None
    elif kind == JSON:
        _parse_json(body, request)
    else:
        raise BadRequest(f"Content-Type {kind[:60]!r} is not taken ({PROTOBUF} or {JSON})", 415)
    return _spans(request)


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160] or type(exc).__name__


def _parse_json(body: bytes, request: Any) -> None:
    from google.protobuf.json_format import ParseDict, ParseError

    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequest("the JSON body is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON ({_short(exc)})") from None
    if not isinstance(data, dict):
        raise BadRequest("the JSON body is not an object (an ExportTraceServiceRequest)")
    try:
        for resource in _list(data.get("resourceSpans")):
            for scope in _list(_dict(resource).get("scopeSpans")):
                for span in _list(_dict(scope).get("spans")):
                    _ids_to_base64(_dict(span))
                    for link in _list(_dict(span).get("links")):
                        _ids_to_base64(_dict(link))
        ParseDict(data, request, ignore_unknown_fields=True)
    except BadRequest:
        raise
    except (ParseError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise BadRequest(f"the JSON body is not an ExportTraceServiceRequest ({_short(exc)})") from None


def _list(value: Any) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest("the JSON body is not an ExportTraceServiceRequest (a list expected)")
    return value


def _dict(value: Any) -> dict:
    if not isinstance(value, dict):
        raise BadRequest("the JSON body is not an ExportTraceServiceRequest (an object expected)")
    return value


def _ids_to_base64(item: dict) -> None:
    """OTLP/JSON writes ids as hex (not proto3 JSON's base64)."""
    for key in ("traceId", "spanId", "parentSpanId"):
        value = item.get(key)
        if value in (None, ""):
            continue
        try:
            item[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except (TypeError, ValueError):
            raise BadRequest(f"{key} is not a hex id") from None


def value_of(any_value: Any, depth: int = 0) -> Any:
    """An ``AnyValue`` as plain Python: text, bool, int, float, list, dict; bytes as hex."""
    if depth > 16:
        return None
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(v, depth + 1) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value, depth + 1) for kv in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in items}


def _spans(request: Any) -> list[Span]:
    spans: list[Span] = []
    for resource_spans in request.resource_spans:
        service = _attributes(resource_spans.resource.attributes).get("service.name")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if len(span.trace_id) != 16 or not any(span.trace_id):
                    raise BadRequest(f"a span's trace id is {len(span.trace_id)} bytes, not 16 (or all zero)")
                if len(span.span_id) != 8 or not any(span.span_id):
                    raise BadRequest(f"a span's span id is {len(span.span_id)} bytes, not 8 (or all zero)")
                if span.parent_span_id and len(span.parent_span_id) != 8:
                    raise BadRequest(f"a span's parent span id is {len(span.parent_span_id)} bytes, not 8")
                parent = span.parent_span_id.hex() if span.parent_span_id and any(span.parent_span_id) else None
                spans.append(Span(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(), parent_id=parent, name=span.name,
                    start_ns=span.start_time_unix_nano, end_ns=max(span.end_time_unix_nano, span.start_time_unix_nano),
                    attributes=_attributes(span.attributes),
                    events=[(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in span.events],
                    status_code=int(span.status.code), status_message=span.status.message,
                    service=service if isinstance(service, str) else None))
    return spans
