"""``dayflow collect [--otlp-http HOST:PORT]``: an OTLP/HTTP traces receiver writing GenAI spans as read-only runs.

Requests are served at once, within bounds: a thread per connection, at most
``MAX_CONNECTIONS`` of them (one more waits ``SLOT_WAIT_S`` for a free one, then is
answered 503 with ``Retry-After``, which OTLP exporters retry), and the database
written by a pool of ``WRITERS`` threads (so at most that many connections to it,
however many senders). Each request is read whole (at most
``collect_max_body_bytes``; 413 past it), decoded (``otel.receive``; 400 and one
line when it does not parse, nothing kept), then its spans are handed to
``otel.collect.Collector``, which writes what they start, extend or end before
the answer is sent: a 200 means stored. Two requests for the same trace take
turns (the collector's lock per trace); different traces are written at once.
Wrong path 404, wrong method 405, a database that will not take the write 503
(the sender retries). SIGTERM and Ctrl-C stop it after the writes in hand.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ...config.errors import BadOtlpRequest, DayflowError, StoreError, UsageError
from ...safe_text import printable
from ..opening import open_db

TRACES_PATH = "/v1/traces"
MAX_CONNECTIONS = 32  # connection threads at most (a flood waits in the listen queue, then gets 503)
SLOT_WAIT_S = 2.0  # how long a connection past the bound waits for a free thread before its 503
WRITERS = 4  # threads writing to the database: its connections, at most


class BoundedServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with at most ``MAX_CONNECTIONS`` threads; past that, a plain 503 and the close."""

    daemon_threads = True  # an idle keep-alive connection never holds up a stop (the writes are waited for)
    request_queue_size = 64

    def __init__(self, address, handler, *, connections: int = MAX_CONNECTIONS):
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(connections)
        self.refused = 0

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(timeout=SLOT_WAIT_S):
            self.refused += 1
            _say(f"503: more than {MAX_CONNECTIONS} connections at once; one refused (Retry-After: 1)")
            body = f"busy: more than {MAX_CONNECTIONS} connections at once; send again\n".encode()
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"
                                b"Content-Type: text/plain; charset=utf-8\r\n"
                                + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def _say(line: str) -> None:
    print(f"dayflow collect: {line}", file=sys.stderr, flush=True)


def make_handler(collector, limit: int, writers: ThreadPoolExecutor):
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
            taken = writers.submit(collector.take, spans).result()
            notes = [f"{taken.spans} span(s)"]
            if len(taken.runs) <= 3:
                notes.extend(f"run {run_id}: {count} new step(s)" for run_id, count in taken.runs)
            else:
                notes.append(f"{len(taken.runs)} runs ({taken.new_runs} new): {taken.steps} new step(s)")
            if taken.late:
                notes.append(f"{taken.late} chat span(s) came after a later step was stored: appended at the end")
            if taken.dropped:
                notes.append(f"{taken.dropped} idle trace(s) let go without their invoke_agent span")
            held = collector.held()
            if held:
                notes.append(f"{held} span(s) held until their run's first chat or agent span comes")
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
    writers = ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="collect-writer")
    BoundedServer.allow_reuse_address = True
    try:  # the port first: one that is taken opens (or makes) no database
        server = BoundedServer((host, port), make_handler(collector, current.collect_max_body_bytes, writers))
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
    def settle() -> None:  # chats that waited settle_s for their tools are stored as they stand
        while not stopping.wait(1.0):
            try:
                taken = writers.submit(collector.sweep).result()
            except Exception as exc:  # noqa: BLE001 - tried again in a second; one line, never a traceback
                _say(f"storing waiting chat spans failed ({printable(type(exc).__name__)}: {printable(exc)}); "
                     "trying again")
                continue
            if taken.steps:
                _say(f"{taken.steps} waiting chat span(s) stored without their tool spans (waited "
                     f"{collector.settle_s:.0f} s)")

    threading.Thread(target=settle, name="collect-settle", daemon=True).start()
    _say(f"listening on http://{printable(host)}:{server.server_address[1]}{TRACES_PATH} "
         f"(OTLP/HTTP, protobuf and JSON), writing runs to {printable(store.label)}")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        writers.shutdown(wait=True)  # the writes in hand end (committed or not) before the process does
    stored = 0
    try:
        stored = collector.sweep(force=True).steps
    except Exception as exc:  # noqa: BLE001
        _say(f"chat spans still waiting for their tools were not stored ({printable(type(exc).__name__)}: "
             f"{printable(exc)})")
    if stored:
        _say(f"{stored} chat span(s) still waiting for their tool spans stored as they stand")
    held = collector.held()
    _say("stopped" + (f"; {held} span(s) still waiting for their run's first chat or agent span were not written"
                      if held else ""))
    return 0
