"""Prompt caching by default: breakpoints after the system prompt and on the last message, the same bytes
for the same history, the history itself never touched, and the 1-hour lifetime when the agent asks.

The rules are the prompt caching page's (https://platform.claude.com/docs/en/build-with-claude/prompt-caching:
at most four breakpoints; a ``ttl`` of ``"1h"`` on ``cache_control``).
"""

from __future__ import annotations

import copy
import dataclasses
import json

from dayflow_tui.agent import brief
from dayflow_tui.agent.messages import rebuild_messages
from dayflow_tui.agent.request import build_request
from dayflow_tui.agent.runs import run_brief
from dayflow_tui.money.estimate import cache_ttl

from ..api_rules import cache_breakpoints, without_breakpoints
from ..conftest import CountingClient


def test_the_same_history_makes_the_same_request_bytes_and_stays_as_stored(store):
    client = CountingClient()
    result = run_brief(store, client=client)
    history = rebuild_messages(store, result.run_id)
    kept = copy.deepcopy(history)
    first = json.dumps(build_request("claude-sonnet-4-5", history, brief.AGENT))
    again = json.dumps(build_request("claude-sonnet-4-5", rebuild_messages(store, result.run_id), brief.AGENT))
    assert first == again  # a cache hit needs the very same prefix bytes
    assert history == kept  # the breakpoint is on a copy of the last message
    # Each call's request is the one before it plus the new turns: its prefix (all but the last message,
    # which carries the moving breakpoint) is what the previous call sent.
    for before, after in zip(client.requests, client.requests[1:]):
        assert without_breakpoints(before["messages"]) == after["messages"][:len(before["messages"])]
        assert json.dumps(before["system"]) == json.dumps(after["system"])
        assert cache_breakpoints(after) == 2


def test_an_agent_may_ask_for_the_one_hour_cache_and_the_estimate_reads_it(store):
    hour = dataclasses.replace(brief.AGENT, cache_ttl="1h")
    request = build_request("claude-sonnet-4-5", [{"role": "user", "content": "Brief me."}], hour)
    assert request["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert request["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert cache_ttl(request) == "1h"
    assert cache_ttl(build_request("claude-sonnet-4-5", [{"role": "user", "content": "x"}], brief.AGENT)) == "5m"
    plain = {"model": "m", "max_tokens": 1, "system": "s", "tools": [], "messages": [{"role": "user", "content": "x"}]}
    assert cache_ttl(plain) is None
    # An agent with no system prompt: the last tool carries the breakpoint.
    bare = dataclasses.replace(brief.AGENT, system="")
    request = build_request("claude-sonnet-4-5", [{"role": "user", "content": "x"}], bare)
    assert request["system"] == "" and request["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in bare.schemas[-1]  # the agent's own schemas are not touched
