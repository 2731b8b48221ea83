"""``model_context_window_exceeded`` with compaction on: the run compacts and goes on (once), else it says why.

The stop reason is documented on https://platform.claude.com/docs/en/build-with-claude/handling-stop-reasons;
each scripted reply is checked with the SDK's own ``anthropic.types.Message`` before it is served.
"""

from __future__ import annotations

from anthropic.types import Message

from dayflow_tui.agent.compaction import SUMMARY_PREFIX
from dayflow_tui.agent.runs import resume, run_brief

from ..api_rules import problems
from ..loopback_api import message_reply

MODEL = "claude-haiku-4-5"
OVERFLOWED = "model_context_window_exceeded"


def planned(content, stop_reason):
    plan = message_reply(content, stop_reason)

    def serve(handler, body):
        status, headers, payload = plan(handler, body)
        Message.model_validate(payload)
        return status, headers, payload

    return serve


READ = [{"type": "tool_use", "id": "toolu_overflow1", "name": "read_inbox", "input": {"limit": 20}}]
PARTIAL = [{"type": "text", "text": "Your inbox has eight mails; the first asks for"}]


def test_a_reply_that_fills_the_context_window_is_compacted_and_the_run_goes_on(store, api):
    api.planned[1] = planned(READ, "tool_use")
    api.planned[2] = planned(PARTIAL, OVERFLOWED)
    api.planned[3] = planned([{"type": "text", "text": " the Q4 numbers."}], "end_turn")
    result = run_brief(store, model=MODEL, compact_at=1_000_000)  # on, but far from this run's size
    assert result.status == "done" and api.calls == 3, result.error
    assert not any(SUMMARY_PREFIX in str(r["messages"]) for r in api.requests[:2])
    third = api.requests[2]["messages"]
    assert SUMMARY_PREFIX in str(third) and problems(third) == []
    assert third[-1]["role"] == "assistant" and third[-1]["content"][0]["text"] == PARTIAL[0]["text"]
    # A resume finds the run finished and pays for nothing.
    assert resume(result.run_id, store=store).calls == 0 and api.calls == 3


def test_without_compaction_or_twice_in_a_row_the_run_fails_and_says_why(store, api):
    api.planned[1] = planned(READ, "tool_use")
    api.planned[2] = planned(PARTIAL, OVERFLOWED)
    result = run_brief(store, model=MODEL)
    assert result.status == "failed" and "--compact-at" in result.error and api.calls == 2
    api.requests.clear()
    api.planned = {1: planned(READ, "tool_use"), 2: planned(PARTIAL, OVERFLOWED), 3: planned(PARTIAL, OVERFLOWED)}
    again = run_brief(store, model=MODEL, compact_at=1_000_000)
    assert again.status == "failed" and api.calls == 3
    assert "again after it was compacted" in again.error and "lower --compact-at" in again.error
