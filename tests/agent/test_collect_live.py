"""``otel.collect.Collector`` in process: runs that grow as their spans arrive, in any order, in any batches.

One trace in the GenAI conventions' shape, with content captured (as the OpenAI Agents SDK and Pydantic AI send
it when asked to): an outer agent whose first chat calls a tool, whose second chat calls a helper agent as a tool
(``execute_tool`` -> ``invoke_agent``: agents-as-tools, a child run), whose third chat answers; the helper's one
chat answers and its span ends in ERROR. Whatever the order and the batching of its spans, the database ends the
same: the same two runs (the helper a child of the outer run under the tool call), the same steps, tokens and
statuses; and a step, once stored, is never changed by what comes after.

What no order can show (a chat that comes after a later chat of its agent was stored; a tool span that never
comes) has its rule tested here too.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from dayflow_tui.otel.collect import Collector
from dayflow_tui.otel.receive import Span
from dayflow_tui.store import open_store

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
T0 = 1_760_000_000_000_000_000


def _ids(name: str) -> str:
    return {"outer": "a1", "c1": "b1", "t1": "b2", "c2": "b3", "t2": "b4", "helper": "c1", "h1": "c2",
            "c3": "b5"}[name] * 8


def _msgs(*messages) -> str:
    return json.dumps(list(messages))


USER = {"role": "user", "parts": [{"type": "text", "content": "Plan a trip to Paris"}]}


def call(call_id, name, **arguments):
    return {"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": name,
                                            "arguments": arguments}]}


def said(text):
    return {"role": "assistant", "parts": [{"type": "text", "content": text}]}


def result(call_id, text):
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": text}]}


def span(name, parent, label, start_s, end_s, status=0, **attributes):
    return Span(TRACE, _ids(name), parent and _ids(parent), label, T0 + int(start_s * 1e9), T0 + int(end_s * 1e9),
                dict(attributes), status_code=status, status_message="helper gave up" if status == 2 else "")


def chat(name, parent, start_s, inputs, output, tokens, reason):
    return span(name, parent, "chat gpt-4o", start_s, start_s + 1, **{
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": tokens,
        "gen_ai.usage.output_tokens": tokens // 10, "gen_ai.response.finish_reasons": [reason],
        "gen_ai.input.messages": _msgs(*inputs), "gen_ai.output.messages": _msgs(output)})


def tool(name, parent, start_s, end_s, call_id, tool_name, text):
    return span(name, parent, f"execute_tool {tool_name}", start_s, end_s, **{
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool_name, "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.result": text})


def the_trace() -> list[Span]:
    """The trace's spans in the order an SDK ends (and so sends) them."""
    c1_out, c2_out = call("call_1", "weather", city="Paris"), call("call_2", "ask_helper", q="hotels")
    return [
        chat("c1", "outer", 1, [USER], c1_out, 100, "tool_calls"),
        tool("t1", "outer", 3, 4, "call_1", "weather", "21 C"),
        chat("h1", "helper", 9, [{"role": "user", "parts": [{"type": "text", "content": "hotels"}]}],
             said("no hotels found"), 40, "stop"),
        span("helper", "t2", "invoke_agent helper", 8, 19, status=2,
             **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}),
        tool("t2", "outer", 7, 20, "call_2", "ask_helper", "no hotels found"),
        chat("c2", "outer", 5, [USER, c1_out, result("call_1", "21 C")], c2_out, 200, "tool_calls"),
        chat("c3", "outer", 21, [USER, c1_out, result("call_1", "21 C"), c2_out, result("call_2", "none")],
             said("Go in spring."), 300, "stop"),
        span("outer", None, "invoke_agent planner", 0, 30, **{
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner", "gen_ai.request.model": "gpt-4o",
            "gen_ai.output.messages": _msgs(said("Go in spring."))}),
    ]


def snapshot(store) -> dict:
    """Everything the user sees of the trace's runs: rows and steps."""
    found = {}
    for run in store.list_runs(source="otel", limit=100):
        found[run.id] = (
            (run.agent, run.status, run.error, run.parent_id, run.parent_call_id, run.model, run.user_msg,
             store.get_run(run.id).final_text, run.created_at, run.step_count, run.input_tokens, run.output_tokens),
            [(s.n, s.assistant, s.tool_results, s.stop_reason, s.input_tokens, s.output_tokens, s.raw, s.created_at)
             for s in store.steps(run.id)])
    return found


def feed(batches: list[list[Span]], *, check_append_only: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "c.db"))
        try:
            collector = Collector(store, hold_s=3600, clock=lambda: 0.0)  # no chat ever waits settle_s here
            before: dict = {}
            for batch in batches:
                collector.take(batch)
                if check_append_only:  # a stored step never changes; a run never loses one
                    now = snapshot(store)
                    for run_id, (_row, steps) in before.items():
                        assert now[run_id][1][:len(steps)] == steps, run_id
                    before = now
            return snapshot(store)
        finally:
            store.close()


