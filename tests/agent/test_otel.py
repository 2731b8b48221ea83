"""OpenTelemetry export: a run arrives at an OTLP/HTTP receiver (decoded with ``opentelemetry-proto``) as one trace
of ``invoke_agent``, ``chat`` and ``execute_tool`` spans in the GenAI conventions, with the same ids every time,
live or after the fact; the OTLP JSON file form parses as the protocol's own message."""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest

from dayflow_tui.agent.replies import stored_raw
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.otel.plan import span_id_of, trace_id_of
from dayflow_tui.config.errors import ModelCallFailed
from dayflow_tui.store import open_store

from ..conftest import CountingClient, dayflow_cmd
from ..otlp_receiver import OtlpReceiver, parse_otlp_json_line, spans_of
from ..reliability_helpers import cli_env
from ..cli.test_startup_imports import imported_modules
from ..travel_helpers import dayflow, new_run, one_error_line, rows

CLIENT, INTERNAL = 3, 1  # OTLP span kinds
ERROR = 2  # OTLP status code


def _ns(iso: str) -> int:
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 10**9 + moment.microsecond * 1000


def _by_name(spans) -> dict[str, list]:
    found: dict[str, list] = {}
    for span in spans:
        found.setdefault(span.name.split()[0], []).append(span)
    return found


def _hex(value: int, size: int) -> str:
    return value.to_bytes(size, "big").hex()


@pytest.fixture
def receiver():
    with OtlpReceiver() as server:
        yield server


def test_a_three_step_run_arrives_as_the_documented_spans(db_target, receiver):
    store = open_store(db_target)
    try:
        run_id = run_brief(store, client=CountingClient()).run_id
    finally:
        store.close()
    result = dayflow("export", run_id, "--otlp", receiver.url, db=db_target)
    assert result.returncode == 0, result.stderr
    assert receiver.paths == ["/v1/traces"]
    spans = receiver.spans
    kinds = _by_name(spans)
    run = next(r for r in rows(db_target, "runs") if r["id"] == run_id)
    steps = [s for s in rows(db_target, "steps") if s["run_id"] == run_id]
    assert len(steps) == 3 and len(kinds["chat"]) == 3 and len(kinds["invoke_agent"]) == 1

    [agent] = kinds["invoke_agent"]
    trace = _hex(trace_id_of(run_id), 16)
    assert {s.trace_id for s in spans} == {trace}  # one trace per run
    assert agent.parent_span_id == "" and agent.name == f"invoke_agent {run['agent']}" and agent.kind == INTERNAL
    assert {s.parent_span_id for s in spans if s is not agent} == {agent.span_id}
    assert (agent.start_ns, agent.end_ns) == (_ns(run["created_at"]), _ns(run["updated_at"]))
    assert {k: agent.attributes[k] for k in ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.system",
                                             "gen_ai.agent.name", "gen_ai.conversation.id")} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "anthropic", "gen_ai.system": "anthropic",
        "gen_ai.agent.name": run["agent"], "gen_ai.conversation.id": run_id}
    assert run["agent"] == "brief"  # the agent's own name, not the program's
    assert agent.attributes["gen_ai.usage.input_tokens"] == run["input_tokens"]
    assert agent.attributes["gen_ai.usage.output_tokens"] == run["output_tokens"]
    assert agent.attributes["dayflow.run.status"] == "done" and agent.events == []
    assert agent.resource["service.name"] == "dayflow"

    for step, chat in zip(steps, sorted(kinds["chat"], key=lambda s: s.attributes["dayflow.step"])):
        assert chat.name == "chat offline" and chat.kind == CLIENT
        assert chat.span_id == _hex(span_id_of(run_id, step["n"], "chat"), 8)
        assert chat.end_ns == _ns(step["created_at"])
        assert chat.end_ns - chat.start_ns == step["duration_ms"] * 1_000_000  # the stored call time
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "offline"
        assert chat.attributes["gen_ai.response.model"] == step["model"]
        assert chat.attributes["gen_ai.response.finish_reasons"] == [step["stop_reason"]]
        assert chat.attributes["gen_ai.usage.input_tokens"] == step["input_tokens"]
        assert chat.attributes["gen_ai.usage.output_tokens"] == step["output_tokens"]
        assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == step["cache_read_input_tokens"]
        assert chat.attributes["gen_ai.usage.cache_creation.input_tokens"] == step["cache_creation_input_tokens"]
        assert chat.attributes["gen_ai.response.id"] == json.loads(stored_raw(step["raw"], step["assistant"]))["id"]
        assert chat.attributes["gen_ai.response.id"].startswith("msg_")
        assert chat.attributes["gen_ai.request.max_tokens"] == step["max_tokens"] == 4096  # what the call asked
        assert not any(k in chat.attributes for k in ("gen_ai.input.messages", "gen_ai.output.messages"))
    assert any(s.attributes["gen_ai.usage.cache_read.input_tokens"] > 0 for s in kinds["chat"])

    calls = [(s["n"], b["name"], b["id"]) for s in steps for b in json.loads(s["assistant"]) if b["type"] == "tool_use"]
    tools = kinds["execute_tool"]
    assert sorted((t.attributes["dayflow.step"], t.attributes["gen_ai.tool.name"], t.attributes["gen_ai.tool.call.id"])
                  for t in tools) == sorted(calls)
    for tool in tools:
        assert tool.name == f"execute_tool {tool.attributes['gen_ai.tool.name']}"
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["dayflow.tool.outcome"] == "ok" and tool.status_code != ERROR
        assert "gen_ai.tool.call.arguments" not in tool.attributes
        step = steps[tool.attributes["dayflow.step"] - 1]
        assert (tool.start_ns, tool.end_ns) == (_ns(step["created_at"]), _ns(step["tools_done_at"]))


