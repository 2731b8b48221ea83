"""The two charges genai-prices leaves out: cache writes kept for an hour (2x input) and web searches ($10 per
1,000), in a call's cost, a run's, ``dayflow spend`` and ``dayflow prices``.

Anthropic's published rates for Claude Sonnet 4.5, dollars per million tokens (the pricing page,
https://platform.claude.com/docs/en/about-claude/pricing: input $3, 5m cache writes $3.75, 1h cache writes $6,
cache hits $0.30, output $15; "Web search: $10 per 1,000 searches"), written out here by hand so the test
checks Dayflow against the table, not against itself.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from anthropic.types import Message

from dayflow_tui.agent.runs import run_brief
from dayflow_tui.money.cost import Usage, price_call, run_cost

from ..loopback_api import LoopbackAPI
from ..reliability_helpers import cli_env, dayflow, text

MODEL = "claude-sonnet-4-5"
PUBLISHED = {"input": Decimal("3"), "write_5m": Decimal("3.75"), "write_1h": Decimal("6"), "read": Decimal("0.30"),
             "output": Decimal("15"), "search": Decimal("10") / 1000}


def by_the_table(uncached, write_5m, write_1h, read, output, searches) -> Decimal:
    tokens = (uncached * PUBLISHED["input"] + write_5m * PUBLISHED["write_5m"] + write_1h * PUBLISHED["write_1h"]
              + read * PUBLISHED["read"] + output * PUBLISHED["output"]) / 1_000_000
    return tokens + searches * PUBLISHED["search"]


def test_one_call_with_hour_long_cache_writes_and_searches_costs_the_list_price():
    usage = Usage(input_tokens=10_000, cache_write_tokens=6_000, cache_read_tokens=3_000, output_tokens=500,
                  cache_write_1h_tokens=4_000, web_search_requests=2)
    cost = price_call(MODEL, usage, "2026-12-05")
    assert cost.total == by_the_table(1_000, 2_000, 4_000, 3_000, 500, 2) == Decimal("0.0629")
    assert cost.server_tools == Decimal("0.02")
    assert price_call("offline", usage).total == 0  # the offline model is free and never searches


def served(n, content, stop, usage):
    payload = {"id": f"msg_charges{n}", "type": "message", "role": "assistant", "model": MODEL, "content": content,
               "stop_reason": stop, "stop_sequence": None, "usage": usage}
    Message.model_validate(payload)  # the SDK's own type: the usage breakdown is the API's shape
    return lambda handler, body: (200, {}, payload)


def usage(uncached, write_5m, write_1h, read, output, searches):
    return {"input_tokens": uncached, "output_tokens": output, "cache_creation_input_tokens": write_5m + write_1h,
            "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h},
            "server_tool_use": {"web_search_requests": searches, "web_fetch_requests": 0}}


@pytest.fixture
def api(monkeypatch):
    with LoopbackAPI() as server:
        yield server


def test_a_runs_cost_and_spend_include_hour_long_writes_and_search_fees(db_path, api):
    calls = [(1_200, 0, 3_000, 0, 150, 0), (300, 0, 800, 3_000, 400, 3), (200, 500, 0, 3_800, 600, 1)]
    api.planned[1] = served(1, [{"type": "tool_use", "id": "toolu_ch1", "name": "read_inbox", "input": {}}],
                            "tool_use", usage(*calls[0]))
    api.planned[2] = served(2, [{"type": "tool_use", "id": "toolu_ch2", "name": "read_tasks", "input": {}}],
                            "tool_use", usage(*calls[1]))
    api.planned[3] = served(3, [{"type": "text", "text": "Brief."}], "end_turn", usage(*calls[2]))
    env = cli_env(**api.env())
    done = dayflow("brief", "--model", MODEL, db=db_path, env=env)
    assert done.returncode == 0, text(done.stderr)
    expected = sum(by_the_table(*call) for call in calls)
    spend = json.loads(text(dayflow("spend", "--json", db=db_path, env=env).stdout))
    assert Decimal(str(spend["total"]["cost_usd"])) == expected.quantize(Decimal("0.000001"))
    [row] = json.loads(text(dayflow("runs", "--json", db=db_path, env=env).stdout))
    assert Decimal(str(row["cost_usd"])) == expected.quantize(Decimal("0.000001"))
    prices = text(dayflow("prices", env=env).stdout)
    line = next(l for l in prices.splitlines() if l.split() and l.split()[0] == MODEL)
    assert [cell.rstrip("+") for cell in line.split()[1:6]] == ["3", "3.75", "6", "0.3", "15"]  # +: a long-context tier
    assert "$10 per 1,000 searches" in prices


def test_the_driver_prices_a_call_with_its_charges_as_the_stored_run_does(store, api, monkeypatch):
    for name, value in api.env().items():
        monkeypatch.setenv(name, value)
    api.planned[1] = served(1, [{"type": "text", "text": "Brief."}], "end_turn", usage(100, 0, 2_000, 0, 50, 4))
    result = run_brief(store, model=MODEL)
    assert result.cost.total == by_the_table(100, 0, 2_000, 0, 50, 4) == run_cost(store, result.run_id).total
