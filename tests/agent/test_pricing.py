"""Dollars from tokens: the price library's rates, overrides, unknown models, tiers, and the price cache."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from genai_prices import Usage as LibraryUsage
from genai_prices import calc_price

from dayflow_tui.money import cost as costs, rates as pricing
from dayflow_tui.money.cost import Cost, Usage
from dayflow_tui.store import StepRecord

from ..conftest import dayflow_cmd

# Splits of one call's input (whole input, cache writes, cache reads) and its output.
SPLITS = [Usage(10_000, 2_000, 5_000, 700), Usage(1_000, 1_000, 0, 50), Usage(80_000, 500, 79_000, 4_096),
          Usage(3_000, 0, 0, 0), Usage(250_000, 10_000, 230_000, 1_000)]


def _library_models():
    return pricing.library_models()


def _dates(prices: pricing.ModelPrices) -> list[date]:
    starts = [p.start for p in prices.periods if p.start is not None]
    return [date(2025, 1, 1)] + [d - timedelta(days=1) for d in starts] + starts + [date(2026, 12, 3)]


def test_every_anthropic_model_of_the_library_is_priced_as_the_library_prices_it():
    """For each model the library knows, several token splits and each price period: our total is theirs."""
    models = _library_models()
    assert len(models) >= 20, "the library's Anthropic table came back nearly empty"
    families = {model_id.split("-")[1] for model_id, _name, _p in models if model_id.startswith("claude-")}
    assert {"sonnet", "haiku", "opus"} <= families
    checked = 0
    for model_id, _name, prices in models:
        for day in _dates(prices):
            when = datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc) + timedelta(hours=12)
            for usage in SPLITS:
                ours = costs.cost_of(prices, usage, day)
                theirs = calc_price(LibraryUsage(input_tokens=usage.input_tokens,
                                                 cache_write_tokens=usage.cache_write_tokens,
                                                 cache_read_tokens=usage.cache_read_tokens,
                                                 output_tokens=usage.output_tokens),
                                    model_id, provider_id="anthropic", genai_request_timestamp=when)
                assert ours.total == theirs.total_price, (model_id, day, usage)
                assert ours.input == theirs.input_price and ours.output == theirs.output_price, (model_id, usage)
                checked += 1
    assert checked > 200


@pytest.mark.parametrize("model, rates", [
    ("claude-sonnet-4-5", ("3", "3.75", "0.3", "15")),
    ("claude-sonnet-4-5-20250929", ("3", "3.75", "0.3", "15")),
    ("claude-haiku-4-5", ("1", "1.25", "0.1", "5")),
    ("claude-opus-4-1", ("15", "18.75", "1.5", "75")),
    ("claude-3-5-haiku-latest", ("0.8", "1", "0.08", "4")),
])
def test_cache_writes_and_reads_are_priced_separately(model, rates):
    """Anthropic's published rates per million tokens, split as billed: uncached, cache write, cache read, output."""
    uncached_rate, write_rate, read_rate, output_rate = (Decimal(r) for r in rates)
    cost = costs.price_call(model, Usage(10_000, 2_000, 5_000, 700), date(2026, 12, 3))
    million = Decimal(1_000_000)
    assert cost == Cost(uncached_input=3_000 * uncached_rate / million, cache_write=2_000 * write_rate / million,
                        cache_read=5_000 * read_rate / million, output=700 * output_rate / million)
    # The same tokens all uncached cost more than with reads, less than all written.
    as_input = costs.price_call(model, Usage(10_000, 0, 0, 700), date(2026, 12, 3))
    as_reads = costs.price_call(model, Usage(10_000, 0, 10_000, 700), date(2026, 12, 3))
    as_writes = costs.price_call(model, Usage(10_000, 10_000, 0, 700), date(2026, 12, 3))
    assert as_reads.total < as_input.total < as_writes.total