IN_ORDER = None


def in_order() -> dict:
    global IN_ORDER
    if IN_ORDER is None:
        IN_ORDER = feed([[s] for s in the_trace()])
    return IN_ORDER


def test_the_trace_in_the_order_an_sdk_sends_it_makes_a_parent_and_a_failed_child():
    runs = in_order()
    assert len(runs) == 2
    (outer_id, (outer, outer_steps)), = [(k, v) for k, v in runs.items() if v[0][0] == "planner"]
    (helper, helper_steps), = [v for v in runs.values() if v[0][0] == "helper"]
    assert outer[1:5] == ("done", None, None, None)
    assert helper[1:5] == ("failed", "helper gave up", outer_id, "call_2")
    assert [s[4] for s in outer_steps] == [100, 200, 300] and outer[9:12] == (3, 600, 60)
    assert [json.loads(s[2]) for s in outer_steps[:2]] == [
        [{"type": "tool_result", "tool_use_id": "call_1", "content": "21 C"}],
        [{"type": "tool_result", "tool_use_id": "call_2", "content": "no hotels found"}]]
    assert outer_steps[2][2] is None and outer[7] == "Go in spring."
    assert [s[4] for s in helper_steps] == [40]


def test_each_step_is_stored_as_soon_as_nothing_it_needs_can_still_come():
    spans = the_trace()
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "c.db"))
        try:
            collector = Collector(store, hold_s=3600, clock=lambda: 0.0)
            collector.take([spans[0]])  # chat 1 names call_1: the run is there, running, its step waits for the tool
            (run,) = store.list_runs(source="otel")
            assert (run.status, run.step_count, run.agent) == ("running", 0, "otel")
            collector.take([spans[1]])  # the tool came: step 1, with its result
            assert store.get_run(run.id).step_count == 1
            collector.take([spans[2]])  # the helper's chat: a second run, running, its one step stored (no tool)
            helper = next(r for r in store.list_runs(source="otel") if r.id != run.id)
            assert (helper.status, helper.step_count, helper.parent_id) == ("running", 1, None)
            collector.take([spans[3]])  # the helper's span: failed; its parent not known yet (the tool span is not in)
            assert (store.get_run(helper.id).status, store.get_run(helper.id).parent_id) == ("failed", None)
            collector.take([spans[4]])  # the tool above it: now a child of the outer run, under call_2
            assert (store.get_run(helper.id).parent_id, store.get_run(helper.id).parent_call_id) == (run.id, "call_2")
            collector.take([spans[5], spans[6]])
            assert store.get_run(run.id).step_count == 3 and store.get_run(run.id).status == "running"
            collector.take([spans[7]])
            assert store.get_run(run.id).status == "done"
        finally:
            store.close()


def chats_in_order(spans: list[Span]) -> list[Span]:
    """``spans`` with each agent's chat spans put back in their start order (the places they hold kept).

    An agent's chats run one after another, and an SDK sends a span when it ends: they arrive in that order
    (a chat that does not is stored at the end: ``test_a_chat_older_than_a_stored_step_is_appended_at_the_end``).
    """
    out = list(spans)
    for agent in ("outer", "helper"):
        places = [i for i, s in enumerate(out) if s.parent_id == _ids(agent) and s.name.startswith("chat")]
        for place, chat in zip(places, sorted((out[i] for i in places), key=lambda s: s.start_ns)):
            out[place] = chat
    return out


@st.composite
def arrivals(draw):
    """The trace's spans in any order (each agent's chats in theirs; tools before their chats, agent spans first,
    last, anywhere), cut into any batches, some sent twice (a retried request)."""
    spans = chats_in_order(draw(st.permutations(the_trace())))
    cuts = sorted(draw(st.sets(st.integers(1, len(spans) - 1), max_size=len(spans) - 1)))
    batches = [spans[a:b] for a, b in zip([0, *cuts], [*cuts, len(spans)])]
    for index in sorted(draw(st.sets(st.integers(0, len(batches) - 1), max_size=3)), reverse=True):
        batches.insert(index + 1, list(batches[index]))
    return batches


@hsettings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrivals())
def test_any_order_and_batching_of_the_spans_stores_the_same_runs(batches):
    assert feed(batches, check_append_only=True) == in_order()


