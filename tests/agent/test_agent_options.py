"""An agent's request options in the API's own shapes: refused when wrong, sent as given, fingerprinted, shown.

Replies are served by the loopback server to the real ``anthropic`` client, each checked with the SDK's
``anthropic.types.Message`` first. Shapes, as Anthropic documents them:
- thinking with its signature, before a tool call: the extended thinking page, "Extended thinking with
  tool use" (https://platform.claude.com/docs/en/build-with-claude/extended-thinking);
- server_tool_use, web_search_tool_result and a text block's web_search_result_location citations: the
  web search tool page (https://platform.claude.com/docs/en/agents-and-tools/tool-use/web-search-tool),
  with ``usage.server_tool_use.web_search_requests``.
"""

from __future__ import annotations

import json
import sys

import pytest
from anthropic.types import Message

from dayflow_tui.agent.agent_options import AgentOptionError
from dayflow_tui.agent.define import Agent, tool
from dayflow_tui.agent.registry import load_agent
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.config.errors import AgentChanged

from ..api_rules import problems
from ..reliability_helpers import assert_one_error_line, cli_env, dayflow, fingerprint, text

MODEL = "claude-sonnet-4-5"
SIGNATURE = "EqQBCkgIARABGAIiQL3N4eWR1MbWVudCBzaWduYXR1cmUgb2YgdGhpbmtpbmc+/=="

AGENT_FILE = '''
from dayflow_tui import Agent, tool


@tool(read_only=True)
def lookup(city: str) -> dict:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    return {"ok": True, "city": city, "temp": 21}


agent = Agent(name="forecaster", system="Answer with today's weather.", tools=(lookup,), max_tokens=20000,
              thinking={"type": "enabled", "budget_tokens": 2048}, tool_choice={"type": "auto"}, top_p=0.97,
              stop_sequences=["END"], metadata={"user_id": "u-42"},
              server_tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
              betas=["context-1m-2025-08-07"]BUDGET)
'''


def agent_file(tmp_path, *, budget: str = "") -> str:
    path = tmp_path / "forecaster.py"
    path.write_text(AGENT_FILE.replace("BUDGET", budget))
    return f"{path}:agent"


def reply(content: list[dict], stop_reason: str, *, searches: int = 0, n: int = 1):
    """A whole server-shaped message, checked with the SDK's own type before it is served."""
    payload = {"id": f"msg_options{n:02d}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
               "content": content, "stop_reason": stop_reason, "stop_sequence": None,
               "usage": {"input_tokens": 900, "output_tokens": 120, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 0,
                         "server_tool_use": {"web_search_requests": searches, "web_fetch_requests": 0}}}
    Message.model_validate(payload)
    return lambda handler, body: (200, {}, payload)


def thinking_then_lookup(n: int) -> list[dict]:
    return [{"type": "thinking", "thinking": f"Step {n}: the user wants Lisbon's weather; look it up.",
             "signature": SIGNATURE + str(n)},
            {"type": "tool_use", "id": f"toolu_options{n:02d}", "name": "lookup", "input": {"city": "Lisbon"}}]


SEARCHED = [
    {"type": "server_tool_use", "id": "srvtoolu_01options", "name": "web_search", "input": {"query": "Lisbon weather"}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01options",
     "content": [{"type": "web_search_result", "url": "https://weather.example/lisbon", "title": "Lisbon today",
                  "encrypted_content": "EqgfCioIARgBIiQ3YTA0", "page_age": "December 5, 2026"}]},
    {"type": "text", "text": "Lisbon is 21 °C and sunny.",
     "citations": [{"type": "web_search_result_location", "url": "https://weather.example/lisbon",
                    "title": "Lisbon today", "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0", "cited_text": "21 °C"}]},
]


