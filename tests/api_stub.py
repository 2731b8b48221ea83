"""A loopback stand-in for the Anthropic Messages API, for tests that drive the real SDK.

``ApiStub`` is a threading HTTP server on 127.0.0.1 answering ``POST
/v1/messages``. By default it answers like the offline model (same logic,
same JSON the real API sends), after an optional delay. A script can replace
any request's answer by number: an HTTP error with headers, a dropped
connection, a hang past the client's timeout, or a hand-written assistant
message. Every request is counted and kept (body and headers), so a test
can say exactly how many paid calls a process made.

Point a ``dayflow`` process at it with ``stub.env()`` (``ANTHROPIC_BASE_URL``
and a fake ``ANTHROPIC_API_KEY``) and ``--model`` any Claude-looking name.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union

from dayflow_tui.offline import OfflineClient
from dayflow_tui.tokens import estimate_tokens

FAKE_KEY = "sk-ant-test-0123456789abcdef-DO-NOT-LEAK"
STUB_MODEL = "claude-stub-1"

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


@dataclass
class Status:
    """Answer with an HTTP error in the API's error shape."""

    code: int
    message: str = "stub error"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Drop:
    """Read the request, then close the connection without answering."""


@dataclass
class Hang:
    """Answer nothing for ``seconds`` (longer than the client's timeout), then close."""

    seconds: float


@dataclass
class Reply:
    """A hand-written assistant message (content blocks and stop_reason) instead of the offline model's."""

    content: list[dict]
    stop_reason: str | None = "end_turn"


Action = Union[Status, Drop, Hang, Reply, None]
Script = Callable[[int, dict], Action]


def offline_answer(body: dict) -> dict:
    """What the offline model answers to ``body``, as the JSON the real API would send."""
    message = OfflineClient(delay=0).messages.create(**body)
    return message.to_dict(mode="json")


def reply_json(body: dict, reply: Reply, number: int) -> dict:
    return {"id": f"msg_stub_{number:04d}", "type": "message", "role": "assistant",
            "model": body.get("model", STUB_MODEL), "content": reply.content, "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": estimate_tokens(body.get("messages", [])),
                      "output_tokens": estimate_tokens(reply.content),
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


class ApiStub:
    """The server. ``script(n, body)`` (n counts from 1) may return an action for request n; None means answer normally."""

    def __init__(self, *, delay: float = 0.0, script: Script | dict[int, Action] | None = None):
        self.delay = delay
        if isinstance(script, dict):
            table = dict(script)
            script = lambda n, _body: table.get(n)  # noqa: E731
        self.script: Script = script or (lambda n, _body: None)
        self.requests: list[dict] = []
        self.request_headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="api-stub", daemon=True)

    # -- lifecycle -------------------------------------------------------

    def __enter__(self) -> "ApiStub":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def env(self, key: str = FAKE_KEY) -> dict[str, str]:
        """Environment entries that point the real SDK at this stub."""
        return {"ANTHROPIC_BASE_URL": self.url, "ANTHROPIC_API_KEY": key}

    # -- serving ---------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def handle(self) -> None:
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed mid-request: that is what the crash tests do

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if self.path.split("?")[0] != "/v1/messages":
                    self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
                    return
                body = json.loads(raw or b"{}")
                with stub._lock:
                    stub.requests.append(body)
                    stub.request_headers.append({k.lower(): v for k, v in self.headers.items()})
                    number = len(stub.requests)
                action = stub.script(number, body)
                if stub.delay:
                    stub._stopping.wait(stub.delay)
                if isinstance(action, Drop):
                    self.close_connection = True
                    return
                if isinstance(action, Hang):
                    stub._stopping.wait(action.seconds)
                    self.close_connection = True
                    return
                if isinstance(action, Status):
                    payload = {"type": "error", "error": {"type": _ERROR_TYPES.get(action.code, "api_error"),
                                                          "message": action.message}}
                    self._send(action.code, payload, action.headers)
                    return
                answer = reply_json(body, action, number) if isinstance(action, Reply) else offline_answer(body)
                self._send(200, answer)

            def _send(self, code: int, payload: dict, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", "req_stub")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
