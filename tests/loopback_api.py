"""A loopback HTTP stand-in for the Anthropic Messages API.

The real ``anthropic.Anthropic`` client talks to it over a socket, so the
SDK's own request building, response parsing and retries are exercised.
Answers come from the offline model's logic and are sent as raw JSON with
exactly the fields a server sends. Every request body is recorded.

Crash and failure tests shape the traffic: ``delay`` holds every answer
(a slow model, so a client can be killed while it waits), and a plan entry
can be an error (``error_reply``), a hand-written message
(``message_reply``), a dropped connection (``drop``), a hang past the
client's timeout (``hang``), a stream cut short (``broken_stream``) or one
that takes its time (``slow_stream``). A client killed mid-request is expected.

A request with ``"stream": true`` (every call Dayflow makes) is answered with
server-sent events made from the answer (``agent.streaming.events_of``), unless
the lane's ``streams`` is False (a server that answers with a whole message).

``on_request(number)`` runs as each request arrives, before the answer is
sent: fault tests cut the database connection while a call is in flight.

One server can serve many independent clients: ``lane(name, delay=...)``
is a base URL of its own (``/lanes/NAME``) with its own delay, plan and
record of requests, so the crash trials share one server per module.

``POST /v1/messages/count_tokens`` (free on the real API: it buys no reply)
is answered apart and recorded in ``count_requests``, never in ``requests``:
``calls`` counts paid calls only. Its count is the input size the offline
model reports for the same request, plus ``count_offset`` (a test sets one to
see that a number came from this endpoint and not from a local estimate).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from dayflow_tui.agent.offline import OfflineClient
from dayflow_tui.agent.streaming import events_of, sse_bytes

# A reply plan entry: (status, headers, body dict) returned instead of a model answer.
Reply = tuple[int, dict, dict]

FAKE_KEY = "sk-ant-test-0123456789abcdef-LOOPBACK-SECRET"
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def error_reply(status: int, message: str = "loopback error", headers: dict | None = None) -> Reply:
    """An HTTP error in the API's error shape."""
    body = {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}}
    return status, headers or {}, body


def message_reply(content: list[dict], stop_reason: str | None = "end_turn") -> Callable:
    """A hand-written assistant message instead of the offline model's answer."""

    def plan(handler, body: dict) -> Reply:
        return 200, {}, {"id": "msg_loopback_scripted", "type": "message", "role": "assistant",
                         "model": body.get("model", "claude-loopback"), "content": content,
                         "stop_reason": stop_reason, "stop_sequence": None,
                         "usage": {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0,
                                   "cache_read_input_tokens": 0}}

    return plan


def raw_reply(body: str | bytes, status: int = 200) -> Reply:
    """A 200 (or ``status``) whose body is exactly these bytes: odd JSON, an array, a NUL."""
    return status, {}, body.encode() if isinstance(body, str) else body


def broken_stream(after: int, error_type: str | None = None) -> Callable:
    """The offline model's answer streamed, cut after ``after`` events: the connection closes, or (with
    ``error_type``, e.g. ``overloaded_error``) an ``error`` event ends it, as the API does mid-stream."""

    def plan(handler, body: dict) -> None:
        lane = handler.server_api.lane_for(handler.path)
        events = list(events_of(lane.answer(body)))[:after]
        if error_type is not None:
            events.append({"type": "error", "error": {"type": error_type, "message": "loopback: " + error_type}})
        handler.send_events(events)

    return plan


def slow_stream(pause: float) -> Callable:
    """The offline model's answer streamed with ``pause`` seconds between events (a reply forming)."""

    def plan(handler, body: dict) -> None:
        lane = handler.server_api.lane_for(handler.path)
        handler.send_events(events_of(lane.answer(body)), pause=pause)

    return plan


def drop(handler, body: dict) -> None:
    """Read the request, then close the connection without a word."""
    handler.close_connection = True


def hang(seconds: float) -> Callable:
    """Say nothing for ``seconds`` (beyond the client's timeout), then close."""

    def plan(handler, body: dict) -> None:
        handler.server.stopping.wait(seconds)
        handler.close_connection = True

    return plan