def test_options_are_sent_as_given_and_thinking_goes_back_byte_for_byte_across_a_crash_and_compaction(
        store, api, tmp_path):
    ref = agent_file(tmp_path)
    agent = load_agent(ref)
    api.planned[1] = reply(thinking_then_lookup(1), "tool_use", n=1)
    api.planned[2] = reply(thinking_then_lookup(2), "tool_use", n=2)
    api.planned[3] = reply(SEARCHED, "end_turn", searches=1, n=3)
    with pytest.raises(SystemExit):
        run_brief(store, model=MODEL, agent=agent, agent_ref=ref, user_msg="Weather in Lisbon?", crash_after_step=1,
                  run_id="0pt10ns0pt10")
    result = resume("0pt10ns0pt10", store=store, compact_at=10)  # every later request is compacted
    assert result.status == "done" and api.calls == 3 and result.final_text == "Lisbon is 21 °C and sunny."
    first = api.requests[0]
    assert first["max_tokens"] == 20000
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert (first["tool_choice"], first["top_p"], first["stop_sequences"], first["metadata"]) == (
        {"type": "auto"}, 0.97, ["END"], {"user_id": "u-42"})
    assert "temperature" not in first
    assert first["tools"][-1] == {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    assert all(h.get("anthropic-beta") == "context-1m-2025-08-07" for h in api.headers)
    # After the crash, the resumed call sends step 1's turn exactly as the API sent it: thinking, signature.
    sent = api.requests[1]["messages"][1]
    assert sent["role"] == "assistant"
    assert json.dumps(sent["content"]) == json.dumps(thinking_then_lookup(1))
    # Compacted, the last assistant turn with tool use keeps its thinking block first, as the API requires.
    last = api.requests[2]["messages"]
    assert problems(last) == []
    turn = [m for m in last if m["role"] == "assistant"][-1]
    assert json.dumps(turn["content"]) == json.dumps(thinking_then_lookup(2))


def test_a_bad_option_is_refused_when_the_agent_is_defined():
    @tool(read_only=True)
    def lookup(city: str) -> dict:
        return {"city": city}

    cases = [
        (dict(max_tokens=0), "max_tokens must be a whole number"),
        (dict(model="claude-haiku-4-5", max_tokens=70000), "more than its model allows (64,000)"),
        (dict(thinking={"type": "enabled"}), "budget_tokens must be a whole number, 1,024 or more"),
        (dict(thinking={"type": "enabled", "budget_tokens": 4000}, max_tokens=3000), "must be less than max_tokens"),
        (dict(thinking={"type": "adaptive"}, temperature=0.5), "temperature cannot be set with thinking on"),
        (dict(thinking={"type": "adaptive"}, top_p=0.5), "top_p must be 0.95 to 1"),
        (dict(thinking={"type": "thinking"}), "thinking must be"),
        (dict(model="claude-3-5-haiku-20241022", thinking={"type": "adaptive"}), "its model has no thinking"),
        (dict(tool_choice={"type": "tool", "name": "missing"}), "not one of its tools"),
        (dict(tool_choice={"type": "any"}, thinking={"type": "adaptive"}), "cannot be used with thinking on"),
        (dict(temperature=1.5), "temperature must be a number from 0 to 1"),
        (dict(stop_sequences=["", "x"]), "stop_sequences must be a list of strings"),
        (dict(metadata={"user": "x"}), 'metadata must be {"user_id"'),
        (dict(server_tools=[{"type": "web_search_20250305"}]), "needs a name"),
        (dict(server_tools=[{"type": "web_search_20250305", "name": "lookup"}]), "used twice"),
        (dict(betas="context-1m"), "betas must be a list"),
        (dict(cache_ttl="2h"), 'cache_ttl must be "5m" or "1h"'),
    ]
    for options, fragment in cases:
        with pytest.raises(AgentOptionError) as refused:
            Agent(name="a", system="s", tools=(lookup,), **options)
        assert fragment in str(refused.value) and "\n" not in str(refused.value), (options, str(refused.value))


def test_an_agent_without_options_keeps_its_fingerprint_and_a_changed_option_is_named_on_resume(store, tmp_path):
    plain = Agent(name="plain", system="s")
    assert "options" not in plain.describe()  # runs recorded before options existed still match
    ref = agent_file(tmp_path)
    result = run_brief(store, model="offline", agent=load_agent(ref), agent_ref=ref, max_steps=1, user_msg="Lisbon?")
    (tmp_path / "forecaster.py").write_text(AGENT_FILE.replace("budget_tokens\": 2048", "budget_tokens\": 4096")
                                            .replace("BUDGET", ""))
    for name in [m for m in sys.modules if m.startswith("dayflow_agent_")]:  # as a new process would read it
        del sys.modules[name]
    with pytest.raises(AgentChanged, match="option thinking"):
        resume(result.run_id, store=store, max_steps=3)


def test_the_cli_refuses_a_bad_option_in_one_line_and_show_prints_the_options(db_path, tmp_path):
    db = str(db_path)
    env = cli_env()
    ref = agent_file(tmp_path)
    done = dayflow("run", ref, "Weather in Lisbon?", db=db, env=env)
    assert done.returncode == 0, text(done.stderr)
    runs = json.loads(text(dayflow("runs", "--json", db=db, env=env).stdout))
    shown = " ".join(text(dayflow("show", runs[0]["id"], db=db, env=env).stdout).split())  # wrapped at 80
    assert "agent forecaster: max_tokens 20000 · thinking enabled (2048)" in shown
    assert "web_search (max 3)" in shown and "betas context-1m-2025-08-07" in shown
    before = fingerprint(db_path)
    bad = agent_file(tmp_path, budget=', temperature=0.3')
    refused = dayflow("run", bad, "again", db=db, env=env)
    err = assert_one_error_line(refused, "temperature cannot be set with thinking on")
    assert refused.returncode == 1 and "forecaster" in err
    assert fingerprint(db_path) == before