def test_a_long_request_pays_the_tier_rate_on_every_token_but_a_sum_of_short_ones_does_not():
    prices = pricing.lookup("claude-sonnet-4-5")
    assert prices.tier_starts == (200_000,)
    short = costs.cost_of(prices, Usage(150_000, 0, 0, 0), date(2026, 12, 3))
    long = costs.cost_of(prices, Usage(300_000, 0, 0, 0), date(2026, 12, 3))
    assert short.total == Decimal("0.45") and long.total == Decimal("1.8")  # $3 vs $6 per million
    two_short = costs.cost_of(prices, Usage(300_000, 0, 0, 0), date(2026, 12, 3), request_size=150_000)
    assert two_short.total == 2 * short.total


def test_unknown_models_have_no_price():
    for model in ("gpt-4o", "claude-nonexistent-9", "my-fine-tune", "", None):
        assert pricing.lookup(model) is None
        assert costs.price_call(model, Usage(1000, 0, 0, 10)) is None
    assert costs.add_costs([Cost(output=Decimal(1)), None]) is None  # never a partial sum
    assert costs.format_usd(None) == "price unknown"


def test_the_offline_model_is_free_unless_priced_in_settings(monkeypatch):
    assert costs.price_call("offline", Usage(5000, 100, 4000, 300)).total == 0
    monkeypatch.setenv("DAYFLOW_PRICES", json.dumps({"offline": {"input": 3, "output": 15}}))
    cost = costs.price_call("offline", Usage(5000, 100, 4000, 300))
    # Cache rates left out follow Anthropic's multipliers: writes 1.25x, reads 0.1x the input rate.
    assert cost == Cost(Decimal("0.0027"), Decimal("0.000375"), Decimal("0.0012"), Decimal("0.0045"))


def test_a_settings_file_price_wins_for_that_model_and_its_dated_ids(tmp_path, monkeypatch):
    config = tmp_path / "config.toml"
    config.write_text('[prices."claude-sonnet-4-5"]\ninput = 2\noutput = 10\ncache_write = 2.5\ncache_read = 0.2\n'
                      '[prices."acme-internal"]\ninput = "1.5"\noutput = 6\n')
    monkeypatch.setenv("DAYFLOW_CONFIG", str(config))
    usage = Usage(10_000, 2_000, 5_000, 700)
    negotiated = Cost(Decimal("0.006"), Decimal("0.005"), Decimal("0.001"), Decimal("0.007"))
    assert costs.price_call("claude-sonnet-4-5", usage) == negotiated
    assert costs.price_call("claude-sonnet-4-5-20250929", usage) == negotiated
    assert pricing.lookup("claude-sonnet-4-5-20250929").source == 'settings file [prices."claude-sonnet-4-5"]'
    # Another model that merely starts with the name keeps the library's price.
    assert pricing.lookup("claude-sonnet-4-5-1") is None or \
        pricing.lookup("claude-sonnet-4-5-1").source.startswith("genai-prices")
    assert costs.price_call("claude-haiku-4-5", usage) == costs.cost_of(
        pricing._catalogue().get("claude-haiku-4-5"), usage)
    assert costs.price_call("acme-internal", Usage(1_000_000, 0, 0, 1_000_000)).total == Decimal("7.5")
    assert "acme-internal" in pricing.price_source().line()


