"""``dayflow collect``: the real console script as an OTLP/HTTP receiver, sent to by the OpenTelemetry SDK.

The spans are shaped like the GenAI spans the OpenAI Agents SDK and Pydantic AI emit. Span names and attribute
names come from the OpenTelemetry GenAI semantic conventions: "Semantic conventions for generative client AI
spans" (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/: ``chat {model}``,
``gen_ai.usage.input_tokens``/``output_tokens``, ``gen_ai.usage.cache_read.input_tokens``/
``cache_creation.input_tokens``, ``gen_ai.response.finish_reasons``, ``gen_ai.response.id``,
``gen_ai.input.messages``/``gen_ai.output.messages``, ``execute_tool {name}``, ``gen_ai.tool.call.id``,
``gen_ai.tool.call.arguments``/``result``) and "Semantic conventions for GenAI agent spans"
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-agent-spans/: ``invoke_agent {name}``,
``gen_ai.agent.name``); the same names are in model/gen-ai/spans.yaml of open-telemetry/semantic-conventions-genai.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess

from ..conftest import dayflow_cmd
from ..reliability_helpers import cli_env, dayflow, text

RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")
EVIL = "\x1b[31mRED\x1b[0m\x1b]0;pwned\x07[bold]markup[/bold]\x9b2J\r\x00"


def runs_json(db, *extra):
    result = dayflow("runs", "--json", *extra, db=db)
    assert result.returncode == 0, text(result.stderr)
    return json.loads(result.stdout)


def steps_of(db, run_id):
    result = dayflow("show", run_id, "--jsonl", db=db)
    assert result.returncode == 0, text(result.stderr)
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


# -- a sender like the OpenAI Agents SDK or Pydantic AI, through the OpenTelemetry SDK ----------------------------


def sdk_sender(url):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "weather-app"}))
    # One request per span, as each ends: the chats and tools arrive before their agent's span.
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url, timeout=30)))
    return provider, provider.get_tracer("test-genai")


def messages(role, *parts, finish=None):
    message = {"role": role, "parts": list(parts)}
    if finish:
        message["finish_reason"] = finish
    return json.dumps([message])


def send_agent_turn(tracer, *, content=True, agent="Weather agent", text_reply="It is 21 °C and sunny in Paris.",
                    in_events=False):
    """An agent turn: a chat that calls a tool, the tool, a chat that answers (OpenAI Agents SDK's shape: the tool a
    sibling of the chats under the agent span)."""
    from opentelemetry import trace

    with tracer.start_as_current_span(f"invoke_agent {agent}", kind=trace.SpanKind.INTERNAL, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            **({"gen_ai.input.messages": messages("user", {"type": "text", "content": "Weather in Paris?"})}
               if content else {})}) as agent_span:
        with tracer.start_as_current_span("chat gpt-4o", kind=trace.SpanKind.CLIENT, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": "gpt-4o-2024-08-06", "gen_ai.response.id": "chatcmpl-1",
                "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 18,
                "gen_ai.usage.cache_read.input_tokens": 64, "gen_ai.response.finish_reasons": ["tool_calls"],
                **({"gen_ai.input.messages": messages("user", {"type": "text", "content": "Weather in Paris?"}),
                    "gen_ai.output.messages": messages("assistant", {"type": "tool_call", "id": "call_1",
                                                                     "name": "get_weather",
                                                                     "arguments": {"city": "Paris"}},
                                                       finish="tool_call")} if content else {})}):
            pass
        with tracer.start_as_current_span("execute_tool get_weather", kind=trace.SpanKind.INTERNAL, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "call_1", "gen_ai.tool.type": "function",
                **({"gen_ai.tool.call.arguments": '{"city": "Paris"}', "gen_ai.tool.call.result": '{"temp_c": 21}'}
                   if content else {})}):
            pass
        reply = {"gen_ai.output.messages": messages("assistant", {"type": "text", "content": text_reply},
                                                     finish="stop")}
        with tracer.start_as_current_span("chat gpt-4o", kind=trace.SpanKind.CLIENT, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.response.id": "chatcmpl-2",
                "gen_ai.usage.input_tokens": 160, "gen_ai.usage.output_tokens": 12,
                "gen_ai.response.finish_reasons": ["stop"], **(reply if content and not in_events else {})}) as chat:
            if in_events:  # the content on the conventions' event instead of the span's attributes
                chat.add_event("gen_ai.client.inference.operation.details", reply)
    return agent_span.get_span_context()


def test_sdk_spans_become_a_read_only_run_while_collect_runs(db_target, collect):
    receiver = collect(db_target)
    provider, tracer = sdk_sender(receiver.url)
    context = send_agent_turn(tracer)
    send_agent_turn(tracer, content=False, agent="pydantic_ai_agent")
    send_agent_turn(tracer, agent="events agent", text_reply="From an event.", in_events=True)

    # collect is still running: the runs are there already (each request committed before its answer)
    assert receiver.proc.poll() is None
    found = {r["agent"]: r for r in runs_json(db_target, "--source", "otel")}
    assert set(found) == {"Weather agent", "pydantic_ai_agent", "events agent"}, found
    run = found["Weather agent"]
    assert run["source"] == "otel" and run["status"] == "done" and run["steps"] == 2
    assert run["session"]["id"] == f"{context.trace_id:032x}/{context.span_id:016x}"
    assert (run["input_tokens"], run["output_tokens"]) == (280, 30)
    assert runs_json(db_target, "--source", "dayflow") == []

    first, second = steps_of(db_target, run["id"])
    assert first["stop_reason"] == "tool_calls" and first["model"] == "gpt-4o-2024-08-06"
    assert (first["input_tokens"], first["output_tokens"], first["cache_read_input_tokens"]) == (120, 18, 64)
    assert first["assistant"] == [{"type": "tool_use", "id": "call_1", "name": "get_weather",
                                   "input": {"city": "Paris"}}]
    assert first["tool_results"] == [{"type": "tool_result", "tool_use_id": "call_1", "content": '{"temp_c": 21}'}]
    assert first["reply_as_received"]["id"] == "chatcmpl-1"
    assert second["assistant"] == [{"type": "text", "text": "It is 21 °C and sunny in Paris."}]
    assert second["stop_reason"] == "stop" and second["tool_results"] is None

    # no content captured: usage only, and the step says so; the tool named from its span
    plain = steps_of(db_target, found["pydantic_ai_agent"]["id"])
    assert [s["input_tokens"] for s in plain] == [120, 160]
    assert "no content" in plain[0]["assistant"][0]["text"]
    assert plain[0]["assistant"][1]["name"] == "get_weather"

    assert steps_of(db_target, found["events agent"]["id"])[1]["assistant"] == [{"type": "text",
                                                                                 "text": "From an event."}]

    # a retried request (the same spans again) writes nothing
    before = {r["id"]: (r["steps"], r["input_tokens"]) for r in runs_json(db_target)}
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    send_agent_turn(tracer, agent="Again")
    again = OTLPSpanExporter(endpoint=receiver.url, timeout=30)
    again.export(memory.get_finished_spans())
    again.export(memory.get_finished_spans())
    after = {r["id"]: (r["steps"], r["input_tokens"]) for r in runs_json(db_target)}
    assert {k: after[k] for k in before} == before and len(after) == len(before) + 1
    provider.shutdown()

    # read-only, like a Claude Code session: resume and fork refused, one line, nothing written
    for command in (("resume", run["id"]), ("fork", run["id"], "--at", "1"), ("approve", run["id"], "--all"),
                    ("deny", run["id"], "--all", "--reason", "no"), ("cancel", run["id"])):
        refused = dayflow(*command, db=db_target)
        assert refused.returncode == 4, text(refused.stderr)
        assert "OpenTelemetry trace" in text(refused.stderr) and "read-only" in text(refused.stderr)
        assert "Traceback" not in text(refused.stderr) and text(refused.stderr).count("\n") == 1
    assert {r["id"]: (r["steps"], r["input_tokens"]) for r in runs_json(db_target)} == after

    assert receiver.stop() == 0
    assert "stopped" in receiver.said() and "Traceback" not in receiver.said()


def test_round_trip_of_dayflow_export(db_target, collect, tmp_path):
    """A real offline run exported with --otlp --content comes back with the same steps, tokens and text."""
    origin = tmp_path / "origin.db"
    made = dayflow("brief", db=origin)
    assert made.returncode == 0, text(made.stderr)
    (source_run,) = runs_json(origin)
    receiver = collect(db_target)
    for _ in range(2):  # the second export is a retry: nothing more
        sent = dayflow("export", source_run["id"], "--otlp", f"http://127.0.0.1:{receiver.port}", "--content",
                       db=origin)
        assert sent.returncode == 0, text(sent.stderr)
    (back,) = runs_json(db_target, "--source", "otel")
    assert back["agent"] == source_run["agent"] and back["model"] == source_run["model"]
    assert back["title"] == source_run["title"]  # made from the task and the answer
    for key in ("steps", "input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "cost_usd"):
        assert back[key] == source_run[key], key
    original, received = steps_of(origin, source_run["id"]), steps_of(db_target, back["id"])
    assert len(original) == len(received) == source_run["steps"] >= 3
    for mine, theirs in zip(original, received):
        for key in mine:
            if key in ("run_id", "reply_as_received"):
                continue
            assert theirs[key] == mine[key], (mine["n"], key)
        assert theirs["reply_as_received"]["id"] == mine["reply_as_received"]["id"]
    assert receiver.stop(signal.SIGINT) == 0  # Ctrl-C: a clean stop too
    assert "stopped" in receiver.said() and "Traceback" not in receiver.said()

    # the same trace as OTLP/JSON (export --otlp-file's lines, hex ids) into another database: the same run
    written = dayflow("export", source_run["id"], "--otlp-file", str(tmp_path / "trace.jsonl"), "--content", db=origin)
    assert written.returncode == 0, text(written.stderr)
    other = tmp_path / "json.db"
    json_receiver = collect(other)
    for line in (tmp_path / "trace.jsonl").read_bytes().splitlines():
        assert json_receiver.post(line) == (200, b"{}")
    assert steps_of(other, back["id"]) == received
    assert json_receiver.stop() == 0


def test_hostile_requests_are_one_line_and_write_nothing(db_target, collect):
    receiver = collect(db_target, DAYFLOW_COLLECT_MAX_BODY="4096")
    good_ids = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331"}
    cases = [
        (b"\xff\xff\xff\xff garbage", "application/x-protobuf", "/v1/traces", 400),
        (b"{not json", "application/json", "/v1/traces", 400),
        (b"\xff\xfe{}", "application/json", "/v1/traces", 400),
        (b"[1, 2]", "application/json", "/v1/traces", 400),
        (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "b7ad6b7169203331",
                                                                    "name": "invoke_agent x"}]}]}]}).encode(),
         "application/json", "/v1/traces", 400),
        (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{**good_ids, "traceId": "0af7",
                                                                    "name": "invoke_agent x"}]}]}]}).encode(),
         "application/json", "/v1/traces", 400),
        (json.dumps({"resourceSpans": "no"}).encode(), "application/json", "/v1/traces", 400),
        (b"x" * 5000, "application/json", "/v1/traces", 413),
        (b"{}", "text/plain", "/v1/traces", 415),
        (b"{}", "application/json", "/v1/logs", 404),
        (b"{}", "application/json", "/../../etc/passwd", 404),
    ]
    for body, kind, path, status in cases:
        code, answer = receiver.post(body, kind, path)
        assert code == status, (body[:40], code, answer)
        assert answer.decode().count("\n") == 1 and not RAW_CONTROL.search(answer.rstrip(b"\n")), answer
    assert receiver.post(b"", path="/v1/traces", method="GET")[0] == 405
    import gzip

    bomb = gzip.compress(b"{" + b" " * 100_000 + b"}")  # under the limit sent, far over it inflated
    assert len(bomb) < 4096
    assert receiver.post(bomb, **{"Content-Encoding": "gzip"})[0] == 413
    assert receiver.post(b"not gzip", **{"Content-Encoding": "gzip"})[0] == 400
    assert receiver.post(b"{}", **{"Content-Encoding": "br"})[0] == 415
    assert receiver.post(gzip.compress(b'{"resourceSpans": []}'), **{"Content-Encoding": "gzip"}) == (200, b"{}")
    assert receiver.proc.poll() is None  # still serving
    assert runs_json(db_target) == []

    # escapes in every field: the run is kept, shown inert everywhere
    evil_attr = [{"key": k, "value": {"stringValue": v}} for k, v in (
        ("gen_ai.operation.name", "invoke_agent"), ("gen_ai.agent.name", EVIL), ("gen_ai.request.model", EVIL),
        ("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": EVIL}]}])))]
    chat_attr = [{"key": k, "value": v} for k, v in (
        ("gen_ai.operation.name", {"stringValue": "chat"}), ("gen_ai.response.model", {"stringValue": EVIL}),
        ("gen_ai.usage.input_tokens", {"intValue": "7"}), ("gen_ai.usage.output_tokens", {"intValue": 3}),
        ("gen_ai.response.finish_reasons", {"arrayValue": {"values": [{"stringValue": EVIL}]}}),
        ("gen_ai.output.messages", {"stringValue": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": EVIL}, {"type": "tool_call", "id": EVIL, "name": EVIL,
                                                 "arguments": {EVIL: EVIL}}]}])}))]
    tool_attr = [{"key": k, "value": {"stringValue": v}} for k, v in (
        ("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", EVIL), ("gen_ai.tool.call.id", EVIL),
        ("gen_ai.tool.call.result", EVIL))]
    trace_id = "5b8efff798038103d269b633813fc60c"
    spans = [
        {"traceId": trace_id, "spanId": "eee19b7ec3c1b174", "name": f"invoke_agent {EVIL}", "kind": 1,
         "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000005000000000", "attributes": evil_attr},
        {"traceId": trace_id, "spanId": "eee19b7ec3c1b175", "parentSpanId": "eee19b7ec3c1b174", "name": f"chat {EVIL}",
         "kind": "SPAN_KIND_CLIENT", "startTimeUnixNano": "1700000001000000000",
         "endTimeUnixNano": "1700000002000000000", "attributes": chat_attr},
        {"traceId": trace_id, "spanId": "eee19b7ec3c1b176", "parentSpanId": "eee19b7ec3c1b174",
         "name": f"execute_tool {EVIL}", "startTimeUnixNano": "1700000003000000000",
         "endTimeUnixNano": "1700000004000000000", "attributes": tool_attr, "status": {"code": 2, "message": EVIL}},
    ]
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": EVIL}}]}, "scopeSpans": [{"scope": {"name": EVIL},
                                                                                   "spans": spans}]}]}).encode()
    assert len(body) < 4096
    assert receiver.post(body) == (200, b"{}")
    (run,) = runs_json(db_target, "--source", "otel")
    assert run["steps"] == 1 and run["input_tokens"] == 7
    for command in (("runs",), ("runs", "--json"), ("show", run["id"], "--no-pager"), ("show", run["id"], "--raw"),
                    ("show", run["id"], "--jsonl"), ("search", "RED")):
        shown = dayflow(*command, db=db_target, env=cli_env(COLUMNS="300"))
        assert shown.returncode == 0, (command, text(shown.stderr))
        assert not RAW_CONTROL.search(shown.stdout), (command, RAW_CONTROL.search(shown.stdout))
        assert "Traceback" not in text(shown.stderr)
    assert receiver.stop() == 0
    said = receiver.log.read_bytes()
    assert b"Traceback" not in said and not RAW_CONTROL.search(said.replace(b"\n", b""))
    assert said.count(b" 400: ") == 8 and said.count(b" 413: ") == 2


def test_collect_refuses_before_opening_anything(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = dayflow("collect", "--otlp-http", f"127.0.0.1:{port}", db=tmp_path / "c.db")
    assert busy.returncode == 64 and "cannot listen on 127.0.0.1" in text(busy.stderr), text(busy.stderr)
    assert text(busy.stderr).count("\n") == 1 and not (tmp_path / "c.db").exists()
    bad = dayflow("collect", "--otlp-http", "127.0.0.1:99999", db=tmp_path / "c.db")
    assert bad.returncode == 64 and "Traceback" not in text(bad.stderr)
    # without opentelemetry-proto: the one line names the extra
    hidden = subprocess.run(
        [dayflow_cmd()[0].replace("/dayflow", "/python"), "-c",
         "import sys; sys.modules['opentelemetry.proto'] = None\n"
         "from dayflow_tui.cli.main import main\n"
         f"sys.exit(main(['collect', '--db', {str(tmp_path / 'c.db')!r}]))"],
        capture_output=True, env=cli_env(), timeout=60)
    assert hidden.returncode == 64, text(hidden.stderr)
    assert "dayflow-tui[collect]" in text(hidden.stderr) and text(hidden.stderr).count("\n") == 1
    assert not (tmp_path / "c.db").exists()


def test_spans_in_any_order_across_requests_make_one_run_in_time_order(store):
    """In process, on both backends: the Collector that ``dayflow collect`` feeds, given spans out of order."""
    from dayflow_tui.otel.collect import Collector
    from dayflow_tui.otel.receive import Span

    trace, t0 = "9" * 32, 1_760_000_000_000_000_000

    def span(span_id, parent, name, start_s, end_s, **attributes):
        return Span(trace, span_id * 16, parent and parent * 16, name, t0 + int(start_s * 1e9), t0 + int(end_s * 1e9),
                    attributes)

    agent = span("a", None, "invoke_agent planner", 0, 10, **{"gen_ai.agent.name": "planner"})
    # Pydantic AI's shape: the tools under a "running tools" span, itself under the agent
    running = span("c", "a", "running tools", 2.5, 4)
    tool = span("d", "c", "execute_tool search", 3, 4, **{"gen_ai.tool.call.id": "t1", "gen_ai.tool.call.result": "ok"})
    chat1 = span("b", "a", "chat m1", 1, 2, **{"gen_ai.usage.input_tokens": 5,
                                               "gen_ai.response.finish_reasons": ["tool_call"]})
    chat2 = span("e", "a", "chat m1", 5, 6, **{"gen_ai.usage.input_tokens": 9})
    chat3 = span("f", "a", "chat m1", 7, 8, **{"gen_ai.usage.input_tokens": 11})
    collector = Collector(store, hold_s=60)
    first = collector.take([tool, chat2])  # no agent span yet: the run is there, running, its step not yet
    assert (first.new_runs, first.steps) == (1, 0)  # chat2 (usage only) may still be followed by its tools
    (run,) = store.list_runs(source="otel")
    assert (run.status, run.step_count, run.agent) == ("running", 0, "otel")
    taken = collector.take([running, chat1, agent])
    assert taken.new_runs == 0 and taken.steps == 2 and collector.held() == 0
    (run,) = store.list_runs(source="otel")
    assert (run.status, run.agent) == ("done", "planner")
    steps = store.steps(run.id)
    assert [s.input_tokens for s in steps] == [5, 9]  # time order, not arrival order
    assert json.loads(steps[0].tool_results) == [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
    assert steps[1].tool_results is None
    assert collector.take([tool, chat2, chat1, agent]).steps == 0  # a retry: nothing
    fresh = Collector(store, hold_s=60)  # a restarted receiver sent the same spans: nothing either
    assert fresh.take([running, tool, chat1, chat2, agent]).steps == 0
    assert collector.take([chat3]).steps == 1  # a late chat span of a written agent: appended
    assert [s.input_tokens for s in store.steps(run.id)] == [5, 9, 11]
    assert store.get_run(run.id).input_tokens == 25