def test_a_chat_older_than_a_stored_step_is_appended_at_the_end():
    """The rule for a late chat: stored steps are never rewritten, so it goes after them (and is counted late)."""
    spans = {s.span_id: s for s in the_trace()}
    c1, t1, c2, t2, c3 = (spans[_ids(n)] for n in ("c1", "t1", "c2", "t2", "c3"))
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "c.db"))
        try:
            collector = Collector(store, hold_s=3600, clock=lambda: 0.0)
            collector.take([c1, t1])
            assert collector.take([c3]).late == 0  # chat 3 (no tool) stored as step 2: chat 2 has not come
            taken = collector.take([c2, t2])
            assert (taken.steps, taken.late) == (1, 1)
            (run,) = store.list_runs(source="otel")
            assert [s.input_tokens for s in store.steps(run.id)] == [100, 300, 200]  # arrival order, not start order
            assert collector.take([c2, t2, c3]).steps == 0  # and idempotent
        finally:
            store.close()


def test_a_chat_whose_tool_never_comes_is_stored_after_settle_s_and_all_at_stop():
    spans = {s.span_id: s for s in the_trace()}
    c1, c2 = spans[_ids("c1")], spans[_ids("c2")]
    now = [0.0]
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "c.db"))
        try:
            collector = Collector(store, hold_s=3600, settle_s=30, clock=lambda: now[0])
            collector.take([c1])  # names call_1, whose tool span never comes (a handoff sends none)
            (run,) = store.list_runs(source="otel")
            now[0] = 29.0
            assert collector.sweep().steps == 0 and store.get_run(run.id).step_count == 0
            now[0] = 30.0
            assert collector.sweep().steps == 1
            step = store.steps(run.id)[0]
            assert step.tool_results is None and '"call_1"' in step.assistant  # the call, without a result
            collector.take([c2])  # waits for call_2
            assert store.get_run(run.id).step_count == 1
            assert collector.sweep(force=True).steps == 1  # the receiver stops: stored as it stands
            assert store.get_run(run.id).status == "running"  # the agent span never came: still running at source
        finally:
            store.close()


def test_a_finished_trace_is_let_go_once_quiet_and_sending_it_again_writes_nothing():
    now = [0.0]
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "c.db"))
        try:
            collector = Collector(store, hold_s=3600, settle_s=30, clock=lambda: now[0])
            for span in the_trace():
                collector.take([span])
            assert TRACE in collector.traces and collector.traces[TRACE].finished
            now[0] = 29.0
            collector.sweep()
            assert TRACE in collector.traces  # a straggler may still come with the rest in memory
            now[0] = 30.0
            collector.sweep()
            assert TRACE not in collector.traces  # every run ended and placed, quiet: memory let go
            assert collector.take(the_trace()).steps == 0  # the whole trace again (a retry): nothing changes
            assert snapshot(store) == in_order()
        finally:
            store.close()


def test_a_chat_under_a_span_that_is_not_an_agent_is_a_run_ended_by_that_span():
    """The documented guess and its outcome: a chat whose parent has not come is taken to be under its agent; when
    the parent comes and is a framework's step span instead, that span ends the run (named by nothing), and the
    agent above it, when it comes, is its parent run."""
    agent = span("outer", None, "invoke_agent graph", 0, 30, **{"gen_ai.operation.name": "invoke_agent",
                                                                 "gen_ai.agent.name": "graph"})
    node = span("c1", "outer", "call_model", 1, 5)  # a LangGraph-like node span: no gen_ai operation
    inner = chat("h1", "helper", 2, [USER], said("hi"), 10, "stop")
    inner = Span(inner.trace_id, inner.span_id, node.span_id, inner.name, inner.start_ns, inner.end_ns,
                 inner.attributes)
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "c.db"))
        try:
            collector = Collector(store, hold_s=3600, clock=lambda: 0.0)
            collector.take([inner])
            (run,) = store.list_runs(source="otel")
            assert (run.status, run.step_count, run.parent_id) == ("running", 1, None)
            collector.take([node])
            run = store.get_run(run.id)
            assert (run.status, run.agent, run.step_count, run.parent_id) == ("done", "otel", 1, None)
            collector.take([agent])
            graph = next(r for r in store.list_runs(source="otel") if r.id != run.id)
            assert (graph.agent, graph.status, graph.step_count) == ("graph", "done", 0)
            assert store.get_run(run.id).parent_id == graph.id
        finally:
            store.close()


def test_two_receivers_on_one_database_write_each_step_once():
    """Two ``dayflow collect`` processes on one database sent the same spans (a sender that fans out, or a retry
    that went to the other): whichever writes first wins each write, the other's position is stale and writes
    nothing, then reads it again."""
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "c.db"))
        try:
            first, second = (Collector(store, hold_s=3600, clock=lambda: 0.0) for _ in range(2))
            for index, span in enumerate(the_trace()):
                pair = (first, second) if index % 2 else (second, first)
                for collector in pair:
                    collector.take([span])
            assert snapshot(store) == in_order()
        finally:
            store.close()