def test_exporting_twice_and_to_a_file_gives_the_same_ids(store, receiver, tmp_path, db_target):
    run_id = run_brief(store, client=CountingClient()).run_id
    # The SDK's own header setting reaches the receiver (a hosted backend's API key goes there).
    env = cli_env(OTEL_EXPORTER_OTLP_TRACES_HEADERS="x-backend-team=team-key-123")
    for _ in range(2):
        assert dayflow("export", run_id, "--otlp", receiver.url, db=db_target, env=env).returncode == 0
    assert [h.get("x-backend-team") for h in receiver.headers] == ["team-key-123"] * 2
    first, second = (spans_of(r) for r in receiver.requests)
    assert [s.key for s in first] == [s.key for s in second] and len(first) > 4
    assert [s.attributes for s in first] == [s.attributes for s in second]

    out = tmp_path / "trace.jsonl"
    other = run_brief(store, client=CountingClient()).run_id
    result = dayflow("export", run_id, other, "--otlp-file", str(out), db=db_target)
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 2  # one OTLP request per run per line
    raw = json.loads(lines[0])
    span = raw["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16  # OTLP JSON: hex ids
    assert isinstance(span["kind"], int)  # OTLP JSON: enums as integers
    from_file = spans_of(parse_otlp_json_line(lines[0]))
    assert [(s.key, s.parent_span_id, s.name, s.attributes) for s in from_file] == \
        [(s.key, s.parent_span_id, s.name, s.attributes) for s in first]
    assert {s.trace_id for s in spans_of(parse_otlp_json_line(lines[1]))} == {_hex(trace_id_of(other), 16)}


def test_content_only_when_asked(store, receiver, db_target):
    run_id = run_brief(store, client=CountingClient()).run_id
    assert dayflow("export", run_id, "--otlp", receiver.url, "--content", db=db_target).returncode == 0
    kinds = _by_name(receiver.spans)
    chats = sorted(kinds["chat"], key=lambda s: s.attributes["dayflow.step"])
    sent = [json.loads(c.attributes["gen_ai.input.messages"]) for c in chats]
    assert sent[0] == [{"role": "user", "parts": [{"type": "text", "content": store.get_run(run_id).user_msg}]}]
    assert [m["role"] for m in sent[2]] == ["user", "assistant", "user", "assistant", "user"]
    responses = [p for p in sent[1][2]["parts"] if p["type"] == "tool_call_response"]
    assert responses and all(p["id"].startswith("toolu_") for p in responses)
    output = json.loads(chats[2].attributes["gen_ai.output.messages"])
    assert output[0]["role"] == "assistant" and output[0]["finish_reason"] == "end_turn"
    assert "## Today" in output[0]["parts"][0]["content"]
    assert json.loads(chats[0].attributes["gen_ai.system_instructions"])[0]["type"] == "text"
    task = next(t for t in kinds["execute_tool"] if t.attributes["gen_ai.tool.name"] == "create_task")
    assert json.loads(task.attributes["gen_ai.tool.call.arguments"])["idempotency_key"].startswith("mail-")
    assert json.loads(task.attributes["gen_ai.tool.call.result"])["task"]["id"] > 0


def test_a_resumed_run_is_one_trace_with_an_event_where_the_resume_began(store, receiver, db_target):
    with new_run(store) as made, pytest.raises(ModelCallFailed):
        run_brief(store, client=CountingClient(fail_on={3: RuntimeError("overloaded")}))
    run_id = made[0]
    assert resume(run_id, store=store, client=CountingClient()).status == "done"
    assert dayflow("export", run_id, "--otlp", receiver.url, db=db_target).returncode == 0
    spans = receiver.spans
    [agent] = _by_name(spans)["invoke_agent"]
    assert {s.trace_id for s in spans} == {_hex(trace_id_of(run_id), 16)}
    assert len(_by_name(spans)["chat"]) == 3
    [(name, at, attributes)] = agent.events
    [resumed] = rows(db_target, "run_resumes")
    assert name == "dayflow.run.resumed" and at == _ns(resumed["at"])
    assert attributes["dayflow.resume.after_step"] == 2 and attributes["dayflow.resume.previous_status"] == "failed"
    assert attributes["process.pid"] == os.getpid()
    assert agent.attributes["dayflow.run.resumes"] == 1


def test_a_tool_error_is_an_error_span_with_its_code(store, receiver, db_target):
    from anthropic.types import Message

    class UnknownToolFirst(CountingClient):
        def create(self, **request):
            if self.calls == 0:
                self.calls += 1
                return Message.model_validate({
                    "id": "msg_x", "type": "message", "role": "assistant", "model": "offline",
                    "content": [{"type": "tool_use", "id": "toolu_rockets", "name": "launch_rockets", "input": {}}],
                    "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 5}})
            return super().create(**request)

    run_id = run_brief(store, client=UnknownToolFirst()).run_id
    assert dayflow("export", run_id, "--otlp", receiver.url, db=db_target).returncode == 0
    [rockets] = [s for s in receiver.spans if s.name == "execute_tool launch_rockets"]
    assert rockets.status_code == ERROR and rockets.attributes["error.type"] == "unknown_tool"
    assert rockets.attributes["gen_ai.tool.call.id"] == "toolu_rockets"


def test_live_export_sends_the_spans_an_export_sends(db_path, receiver, tmp_path):
    env = cli_env(DAYFLOW_OTEL_ENDPOINT=receiver.url)
    crashed = dayflow("brief", "--crash-after", "2", db=str(db_path), env=env)
    assert crashed.returncode != 0
    [run] = rows(str(db_path), "runs")
    live_first = receiver.spans
    assert len(_by_name(live_first)["chat"]) == 2 and len(_by_name(live_first)["invoke_agent"]) == 1
    resumed = dayflow("resume", run["id"], db=str(db_path), env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "warning" not in resumed.stderr
    live = receiver.spans
    receiver.clear()
    assert dayflow("export", run["id"], "--otlp", receiver.url, db=str(db_path)).returncode == 0
    exported = {s.key: s for s in receiver.spans}
    # Every span sent live is the exported one, same id; the agent span was sent again at the resume's end.
    assert {s.key for s in live} == set(exported)
    agents = [s for s in live if s.name.startswith("invoke_agent")]
    assert len(agents) == 2 and agents[0].key == agents[1].key
    assert agents[0].events == [] and [e[0] for e in agents[1].events] == ["dayflow.run.resumed"]
    final = agents[-1]
    assert (final.attributes, final.events, final.end_ns) == (exported[final.key].attributes,
                                                              exported[final.key].events,
                                                              exported[final.key].end_ns)
    for span in live:
        if span is not final and span not in agents:
            assert (span.attributes, span.start_ns, span.end_ns) == (exported[span.key].attributes,
                                                                     exported[span.key].start_ns,
                                                                     exported[span.key].end_ns), span.name


def test_a_receiver_that_fails_costs_spans_never_the_run(db_path):
    with OtlpReceiver(status=500) as broken:
        env = cli_env(DAYFLOW_OTEL_ENDPOINT=broken.url)
        result = dayflow("brief", db=str(db_path), env=env, timeout=180)
        assert result.returncode == 0 and "## Today" in result.stdout
        [warning] = [line for line in result.stderr.splitlines() if "warning" in line]
        assert "not fully sent" in warning and "dayflow export" in warning
        [run] = rows(str(db_path), "runs")
        assert run["status"] == "done"
        refused = dayflow("export", run["id"], "--otlp", broken.url, db=str(db_path), timeout=180)
        assert refused.returncode == 1 and broken.url in one_error_line(refused)
    nobody = dayflow("export", run["id"], "--otlp", broken.url, db=str(db_path), timeout=180)
    assert nobody.returncode == 1 and "did not take the spans" in one_error_line(nobody)


NO_OTEL_SDK = """
import sys


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[:2] in (["opentelemetry", "sdk"], ["opentelemetry", "exporter"]):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
"""


def test_bad_urls_and_a_missing_sdk_are_one_line_before_anything_happens(db_path, tmp_path):
    assert dayflow("brief", db=str(db_path)).returncode == 0
    [run] = rows(str(db_path), "runs")
    for url in ("ftp://example.org", "localhost:4318", "http://"):
        result = dayflow("export", run["id"], "--otlp", url, db=str(db_path))
        assert result.returncode == 64 and "not an OTLP/HTTP URL" in one_error_line(result)
    bad_setting = dayflow("brief", db=str(db_path), env=cli_env(DAYFLOW_OTEL_ENDPOINT="localhost:4318"))
    assert bad_setting.returncode == 64 and "DAYFLOW_OTEL_ENDPOINT" in one_error_line(bad_setting)

    # An interpreter without the otel extra: the SDK and the exporter missing (the API stays: anthropic needs it).
    shadow = tmp_path / "no_otel"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text(NO_OTEL_SDK)
    env = cli_env(PYTHONPATH=str(shadow))
    out = tmp_path / "trace.jsonl"
    missing = dayflow("export", run["id"], "--otlp-file", str(out), db=str(db_path), env=env)
    assert missing.returncode == 64 and "pip install 'dayflow-tui[otel]'" in one_error_line(missing)
    assert not out.exists()
    live = dayflow("brief", db=str(db_path), env={**env, "DAYFLOW_OTEL_ENDPOINT": "http://127.0.0.1:9"})
    assert live.returncode == 64 and "otel_endpoint" in one_error_line(live)
    assert len(rows(str(db_path), "runs")) == 1  # refused before a run was recorded
    # Without the setting, the SDK is never needed.
    assert dayflow("brief", db=str(db_path), env=env).returncode == 0


def test_commands_that_send_no_trace_never_import_the_opentelemetry_sdk(db_path):
    assert dayflow("brief", db=str(db_path)).returncode == 0
    for argv in (("runs",), ("brief",), ("tasks",)):
        names = imported_modules(dayflow_cmd(*argv, "--db", str(db_path)))
        # (anthropic itself imports the OpenTelemetry API, so `brief` shows that; never the SDK or an exporter.)
        assert not {n for n in names if n.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))}, argv
        if argv != ("brief",):
            assert not {n for n in names if n.startswith("opentelemetry")}, argv
