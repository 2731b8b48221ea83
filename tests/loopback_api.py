"""A loopback HTTP stand-in for the Anthropic Messages API.

The real ``anthropic.Anthropic`` client talks to it over a socket, so the
SDK's own request building, response parsing and retries are exercised.
Answers come from the offline model's logic and are sent as raw JSON with
exactly the fields a server sends. Every request body is recorded.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from dayflow_tui.offline import OfflineClient

# A reply plan entry: (status, headers, body dict) returned instead of a model answer.
Reply = tuple[int, dict, dict]


class LoopbackAPI:
    def __init__(self, *, extra_block_fields: dict | None = None):
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.planned: dict[int, Reply | Callable] = {}
        self.extra_block_fields = extra_block_fields or {}
        self._offline = OfflineClient(delay=0)
        self._lock = threading.Lock()
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def calls(self) -> int:
        return len(self.requests)

    def __enter__(self) -> "LoopbackAPI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict) -> dict:
        """The JSON a server would send for ``body``: the offline model's answer, server-shaped."""
        message = self._offline.messages.create(**body)
        payload = message.to_dict(mode="json")
        for block in payload["content"]:
            block.update(self.extra_block_fields.get(block["type"], {}))
        return payload

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                with api._lock:
                    api.requests.append(body)
                    api.headers.append({k.lower(): v for k, v in self.headers.items()})
                    number = len(api.requests)
                    planned = api.planned.get(number)
                if callable(planned):
                    planned = planned(self, body)
                    if planned is None:
                        return
                status, headers, reply = planned if planned else (200, {}, api.answer(body))
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
