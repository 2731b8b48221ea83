"""The loop: commit, then call; one-call resume; budgets; API failures; leases."""

from __future__ import annotations

import json

import subprocess
import sys

import pytest

from dayflow_tui.agent.messages import rebuild_messages
from dayflow_tui import clock
from dayflow_tui.agent import request as agent_request
from dayflow_tui.config.errors import ModelCallFailed, RunBusy
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.agent.request import wire_blocks
from dayflow_tui.store.models import Run
from dayflow_tui.store import HOSTNAME, effective_status

from ..api_rules import cache_breakpoints, without_breakpoints
from ..conftest import CountingClient

ACTION_MAILS = 6  # mails in the sample inbox that ask for something


def test_crash_after_step_2_then_resume_makes_exactly_one_call(store):
    """The design's key test."""
    first = CountingClient()
    started = []
    with pytest.raises(SystemExit, match="simulated crash after step 2"):
        run_brief(store, client=first, crash_after_step=2, run_id="0123456789ab", on_start=started.append)
    assert first.calls == 2  # the third call never happened
    run = store.get_run("0123456789ab")
    assert run.step_count == 2 and effective_status(run) == "interrupted"

    second = CountingClient()
    result = resume("0123456789ab", store=store, client=second)
    assert second.calls == 1
    assert result.run_id == started[0] == "0123456789ab"
    assert result.status == "done" and result.steps == 3 and result.replayed_steps == 2
    assert "## Today" in result.final_text and "## One thing" in result.final_text
    assert store.get_run("0123456789ab").status == "done"
    # The brief was written from the history the resumed call received: it names the tasks created before the crash.
    assert result.final_text.count("new: Follow up:") == ACTION_MAILS


def test_resume_of_finished_run_calls_nothing_and_builds_no_client(store, monkeypatch):
    done = run_brief(store, client=CountingClient())

    def no_client(model):
        raise AssertionError("a client was built for a finished run")

    monkeypatch.setattr(agent_request, "make_client", no_client)
    again = resume(done.run_id, store=store)
    assert again.calls == 0
    assert again.final_text == done.final_text
    assert (again.input_tokens, again.output_tokens) == (done.input_tokens, done.output_tokens)


def test_rebuilt_messages_equal_what_each_call_sent(store):
    client = CountingClient()
    result = run_brief(store, client=client)
    steps = store.steps(result.run_id)
    assert client.calls == len(steps) == 3
    for k, request in enumerate(client.requests):
        assert rebuild_messages(store, result.run_id, steps[:k]) == without_breakpoints(request["messages"]), \
                f"call {k + 1}"


def test_crash_while_tools_run_resumes_without_a_new_call(store, monkeypatch):
    from dayflow_tui.agent import journal

    real_run_tool = journal.run_tool
    calls_seen = []

    def dying_run_tool(ctx, name, args):  # every path runs a step's calls one at a time, each result journaled
        if name == "create_task":
            calls_seen.append(args)
        if len(calls_seen) == 4:  # step 2: three create_task calls ran (and were kept) before the crash
            raise SystemExit("killed while tools ran")
        return real_run_tool(ctx, name, args)

    monkeypatch.setattr(journal, "run_tool", dying_run_tool)
    first = CountingClient()
    with pytest.raises(SystemExit):
        run_brief(store, client=first, run_id="aaaaaaaaaaaa")
    assert first.calls == 2
    pending = store.steps("aaaaaaaaaaaa")[-1]
    assert pending.n == 2 and pending.tool_results is None
    # rebuild_messages never emits a tool_use without its results.
    assert len(rebuild_messages(store, "aaaaaaaaaaaa")) == 3

    monkeypatch.setattr(journal, "run_tool", real_run_tool)
    second = CountingClient()
    result = resume("aaaaaaaaaaaa", store=store, client=second)
    assert second.calls == 1  # step 3 only: step 2's tools ran from the stored response
    assert result.status == "done"
    created = store.list_tasks(run_id="aaaaaaaaaaaa")
    keys = [t.idempotency_key for t in created]
    assert len(keys) == len(set(keys)) == ACTION_MAILS
    # Resume is exact to the tool call: the three kept results were reused, not run again, so the history
    # is the one a run that never stopped would have (no "already exists" answer).
    results = json.loads(store.steps("aaaaaaaaaaaa")[1].tool_results)
    assert len(results) == ACTION_MAILS
    assert not any("already exists" in r["content"] for r in results)


def test_tool_results_go_back_in_one_user_turn_in_order(store):
    client = CountingClient()
    run_brief(store, client=client)
    second = client.requests[1]["messages"]
    assistant, results = second[-2], second[-1]
    uses = [b["id"] for b in assistant["content"] if b["type"] == "tool_use"]
    assert results["role"] == "user"
    assert [b["tool_use_id"] for b in results["content"]] == uses
    assert all(b["type"] == "tool_result" for b in results["content"])


