"""The model table: each model's longest reply is what a call asks for, within what the SDK sends unstreamed.

Served by the loopback server to the real ``anthropic`` client; every scripted reply is checked with the
SDK's own ``anthropic.types.Message`` (the Messages API's response shape:
https://platform.claude.com/docs/en/api/messages/create, "Returns").
"""

from __future__ import annotations

import dataclasses

import anthropic
import pytest
from anthropic import _constants as sdk_constants
from anthropic.types import Message

from dayflow_tui.agent import brief
from dayflow_tui.agent.model_limits import BUILTIN, FALLBACK, limits_for
from dayflow_tui.agent.request import build_request
from dayflow_tui.agent.runs import run_brief

from ..loopback_api import message_reply


def checked(plan):
    """``plan``'s reply, validated by the SDK's own Message type before it is served."""

    def serve(handler, body):
        status, headers, payload = plan(handler, body)
        Message.model_validate(payload)
        return status, headers, payload

    return serve


def cut_off_call(n: int) -> dict:
    return {"type": "tool_use", "id": f"toolu_limits{n:02d}", "name": "create_task",
            "input": {"title": "Follow", "idempotency_key": f"k-{n}"}}


def test_the_retry_after_a_cut_off_call_gets_more_room_once_but_never_past_the_model(store, api, monkeypatch):
    agent = dataclasses.replace(brief.AGENT, max_tokens=2000)
    for n in (1, 2):
        api.planned[n] = checked(message_reply([cut_off_call(n)], "max_tokens"))
    api.planned[3] = checked(message_reply([{"type": "text", "text": "Done."}], "end_turn"))
    result = run_brief(store, model="claude-haiku-4-5", agent=agent)
    assert result.status == "done"
    assert [r["max_tokens"] for r in api.requests] == [2000, 16384, 2000]
    monkeypatch.setenv("DAYFLOW_MODELS", '{"claude-haiku-4-5": {"max_output": 3000}}')
    api.requests.clear()
    api.planned = {1: checked(message_reply([cut_off_call(1)], "max_tokens")),
                   2: checked(message_reply([{"type": "text", "text": "Done."}], "end_turn"))}
    assert run_brief(store, model="claude-haiku-4-5", agent=agent).status == "done"
    assert [r["max_tokens"] for r in api.requests] == [2000, 3000]  # the settings file's limit holds the retry


def test_with_no_max_tokens_a_call_asks_for_the_models_longest_reply():
    agent = brief.AGENT
    assert build_request("claude-haiku-3-5-20241022", [], agent)["max_tokens"] == 4096  # unknown: the fallback
    assert build_request("claude-3-5-haiku-20241022", [], agent)["max_tokens"] == 8192
    assert build_request("claude-sonnet-4-5-20250929", [], agent)["max_tokens"] == 64000
    assert build_request("claude-opus-4-0", [], agent)["max_tokens"] == 32000
    assert build_request("offline", [], agent)["max_tokens"] == 4096
    assert build_request("claude-sonnet-4-5", [], dataclasses.replace(agent, max_tokens=20000))["max_tokens"] == 20000


def test_a_long_request_the_sdk_refuses_unstreamed_goes_through_because_every_call_streams(store, api):
    """The issue's exit 5: after a cut-off tool call the retry asked Opus 4 for 16,384 tokens, which the SDK
    refuses without streaming ("Streaming is required"). Every call streams now: the retry is sent and paid once."""
    client = anthropic.Anthropic(api_key="sk-ant-test-limits", base_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="Streaming is required"):
        client._calculate_nonstreaming_timeout(16384, sdk_constants.MODEL_NONSTREAMING_TOKENS.get("claude-opus-4-0"))
    api.planned[1] = checked(message_reply([cut_off_call(1)], "max_tokens"))
    api.planned[2] = checked(message_reply([{"type": "text", "text": "Done."}], "end_turn"))
    result = run_brief(store, model="claude-opus-4-0", agent=dataclasses.replace(brief.AGENT, max_tokens=8000))
    assert (result.status, result.calls) == ("done", 2)
    assert [r["max_tokens"] for r in api.requests] == [8000, 16384]
    assert all(r["stream"] is True for r in api.requests)


def test_model_ids_match_by_their_longest_known_prefix_and_unknown_ids_fall_back(monkeypatch):
    assert limits_for("claude-sonnet-4-5-20250929") == BUILTIN["claude-sonnet-4-5"]
    assert limits_for("claude-opus-4-1-20250805").max_output == 32000
    assert limits_for("claude-opus-4-5-20251101").max_output == 64000
    assert limits_for("claude-opus-5-5").context_window == 1_000_000
    assert limits_for("my-proxy-model") == FALLBACK and not FALLBACK.known
    monkeypatch.setenv("DAYFLOW_MODELS", '{"my-proxy-model": {"max_output": 9000, "thinking": "adaptive"}}')
    custom = limits_for("my-proxy-model")
    assert (custom.known, custom.max_output, custom.thinking) == (True, 9000, "adaptive")