@pytest.mark.parametrize("toml, message", [
    ('[prices."m"]\ninput = 3\n', 'output is missing'),
    ('[prices."m"]\ninput = -1\noutput = 2\n', 'input must be a finite amount of dollars'),
    ('[prices."m"]\ninput = 3\noutput = 2\nbatch = 1\n', "unknown price 'batch'"),
    ('[prices]\nm = 3\n', '"m" must be a table'),
    ('budget_usd = "lots"\n', 'budget_usd must be an amount of dollars'),
])
def test_a_bad_price_in_the_settings_file_is_one_line_and_exit_64(tmp_path, toml, message):
    config = tmp_path / "config.toml"
    config.write_text(toml)
    done = subprocess.run(dayflow_cmd("prices"), capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DAYFLOW_CONFIG": str(config)})
    assert done.returncode == 64, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_dayflow_prices_names_the_source_its_date_and_the_rates(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[prices."acme-internal"]\ninput = 1.5\noutput = 6\n')
    env = {**os.environ, "DAYFLOW_CONFIG": str(config)}
    done = subprocess.run(dayflow_cmd("prices"), capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert f"genai-prices {pricing.PINNED_VERSION} (price data released {pricing.PINNED_RELEASED})" in done.stdout
    lines = {line.split()[0]: line.split() for line in done.stdout.splitlines()[4:] if line.startswith("  ")}
    assert lines["claude-sonnet-4-5"][1:6] == ["3+", "3.75+", "6+", "0.3+", "15+"]
    assert lines["acme-internal"][1:6] == ["1.5", "1.875", "3", "0.15", "6"]
    as_json = json.loads(subprocess.run(dayflow_cmd("prices", "--json"), capture_output=True, text=True,
                                        timeout=60, env=env).stdout)
    assert as_json["version"] == pricing.PINNED_VERSION and as_json["released"] == pricing.PINNED_RELEASED
    haiku = next(m for m in as_json["models"] if m["model"] == "claude-haiku-4-5")
    assert (haiku["input"], haiku["cache_write"], haiku["cache_read"], haiku["output"]) == ("1", "1.25", "0.1", "5")


def _step(n: int, tokens: tuple[int, int, int, int], model: str) -> StepRecord:
    total, write, read, out = tokens
    return StepRecord(n=n, stop_reason="tool_use", assistant=[{"type": "text", "text": "x"}], input_tokens=total,
                      cache_creation_input_tokens=write, cache_read_input_tokens=read, output_tokens=out,
                      model=model)


def test_a_runs_cost_is_the_sum_of_its_calls_each_at_its_own_tier(store):
    """Aggregated per model and day, yet a request past a tier is priced alone; an unknown model: no total."""
    calls = [(150_000, 150_000, 0, 500), (160_000, 10_000, 150_000, 800)]
    run = store.create_run("t", model="claude-sonnet-4-5")
    for n, tokens in enumerate(calls, 1):
        store.append_step(run.id, _step(n, tokens, "claude-sonnet-4-5-20250929"))
    expected = costs.add_costs(costs.price_call("claude-sonnet-4-5", Usage(*t)) for t in calls)
    assert costs.run_cost(store, run.id).cost == expected
    assert expected.total == Decimal("0.5625") + Decimal("0.0075") + Decimal("0.03") + Decimal("0.045") + \
        Decimal("0.0195")

    store.append_step(run.id, _step(3, (210_000, 0, 0, 100), "claude-sonnet-4-5-20250929"))  # past the tier
    with_long = costs.run_cost(store, run.id)
    assert with_long.cost == expected + costs.price_call("claude-sonnet-4-5", Usage(210_000, 0, 0, 100))
    assert with_long.cost.uncached_input == Decimal("1.26")  # $6 per million on all 210,000
    assert with_long.cache_hit_rate == pytest.approx(150_000 / 520_000)

    other = store.create_run("t", model="claude-sonnet-4-5")
    store.append_step(other.id, _step(1, (1000, 0, 0, 10), "claude-sonnet-4-5"))
    store.append_step(other.id, _step(2, (1000, 0, 0, 10), "mystery-model"))
    found = costs.run_costs(store, [other.id, run.id, "nope"])
    assert found[other.id].cost is None and found[other.id].unpriced_models == ("mystery-model",)
    assert found["nope"] == costs.NO_CALLS


def test_a_second_listing_reads_prices_from_the_cache_without_importing_the_library(tmp_path, db_path):
    """The library costs most of a second to import; once a model was priced, its rates come from the cache."""
    from dayflow_tui.store import open_store

    store = open_store(db_path)
    run = store.create_run("t", model="claude-haiku-4-5")
    store.append_step(run.id, _step(1, (1000, 1000, 0, 100), "claude-haiku-4-5"))
    store.close()
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "XDG_STATE_HOME": str(tmp_path / "state")}

    def listing() -> tuple[set[str], str]:
        done = subprocess.run(dayflow_cmd("runs", "--db", str(db_path)), capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
        return names, done.stdout

    first, out1 = listing()
    second, out2 = listing()
    assert "genai_prices" in first and "genai_prices" not in second
    assert "cost=$0.0018" in out1 and out1 == out2  # 1000 x $1.25 + 100 x $5, per million
    assert (tmp_path / "state" / "dayflow" / "prices-cache.json").exists()
