"""Spans per second into ``dayflow collect``: a standalone measurement (not a ``python -m bench`` item).

Starts the real ``dayflow collect`` (the console script next to the given
Python, default this one's) on a fresh SQLite file, then ``--senders``
threads each post ``--traces`` agent traces as OTLP/HTTP protobuf, the way a
``BatchSpanProcessor`` does: one request per span as it ends (chat, tool,
chat, tool, chat, then the ``invoke_agent`` span), so each trace's run grows
step by step. Prints spans/s and requests/s over the whole send, and checks
the database holds every run with all its steps.

    python bench/otlp_ingest.py --senders 1 --traces 200
    python bench/otlp_ingest.py --senders 8 --traces 50 --dayflow /path/to/venv/bin/dayflow   # another build
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

CHATS = 3  # per trace: 3 chats, 2 tools, 1 agent span = 6 spans


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _kv(key, value):
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def trace_bodies(n: int, sender: int) -> list[bytes]:
    """One trace's spans, each as its own ExportTraceServiceRequest, in the order they end."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    trace_id = (sender * 1_000_000 + n + 1).to_bytes(16, "big")
    agent_id = (1).to_bytes(8, "big")
    t0 = 1_760_000_000_000_000_000 + n * 10**9
    spans = []
    for i in range(CHATS):
        last = i == CHATS - 1
        output = [{"role": "assistant", "parts": [{"type": "text", "content": "done"}] if last else
                   [{"type": "tool_call", "id": f"call_{i}", "name": "lookup", "arguments": {"q": i}}]}]
        history = [{"role": "user", "parts": [{"type": "text", "content": "hello"}]}]
        history += [{"role": "assistant", "parts": [{"type": "tool_call", "id": f"call_{j}", "name": "lookup"}]}
                    for j in range(i)]
        spans.append(Span(trace_id=trace_id, span_id=(10 + 2 * i).to_bytes(8, "big"), parent_span_id=agent_id,
                          name="chat m", start_time_unix_nano=t0 + i * 10**8, end_time_unix_nano=t0 + i * 10**8 + 10**7,
                          attributes=[_kv("gen_ai.operation.name", "chat"), _kv("gen_ai.usage.input_tokens", 100),
                                      _kv("gen_ai.usage.output_tokens", 10),
                                      _kv("gen_ai.input.messages", json.dumps(history)),
                                      _kv("gen_ai.output.messages", json.dumps(output))]))
        if not last:
            spans.append(Span(trace_id=trace_id, span_id=(11 + 2 * i).to_bytes(8, "big"), parent_span_id=agent_id,
                              name="execute_tool lookup", start_time_unix_nano=t0 + i * 10**8 + 2 * 10**7,
                              end_time_unix_nano=t0 + i * 10**8 + 3 * 10**7,
                              attributes=[_kv("gen_ai.operation.name", "execute_tool"),
                                          _kv("gen_ai.tool.call.id", f"call_{i}"),
                                          _kv("gen_ai.tool.call.result", "ok")]))
    spans.append(Span(trace_id=trace_id, span_id=agent_id, name="invoke_agent bench", start_time_unix_nano=t0,
                      end_time_unix_nano=t0 + 10**9,
                      attributes=[_kv("gen_ai.operation.name", "invoke_agent"), _kv("gen_ai.agent.name", "bench")]))
    return [ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])
            .SerializeToString() for span in spans]


def _merge(bodies: list[bytes]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    merged = ExportTraceServiceRequest()
    for body in bodies:
        merged.MergeFromString(body)
    return merged.SerializeToString()


def _counts(db: str) -> tuple[int, int, dict]:
    if "://" in db:
        import psycopg

        with psycopg.connect(db) as con:
            runs, steps = con.execute("SELECT count(*), coalesce(sum(step_count), 0) FROM runs").fetchone()
            statuses = dict(con.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())
        return runs, steps, statuses
    with sqlite3.connect(db) as con:
        runs, steps = con.execute("SELECT count(*), coalesce(sum(step_count), 0) FROM runs").fetchone()
        statuses = dict(con.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())
    return runs, steps, statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--senders", type=int, default=1)
    parser.add_argument("--traces", type=int, default=100, help="traces per sender")
    parser.add_argument("--dayflow", default=str(Path(sys.executable).with_name("dayflow")))
    parser.add_argument("--batch", choices=("span", "trace"), default="span",
                        help="one request per span as it ends (default), or one per trace (a batch of 6 spans)")
    parser.add_argument("--db", help="a PostgreSQL URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="otlp-ingest-"))
    db = args.db or str(work / "collect.db")
    port = free_port()
    log = (work / "collect.log").open("wb")
    proc = subprocess.Popen([args.dayflow, "collect", "--otlp-http", f"127.0.0.1:{port}", "--db", str(db)],
                            stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL,
                            env={**os.environ, "DAYFLOW_CONFIG": str(work / "none.toml")})
    try:
        deadline = time.monotonic() + 120
        while b"listening on" not in (work / "collect.log").read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((work / "collect.log").read_text())
            time.sleep(0.05)
        bodies = [[trace_bodies(n, s) for n in range(args.traces)] for s in range(args.senders)]
        if args.batch == "trace":
            bodies = [[[_merge(trace)] for trace in mine] for mine in bodies]
        url = f"http://127.0.0.1:{port}/v1/traces"
        failures = []

        def send(mine: list[list[bytes]]) -> None:
            for trace in mine:
                for body in trace:
                    request = urllib.request.Request(url, data=body, method="POST",
                                                     headers={"Content-Type": "application/x-protobuf"})
                    try:
                        with urllib.request.urlopen(request, timeout=120) as answer:
                            answer.read()
                    except Exception as exc:  # noqa: BLE001 - counted, reported below
                        failures.append(repr(exc))

        threads = [threading.Thread(target=send, args=(mine,)) for mine in bodies]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    requests = sum(len(trace) for mine in bodies for trace in mine)
    spans = args.senders * args.traces * (2 * CHATS)
    runs, steps, statuses = _counts(db)
    expected = args.senders * args.traces
    print(f"senders={args.senders} batch={args.batch} traces={expected} spans={spans} requests={requests} "
          f"elapsed={elapsed:.2f}s spans/s={spans / elapsed:.0f} failures={len(failures)} "
          f"runs={runs}/{expected} steps={steps}/{expected * CHATS} statuses={statuses}")
    if failures:
        print("first failure:", failures[0])
    return 0 if runs == expected and steps == expected * CHATS and not failures else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
