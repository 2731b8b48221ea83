"""``dayflow collect`` live: the real console script, sent to by the OpenTelemetry SDK as real programs send.

A ``BatchSpanProcessor`` exports each span when it ends, so an agent's chats and tools reach the receiver while
its ``invoke_agent`` span is still open: the run must be there, running, a step per chat, before the agent ends.
Agents called as tools (``execute_tool`` -> ``invoke_agent``) are child runs. Many senders at once, on the same
traces, make each run once, each step once.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time

from ..reliability_helpers import dayflow, text
from .test_otlp_collect import messages, runs_json, steps_of

USER = {"type": "text", "content": "Weather in Paris?"}


def batch_sender(url, name="live-app"):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    # What the SDK's docs tell programs to use: spans leave in batches, as they end, the agent's last.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url, timeout=30),
                                                   schedule_delay_millis=100))
    return provider, provider.get_tracer("test-live")


def wait_for(what, probe, seconds=60):
    """Poll ``probe`` until it answers truthy (a deadline only to fail, never a timing assert)."""
    deadline = time.monotonic() + seconds
    while True:
        found = probe()
        if found:
            return found
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def chat_span(tracer, *, reply, tokens, reason, call=None):
    from opentelemetry import trace

    part = ({"type": "tool_call", "id": call[0], "name": call[1], "arguments": {"q": "x"}} if call
            else {"type": "text", "content": reply})
    return tracer.start_as_current_span("chat gpt-4o", kind=trace.SpanKind.CLIENT, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": tokens,
        "gen_ai.usage.output_tokens": tokens // 10, "gen_ai.response.finish_reasons": [reason],
        "gen_ai.input.messages": messages("user", USER), "gen_ai.output.messages": messages("assistant", part)})


def tool_span(tracer, call_id, name, result):
    return tracer.start_as_current_span(f"execute_tool {name}", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.result": result})


def agent_span(tracer, name):
    return tracer.start_as_current_span(f"invoke_agent {name}", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name, "gen_ai.request.model": "gpt-4o"})


def otel_runs(db):
    return {r["id"]: r for r in runs_json(db, "--source", "otel")}


def test_a_run_shows_each_step_while_its_agent_span_is_still_open(db_target, collect):
    receiver = collect(db_target)
    provider, tracer = batch_sender(receiver.url)
    with agent_span(tracer, "Weather agent") as agent:
        with chat_span(tracer, reply=None, tokens=120, reason="tool_calls", call=("call_1", "get_weather")):
            pass
        with tool_span(tracer, "call_1", "get_weather", '{"temp_c": 21}'):
            pass
        # the agent span is open: the run is there already, running, with its first step and the tool's result
        (run,) = wait_for("the first step", lambda: [r for r in otel_runs(db_target).values() if r["steps"] == 1])
        assert run["status"] == "running" and run["stored_status"] == "running"
        (step,) = steps_of(db_target, run["id"])
        assert step["tool_results"] == [{"type": "tool_result", "tool_use_id": "call_1",
                                         "content": '{"temp_c": 21}'}]
        with chat_span(tracer, reply="21 °C in Paris.", tokens=160, reason="stop"):
            pass
        wait_for("the second step", lambda: otel_runs(db_target)[run["id"]]["steps"] == 2)
        assert otel_runs(db_target)[run["id"]]["status"] == "running"
        shown = dayflow("show", run["id"], "--no-pager", db=db_target)
        assert shown.returncode == 0 and "21 °C in Paris." in text(shown.stdout), text(shown.stderr)
        # resume and fork refuse it while it runs at its source, like any imported run
        refused = dayflow("resume", run["id"], db=db_target)
        assert refused.returncode == 4 and "read-only" in text(refused.stderr), text(refused.stderr)
    ended = wait_for("the agent's end", lambda: otel_runs(db_target)[run["id"]]["status"] == "done"
                     and otel_runs(db_target)[run["id"]])
    context = agent.get_span_context()
    assert ended["agent"] == "Weather agent" and ended["steps"] == 2
    assert (ended["input_tokens"], ended["output_tokens"]) == (280, 28)
    assert ended["session"]["id"] == f"{context.trace_id:032x}/{context.span_id:016x}"
    assert [s["input_tokens"] for s in steps_of(db_target, run["id"])] == [120, 160]
    provider.shutdown()
    assert receiver.stop() == 0 and "Traceback" not in receiver.said()


def test_an_agent_called_as_a_tool_is_a_child_run(db_target, collect):
    receiver = collect(db_target)
    provider, tracer = batch_sender(receiver.url)
    with agent_span(tracer, "Planner"):
        with chat_span(tracer, reply=None, tokens=100, reason="tool_calls", call=("call_9", "ask_hotels")):
            pass
        with tool_span(tracer, "call_9", "ask_hotels", "Hotel Lutetia"):
            with agent_span(tracer, "Hotels"):
                with chat_span(tracer, reply="Hotel Lutetia", tokens=40, reason="stop"):
                    pass
        with chat_span(tracer, reply="Stay at the Lutetia.", tokens=200, reason="stop"):
            pass
    provider.force_flush()
    found = wait_for("both runs ended", lambda: (lambda runs: len(runs) == 2 and all(
        r["status"] == "done" for r in runs.values()) and runs)(otel_runs(db_target)))
    parent = next(r for r in found.values() if r["agent"] == "Planner")
    child = next(r for r in found.values() if r["agent"] == "Hotels")
    assert (child["parent_id"], child["parent_call_id"]) == (parent["id"], "call_9")
    assert parent["parent_id"] is None and (parent["steps"], child["steps"]) == (2, 1)
    assert steps_of(db_target, parent["id"])[0]["tool_results"][0]["content"] == "Hotel Lutetia"
    listed = text(dayflow("runs", db=db_target).stdout).splitlines()
    at = next(i for i, line in enumerate(listed) if line.startswith(parent["id"]))
    assert listed[at + 1].startswith(f"└─ {child['id']}") and "subagent" in listed[at + 1], listed
    provider.shutdown()
    assert receiver.stop() == 0


def test_concurrent_senders_on_the_same_traces_make_each_run_and_step_once(db_target, collect):
    """Twelve real HTTP clients (the SDK's exporter, each its own connection) send the same three traces at once,
    span by span, all at the same moment (a barrier before each request): three runs, each step once."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    receiver = collect(db_target)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test-concurrent")
    for n in range(3):
        with agent_span(tracer, f"agent {n}"):
            with chat_span(tracer, reply=None, tokens=100, reason="tool_calls", call=(f"call_{n}", "lookup")):
                pass
            with tool_span(tracer, f"call_{n}", "lookup", "ok"):
                pass
            with chat_span(tracer, reply="done", tokens=200, reason="stop"):
                pass
    spans = memory.get_finished_spans()  # in the order they ended, as an SDK sends them
    senders = 12
    plans = []  # each sender cuts the same sequence into its own batches
    for seed in range(senders):
        rng, cuts, at = random.Random(seed), [], 0
        while at < len(spans):
            size = rng.choice((1, 1, 2, 3))
            cuts.append(spans[at:at + size])
            at += size
        plans.append(cuts)
    turns = max(len(cuts) for cuts in plans)
    barrier = threading.Barrier(senders)
    failures = []

    def send(cuts) -> None:
        exporter = OTLPSpanExporter(endpoint=receiver.url, timeout=60)
        try:
            for turn in range(turns):
                barrier.wait(timeout=120)  # every sender's next request leaves at the same moment
                if turn < len(cuts):
                    result = exporter.export(cuts[turn])
                    if result.name != "SUCCESS":
                        failures.append(result.name)
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            failures.append(repr(exc))
        finally:
            exporter.shutdown()

    threads = [threading.Thread(target=send, args=(cuts,)) for cuts in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert failures == []
    runs = otel_runs(db_target)
    assert len(runs) == 3, runs
    for run in runs.values():
        assert (run["status"], run["steps"], run["input_tokens"]) == ("done", 2, 300), run
        steps = steps_of(db_target, run["id"])
        assert [s["n"] for s in steps] == [1, 2] and [s["input_tokens"] for s in steps] == [100, 200]
    said = receiver.said()
    assert "Traceback" not in said and " 500" not in said and " 503" not in said
    assert receiver.stop() == 0


def test_past_the_connection_bound_a_sender_gets_503_not_a_hang(db_path, collect):
    from dayflow_tui.cli.commands.collect import MAX_CONNECTIONS

    receiver = collect(db_path)
    idle = []
    try:
        for _ in range(MAX_CONNECTIONS):  # connections that send nothing: each holds a thread
            idle.append(socket.create_connection(("127.0.0.1", receiver.port), timeout=30))
        # accepted in order: the request below comes after them, when no thread is free
        code, answer = receiver.post(json.dumps({"resourceSpans": []}).encode())
        assert code == 503 and b"busy" in answer, (code, answer)
    finally:
        for sock in idle:
            sock.close()
    assert wait_for("a slot again", lambda: receiver.post(b'{"resourceSpans": []}') == (200, b"{}"))
    assert receiver.proc.poll() is None
    assert receiver.stop() == 0 and "Traceback" not in receiver.said()