def test_requests_ask_for_prompt_caching_and_totals_count_cache_tokens(store):
    client = CountingClient()
    result = run_brief(store, client=client)
    # Breakpoints after the system prompt and on the last message's last block: at most the API's four.
    for r in client.requests:
        assert r["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert r["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert cache_breakpoints(r) == 2
    steps = store.steps(result.run_id)
    assert any(s.cache_read_input_tokens > 0 for s in steps[1:])
    run = store.get_run(result.run_id)
    assert run.input_tokens == sum(s.input_tokens for s in steps)
    assert run.cache_read_tokens == sum(s.cache_read_input_tokens for s in steps)


def test_budget_stops_the_run_and_a_larger_budget_continues_it(store):
    client = CountingClient()
    result = run_brief(store, client=client, budget_tokens=1000)
    assert result.status == "budget" and "budget" in result.error
    # Checked before each call: step 1 spent ~600 (< 1000), step 2 crossed it, so no third call.
    assert client.calls == 2 and result.steps == 2
    run = store.get_run(result.run_id)
    assert run.input_tokens + run.output_tokens >= 1000
    assert run.status == "budget" and effective_status(run) == "budget"

    more = CountingClient()
    # The guard counts the whole run: a budget below what is already spent stops at once.
    again = resume(result.run_id, store=store, client=more, budget_tokens=run.input_tokens + run.output_tokens)
    assert again.status == "budget" and more.calls == 0
    done = resume(result.run_id, store=store, client=more, budget_tokens=100_000)
    assert done.status == "done" and more.calls == 1


def test_max_steps_stops_with_budget_status(store):
    result = run_brief(store, client=CountingClient(), max_steps=2)
    assert result.status == "budget" and "step limit" in result.error and result.steps == 2
    finished = resume(result.run_id, store=store, client=CountingClient(), max_steps=5)
    assert finished.status == "done"


def test_api_failure_keeps_error_and_run_resumable(store):
    class ServerError(Exception):  # (429 and 529 are back-pressure, not failures: tests/agent/test_rate_limits.py)
        status_code = 500
        body = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}

    client = CountingClient(fail_on={2: ServerError("internal")})
    with pytest.raises(ModelCallFailed, match="500"):
        run_brief(store, client=client, run_id="bbbbbbbbbbbb")
    run = store.get_run("bbbbbbbbbbbb")
    assert run.status == "failed" and "Internal server error" in run.error and run.step_count == 1
    retry = CountingClient()
    result = resume("bbbbbbbbbbbb", store=store, client=retry)
    assert result.status == "done" and retry.calls == 2
    assert [s.n for s in store.steps("bbbbbbbbbbbb")] == [1, 2, 3]
    assert store.get_run("bbbbbbbbbbbb").error is None


def test_on_step_receives_every_commit_with_running_totals(store):
    events = []
    result = run_brief(store, client=CountingClient(), on_step=events.append)
    assert [(e.n, e.phase) for e in events] == [(1, "response"), (1, "tools"), (2, "response"), (2, "tools"),
                                               (3, "response")]
    assert events[-1].run_input_tokens == result.input_tokens


def test_resume_refuses_a_run_held_by_a_live_process_and_takes_over_a_dead_one(store):
    run = store.create_run("task", model="offline", status="running", run_id="cccccccccccc")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        Run.update(owner_host=HOSTNAME, owner_pid=holder.pid, lease_token="t" * 32,
                   heartbeat_at=clock.iso()).where(Run.id == run.id).execute()
        client = CountingClient()
        with pytest.raises(RunBusy, match=f"pid {holder.pid}"):
            resume(run.id, store=store, client=client)
        assert client.calls == 0
    finally:
        holder.kill()
        holder.wait()
    assert effective_status(store.get_run(run.id)) == "interrupted"
    result = resume(run.id, store=store, client=CountingClient())
    assert result.status == "done"


def test_another_hosts_lease_is_taken_over_only_when_its_heartbeat_is_stale(store):
    from dayflow_tui import clock

    run = store.create_run("task", model="offline", status="running", run_id="dddddddddddd")
    Run.update(owner_host="other-host", owner_pid=1, lease_token="x" * 32,
               heartbeat_at=clock.iso()).where(Run.id == run.id).execute()
    with pytest.raises(RunBusy, match="other-host"):
        resume(run.id, store=store, client=CountingClient())
    Run.update(heartbeat_at="2000-01-01T00:00:00.000Z").where(Run.id == run.id).execute()
    assert resume(run.id, store=store, client=CountingClient()).status == "done"


def test_wire_blocks_keep_thinking_and_add_no_fields():
    from anthropic.types import Message

    blocks = [
        {"type": "thinking", "thinking": "Let me check the inbox.", "signature": "sig+/=="},
        {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_inbox", "input": {"limit": 5}},
    ]
    message = Message.model_validate({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                                      "content": blocks, "stop_reason": "tool_use", "stop_sequence": None,
                                      "usage": {"input_tokens": 1, "output_tokens": 1}})
    assert wire_blocks(message) == blocks  # exactly what came over the wire: no caller: null


def test_bad_tool_input_becomes_an_error_result_and_the_run_goes_on(store):
    from dayflow_tui.agent.tools import ToolContext, run_tools
    from dayflow_tui import clock
    import json

    run = store.create_run("t", model="offline", run_id="eeeeeeeeeeee")
    from dayflow_tui.agent.brief import AGENT

    ctx = ToolContext(store, run.id, clock.today(), AGENT)
    results = run_tools(ctx, [
        {"type": "tool_use", "id": "a", "name": "create_task", "input": {"title": 5, "idempotency_key": "k"}},
        {"type": "tool_use", "id": "b", "name": "launch_rockets", "input": {}},
        {"type": "tool_use", "id": "c", "name": "read_calendar", "input": {}},
        {"type": "tool_use", "id": "d", "name": "create_task", "input": {"title": "x", "idempotency_key": "k",
                                                                          "due": "tomorrow"}},
        {"type": "tool_use", "id": "e", "name": "read_inbox", "input": {"limit": 2}},
    ])
    codes = [json.loads(r["content"]).get("error", {}).get("code") for r in results]
    assert codes == ["invalid_input", "unknown_tool", "invalid_input", "invalid_input", None]
    assert [r.get("is_error", False) for r in results] == [True, True, True, True, False]
    assert store.list_tasks(run_id=run.id) == []  # validation happens before any side effect