class Lane:
    """One client's view of the server: its base URL, delay, plan and the requests it sent."""

    def __init__(self, prefix: str, *, extra_block_fields: dict | None = None, delay: float = 0.0,
                 on_request: Callable[[int], None] | None = None):
        self.prefix = prefix
        self.delay = delay
        self.on_request = on_request
        self.requests: list[dict] = []
        self.count_requests: list[dict] = []
        self.count_offset = 0
        self.headers: list[dict] = []
        self.planned: dict[int, Reply | Callable] = {}
        self.extra_block_fields = extra_block_fields or {}
        self.streams = True  # a streaming request is answered with events (False: a whole JSON message)
        self._offline = OfflineClient(delay=0)
        self._lock = threading.Lock()
        # Messages calls being answered right now, the most seen at once, and when each began (monotonic):
        # what a shared limit is measured by, at the server.
        self.in_flight = 0
        self.most_in_flight = 0
        self.started: list[float] = []

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.started.append(time.monotonic())

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    @property
    def url(self) -> str:
        return self._root_url() + self.prefix

    def _root_url(self) -> str:
        raise NotImplementedError

    @property
    def calls(self) -> int:
        return len(self.requests)

    def env(self, key: str = FAKE_KEY) -> dict[str, str]:
        """Environment entries that point a ``dayflow`` process's real SDK at this lane."""
        return {"ANTHROPIC_BASE_URL": self.url, "ANTHROPIC_API_KEY": key}

    def record(self, body: dict, headers) -> Reply | Callable | None:
        with self._lock:
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in headers.items()})
            number = len(self.requests)
            planned = self.planned.get(number)
        if self.on_request is not None:
            self.on_request(number)
        return planned

    def count(self, body: dict) -> int:
        """The input tokens of ``body`` as the offline model counts a request's whole input."""
        from dayflow_tui.money.tokens import estimate_tokens

        size = estimate_tokens({"system": body.get("system"), "tools": body.get("tools"),
                                "messages": body.get("messages")})
        return size + self.count_offset

    def answer(self, body: dict) -> dict:
        """The JSON a server would send for ``body``: the offline model's answer, server-shaped."""
        message = self._offline.messages.create(**{**body, "stream": False})
        payload = message.to_dict(mode="json")
        for block in payload["content"]:
            block.update(self.extra_block_fields.get(block["type"], {}))
        return payload


class _SharedLane(Lane):
    def __init__(self, server: "LoopbackAPI", prefix: str, **options):
        super().__init__(prefix, **options)
        self._server = server

    def _root_url(self) -> str:
        return self._server._root_url()


class LoopbackAPI(Lane):
    """The server, and its default lane (the root URL)."""

    def __init__(self, *, extra_block_fields: dict | None = None, delay: float = 0.0,
                 on_request: Callable[[int], None] | None = None):
        super().__init__("", extra_block_fields=extra_block_fields, delay=delay, on_request=on_request)
        self.lanes: dict[str, Lane] = {}
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.server.stopping = threading.Event()  # wakes delays and hangs at shutdown
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _root_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def lane(self, name: str, *, delay: float = 0.0) -> Lane:
        """A base URL of its own on this server (``/lanes/NAME``), with its own delay and record."""
        with self._lock:
            if name in self.lanes or "/" in name:
                raise ValueError(f"lane {name!r} is taken or not a path segment")
            lane = self.lanes[name] = _SharedLane(self, f"/lanes/{name}", delay=delay)
        return lane

    def lane_for(self, path: str) -> Lane | None:
        if not path.startswith("/lanes/"):
            return self
        return self.lanes.get(path.split("/")[2])

    def __enter__(self) -> "LoopbackAPI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            server_api = api

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def handle(self) -> None:
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed mid-request: crash tests do that

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                lane = api.lane_for(self.path)
                counted = lane is not None and not self.path.split("?")[0].endswith("/count_tokens")
                if counted:
                    lane.enter()
                try:
                    self.answer_post(lane, body)
                finally:
                    if counted:
                        lane.leave()

            def answer_post(self, lane, body: dict) -> None:
                if lane is None:
                    planned = error_reply(404, f"no lane for {self.path}")
                elif self.path.split("?")[0].endswith("/count_tokens"):
                    with lane._lock:
                        lane.count_requests.append(body)
                    planned = (200, {}, {"input_tokens": lane.count(body)})
                else:
                    planned = lane.record(body, self.headers)
                    if lane.delay:
                        api.server.stopping.wait(lane.delay)
                if callable(planned):
                    planned = planned(self, body)
                    if planned is None:
                        return
                status, headers, reply = planned if planned else (200, {}, lane.answer(body))
                if status == 200 and isinstance(reply, dict) and body.get("stream") and lane.streams:
                    self.send_events(events_of(reply), headers)
                    return
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def send_events(self, events, headers: dict | None = None, *, pause: float = 0.0) -> None:
                """A 200 whose body is server-sent events, written as they come (no length: the stream ends
                when the connection closes, as the API's does)."""
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                for event in events:
                    self.wfile.write(sse_bytes([event]))
                    self.wfile.flush()
                    if pause:
                        api.server.stopping.wait(pause)
                self.close_connection = True

        return Handler
