"""``dayflow collect [--otlp-http HOST:PORT]``: an OTLP/HTTP traces receiver writing GenAI spans as read-only runs.

One request at a time (``http.server``): each is read whole (at most
``collect_max_body_bytes``; 413 past it), decoded (``otel.receive``; 400 and one
line when it does not parse, nothing kept), then its spans are handed to
``otel.collect.Collector``, which writes what they complete before the answer
is sent: a 200 means stored. Wrong path 404, wrong method 405, a database that
will not take the write 503 (the sender retries). SIGTERM and Ctrl-C stop it
after the request in hand.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from ...config.errors import BadOtlpRequest, DayflowError, StoreError, UsageError
from ...safe_text import printable
from ..opening import open_db

TRACES_PATH = "/v1/traces"


def _say(line: str) -> None:
    print(f"dayflow collect: {line}", file=sys.stderr, flush=True)


def make_handler(collector, limit: int):
    from ...otel.receive import JSON, PROTOBUF, decode, unzip

    class Handler(BaseHTTPRequestHandler):
        server_version = "dayflow-collect"
        timeout = 30  # a sender that stops mid-request is let go
        sys_version = ""

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
            pass  # each request gets its own line below, made inert

        def _answer(self, status: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            if status >= 400:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)

        def _refuse(self, status: int, line: str) -> None:
            line = " ".join(printable(line).split())[:300]
            _say(f"{printable(self.command)} {printable(self.path[:200])} {status}: {line}")
            self._answer(status, (line + "\n").encode("utf-8"))

        def do_GET(self) -> None:  # noqa: N802 - http.server's names
            self._other()

        do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET  # noqa: N815

        def _other(self) -> None:
            if self.path.split("?", 1)[0] == TRACES_PATH:
                self._refuse(405, f"{TRACES_PATH} takes POST only")
            else:
                self._refuse(404, f"no such path (OTLP traces go to POST {TRACES_PATH})")

        def do_POST(self) -> None:  # noqa: N802
            try:
                self._post()
            except BadOtlpRequest as exc:
                self._refuse(exc.status, str(exc))
            except StoreError as exc:
                self._refuse(503, f"the database did not take the spans ({exc}); nothing kept, send again")
            except DayflowError as exc:
                self._refuse(500, str(exc))
            except (ConnectionError, TimeoutError):
                self.close_connection = True
            except Exception as exc:  # noqa: BLE001 - one line for the sender and the log, never a traceback
                self._refuse(500, f"internal error: {type(exc).__name__}: {exc}")

        def _post(self) -> None:
            if self.path.split("?", 1)[0] != TRACES_PATH:
                self._drain(self._length())
                raise BadOtlpRequest(f"no such path (OTLP traces go to POST {TRACES_PATH})", 404)
            length = self._length()
            if length is None:
                raise BadOtlpRequest("a body with a Content-Length is needed", 411)
            if length > limit:
                self._drain(length)
                raise BadOtlpRequest(f"the body is {length:,} bytes, over the limit of {limit:,} "
                                     "(setting collect_max_body_bytes)", 413)
            body = self.rfile.read(length)
            if len(body) != length:
                raise BadOtlpRequest("the body ended before its Content-Length")
            body = unzip(body, self.headers.get("Content-Encoding", ""), limit)
            kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            spans = decode(body, kind)
            taken = collector.take(spans)
            notes = [f"{taken.spans} span(s)"]
            if len(taken.runs) <= 3:
                notes.extend(f"run {run_id}: {count} new step(s)" for run_id, count in taken.runs)
            else:
                notes.append(f"{len(taken.runs)} runs ({taken.new_runs} new): {taken.steps} new step(s)")
            if taken.dropped:
                notes.append(f"{taken.dropped} idle trace(s) let go without their invoke_agent span")
            held = collector.held()
            if held:
                notes.append(f"{held} span(s) held until their invoke_agent span comes")
            _say(f"POST {TRACES_PATH} 200: " + printable(", ".join(notes)))
            if kind == JSON:
                self._answer(200, b"{}", JSON)
            else:
                self._answer(200, b"", PROTOBUF)  # an empty ExportTraceServiceResponse

        def _length(self) -> int | None:
            text = self.headers.get("Content-Length")
            return int(text.strip()) if text is not None and text.strip().isdigit() else None

        def _drain(self, length: int | None) -> None:
            """Read (and drop) a refused body up to 4x the limit, so the sender reads the answer, not a reset."""
            left = min(length or 0, 4 * limit)
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 20))
                if not chunk:
                    break
                left -= len(chunk)
            self.close_connection = True

    return Handler


def cmd_collect(args: argparse.Namespace) -> int:
    from ...config import settings
    from ...otel.receive import require_proto

    require_proto()  # the one-line hint before anything is opened
    host, port = args.otlp_http
    current = settings.current()
    from ...otel.collect import Collector

    collector = Collector(None, hold_s=current.collect_hold_s)
    HTTPServer.allow_reuse_address = True
    try:  # the port first: one that is taken opens (or makes) no database
        server = HTTPServer((host, port), make_handler(collector, current.collect_max_body_bytes))
    except OSError as exc:
        raise UsageError(f"cannot listen on {printable(host)}:{port}: {printable(exc.strerror or exc)}") from None
    try:
        store = collector.store = open_db(args)
    except BaseException:
        server.server_close()
        raise
    server.timeout = 0.5
    stopping = threading.Event()

    def stop(signum, _frame) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _say(f"listening on http://{printable(host)}:{server.server_address[1]}{TRACES_PATH} "
         f"(OTLP/HTTP, protobuf and JSON), writing runs to {printable(store.label)}")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    held = collector.held()
    _say("stopped" + (f"; {held} span(s) still waiting for their invoke_agent span were not written" if held else ""))
    return 0
