"""Odd model replies and API failures, through the real SDK against the loopback server.

Each reply is recorded as a step and the run either goes on or stops
cleanly; each API failure ends in one clear line with the run resumable,
no step lost and none repeated on resume.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from dayflow_tui.config.errors import ModelCallFailed, RateLimited
from dayflow_tui.agent import brief
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.store import step_blocks

from ..api_rules import without_breakpoints
from ..loopback_api import FAKE_KEY, LoopbackAPI, drop, error_reply, hang, message_reply

MODEL = "claude-loopback-1"


@pytest.fixture
def api(monkeypatch):
    with LoopbackAPI() as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("DAYFLOW_API_MAX_RETRIES", "1")  # one SDK retry keeps the failures fast
        yield server


def tool_use(name, args, n=1) -> dict:
    return {"type": "tool_use", "id": f"toolu_hostile{n:02d}", "name": name, "input": args}


def results_of(store, run_id: str, n: int) -> list[dict]:
    step = next(s for s in store.steps(run_id) if s.n == n)
    return [{**r, "payload": json.loads(r["content"])} for r in step_blocks(step, "tool_results")]


def assert_finished_cleanly(store, run_id: str, steps: int, tasks: int = 6) -> None:
    """Done, steps 1..N, ``tasks`` created once each.

    The offline model behind the loopback server creates tasks only when no
    create_task call is in the history yet, so a scripted (failed) one means none.
    """
    run = store.get_run(run_id)
    assert run.status == "done" and "## Today" in run.final_text
    assert [s.n for s in store.steps(run_id)] == list(range(1, steps + 1))
    keys = [t.idempotency_key for t in store.list_tasks(run_id=run_id)]
    assert len(keys) == len(set(keys)) == tasks


def test_a_call_to_an_unknown_tool_is_answered_with_an_error_and_the_run_goes_on(store, api):
    api.planned[1] = message_reply([{"type": "text", "text": "Cleaning up."},
                                    tool_use("delete_all_mail", {"confirm": True})], "tool_use")
    result = run_brief(store, model=MODEL)
    [answer] = results_of(store, result.run_id, 1)
    assert answer["is_error"] and answer["payload"]["error"]["code"] == "unknown_tool"
    assert_finished_cleanly(store, result.run_id, 4)
    assert api.calls == 4


def test_arguments_of_the_wrong_type_are_refused_before_any_side_effect(store, api):
    api.planned[1] = message_reply([
        tool_use("create_task", {"title": 123, "idempotency_key": ["k"]}, 1),
        tool_use("create_task", {"title": "Pay", "idempotency_key": "hostile-date", "due": "2026-13-45"}, 2),
        tool_use("create_task", {"title": "Pay", "idempotency_key": "hostile-extra", "priority": "high"}, 3),
        tool_use("create_task", {"title": "   ", "idempotency_key": "hostile-blank"}, 4),
        tool_use("read_inbox", {"limit": "all"}, 5),
        tool_use("read_calendar", "today", 6),
    ], "tool_use")
    result = run_brief(store, model=MODEL)
    answers = results_of(store, result.run_id, 1)
    assert [a["payload"]["error"]["code"] for a in answers] == ["invalid_input"] * 6
    assert all(a["is_error"] for a in answers)
    assert not [t for t in store.list_tasks(include_done=True) if t.idempotency_key.startswith("hostile")]
    assert_finished_cleanly(store, result.run_id, 3, tasks=0)


def test_an_empty_content_list_is_recorded_and_ends_the_run(store, api):
    api.planned[1] = message_reply([], "end_turn")
    result = run_brief(store, model=MODEL)
    assert (result.status, result.final_text, api.calls) == ("done", None, 1)
    [step] = store.steps(result.run_id)
    assert step.assistant == "[]" and step.stop_reason == "end_turn"
    assert resume(result.run_id, store=store).calls == 0


def test_a_tool_call_cut_off_at_max_tokens_is_not_run_and_the_run_goes_on(store, api):
    # The cut-off input still passes the schema: running it would create a task with a truncated title.
    title = "Follow up: Q4 budget review: numbers needed by Thursday"
    api.planned[1] = message_reply([
        {"type": "text", "text": "Creating tasks."},
        tool_use("create_task", {"title": title[:17], "idempotency_key": "mail-m-1001"}),
    ], "max_tokens")
    api.planned[2] = message_reply([tool_use("create_task", {"title": title, "idempotency_key": "mail-m-1001"}, 2)],
                                   "tool_use")
    result = run_brief(store, model=MODEL)
    [answer] = results_of(store, result.run_id, 1)
    assert answer["is_error"] and answer["payload"]["error"]["code"] == "cut_off"
    [again] = results_of(store, result.run_id, 2)
    assert again["payload"]["created"] is True
    assert_finished_cleanly(store, result.run_id, 4, tasks=1)
    [task] = store.list_tasks(run_id=result.run_id)
    assert (task.idempotency_key, task.title) == ("mail-m-1001", title)


def test_pause_turn_is_sent_back_as_it_came_and_the_run_goes_on(store, api):
    paused = [{"type": "text", "text": "Still looking through the calendar..."}]
    api.planned[1] = message_reply(paused, "pause_turn")
    result = run_brief(store, model=MODEL)
    assert without_breakpoints(api.requests[1]["messages"])[-1] == {"role": "assistant", "content": paused}
    assert_finished_cleanly(store, result.run_id, 4)
    assert store.steps(result.run_id)[0].stop_reason == "pause_turn"


def test_a_refusal_stops_the_run_and_a_resume_does_not_pay_again(store, api):
    api.planned[1] = message_reply([{"type": "text", "text": "I can't help with that."}], "refusal")
    result = run_brief(store, model=MODEL)
    assert result.status == "failed" and "refusal" in result.error
    run = store.get_run(result.run_id)
    assert run.status == "failed" and run.final_text == "I can't help with that." and run.step_count == 1
    again = resume(result.run_id, store=store)
    assert again.status == "failed" and again.calls == 0 and api.calls == 1


def test_a_refusal_holding_tool_calls_runs_none_of_them(store, api):
    """A refusal ends the loop before any tool runs, even when the reply holds calls (#12)."""
    api.planned[1] = message_reply([{"type": "text", "text": "I won't do this."},
                                    tool_use("create_task", {"title": "x", "idempotency_key": "refused-1"})],
                                   "refusal")
    result = run_brief(store, model=MODEL)
    assert result.status == "failed" and "refusal" in result.error and api.calls == 1
    assert store.list_tasks(run_id=result.run_id) == []
    assert store.steps(result.run_id)[0].tool_results is None
    again = resume(result.run_id, store=store)
    assert again.status == "failed" and again.calls == 0 and store.list_tasks(run_id=result.run_id) == []


def test_a_pause_turn_continuation_joins_the_paused_turn_so_roles_alternate(store, api):
    from dayflow_tui.agent.request import replay_request

    paused = [{"type": "text", "text": "Still looking through the calendar..."}]
    api.planned[1] = message_reply(paused, "pause_turn")
    result = run_brief(store, model=MODEL)
    for request in api.requests:
        roles = [m["role"] for m in request["messages"]]
        assert all(a != b for a, b in zip(roles, roles[1:])), roles  # never two turns of one role in a row
    # The second call's reply (its read calls) was merged into the paused turn in the third request.
    assert api.requests[2]["messages"][1]["content"][0] == paused[0]
    replayed = [m["role"] for m in replay_request(store, result.run_id)["messages"]]
    assert all(a != b for a, b in zip(replayed, replayed[1:])), replayed
    assert result.status == "done"


def test_an_empty_text_block_is_stored_as_received_and_sent_back_without_it(store, api):
    api.planned[1] = message_reply([{"type": "text", "text": ""}, tool_use("read_tasks", {})], "tool_use")
    result = run_brief(store, model=MODEL)
    stored = step_blocks(store.steps(result.run_id)[0], "assistant")
    assert stored[0] == {"type": "text", "text": ""}  # the reply as it came
    sent = api.requests[1]["messages"][1]
    assert sent["role"] == "assistant" and all(b.get("text", "x") != "" for b in sent["content"])
    assert result.status == "done"


def test_a_tool_call_cut_off_at_max_tokens_gets_one_call_with_more_room(store, api, monkeypatch):
    # A model whose replies may be long, and an agent that asks for short ones: the retry has room to give.
    monkeypatch.setenv("DAYFLOW_MODELS", f'{{"{MODEL}": {{"max_output": 64000}}}}')
    agent = dataclasses.replace(brief.AGENT, max_tokens=4096)
    api.planned[1] = message_reply([tool_use("create_task", {"title": "Follow", "idempotency_key": "k-1"})],
                                   "max_tokens")
    api.planned[2] = message_reply([tool_use("create_task", {"title": "Follow", "idempotency_key": "k-2"}, 2)],
                                   "max_tokens")
    result = run_brief(store, model=MODEL, agent=agent)
    sizes = [r["max_tokens"] for r in api.requests]
    assert sizes[0] == 4096 and sizes[1] == 16384  # the call after the cut-off reply has more room, once
    assert sizes[2:] and all(size == 4096 for size in sizes[2:])
    assert store.list_tasks(run_id=result.run_id) == [] or all(
        t.idempotency_key not in ("k-1", "k-2") for t in store.list_tasks(run_id=result.run_id))
    assert api.calls == store.get_run(result.run_id).step_count  # every paid reply committed


# -- API failures -----------------------------------------------------------


def _retrying(action, attempts: int = 2) -> dict:
    """``action`` for call 2 and the SDK's retry of it (DAYFLOW_API_MAX_RETRIES=1)."""
    return {n: action for n in range(2, 2 + attempts)}


@pytest.mark.parametrize("plan, attempts, fragments", [
    (_retrying(error_reply(401, "invalid x-api-key"), 1), 1, ["model API error 401", "invalid x-api-key"]),
    (_retrying(error_reply(429, "rate limited", {"retry-after": "0.05"})), 2, ["429", "rate limited"]),
    (_retrying(error_reply(529, "Overloaded", {"retry-after-ms": "20"})), 2, ["529", "Overloaded"]),
    (_retrying(error_reply(500, "internal", {"retry-after-ms": "20"})), 2, ["500", "internal"]),
    (_retrying(drop), 2, ["model API error (APIConnectionError)"]),
    (_retrying(hang(5)), 2, ["model API error (APITimeoutError)"]),
], ids=["401", "429-retry-after", "529-overloaded", "500", "dropped-connection", "timeout"])
def test_an_api_failure_is_one_clear_line_and_the_run_resumes_without_loss(store, api, monkeypatch, plan,
                                                                          attempts, fragments):
    monkeypatch.setenv("DAYFLOW_API_TIMEOUT", "0.5")
    api.planned.update(plan)
    with pytest.raises(ModelCallFailed) as failure:
        run_brief(store, model=MODEL, run_id="hostile00001")
    message = str(failure.value)
    assert "\n" not in message and FAKE_KEY not in message and len(message) < 400
    for fragment in fragments:
        assert fragment in message
    assert api.calls == 1 + attempts  # the SDK's own retries happened, then it gave up
    run = store.get_run("hostile00001")
    if isinstance(failure.value, RateLimited):
        # Back-pressure (429, 529) is not a failure: the run waits queued, its attempt not counted.
        assert failure.value.status in (429, 529) and failure.value.run_id == "hostile00001"
        assert (run.status, run.step_count, run.attempts) == ("queued", 1, 0)
        assert run.not_before is not None and run.lease_token is None
        word = "rate limited (429)" if failure.value.status == 429 else "overloaded (529)"
        assert run.error.startswith(f"{word}, retry after ") and message in run.error
    else:
        assert (run.status, run.step_count, run.error) == ("failed", 1, message)
    result = resume("hostile00001", store=store)
    assert result.status == "done" and result.calls == 2
    assert [s.n for s in store.steps("hostile00001")] == [1, 2, 3]
    assert api.calls == 1 + attempts + 2
    assert len({t.idempotency_key for t in store.list_tasks(run_id="hostile00001")}) == 6
