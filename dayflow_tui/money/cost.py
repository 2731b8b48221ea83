"""What calls cost, in dollars: one call, a run, and spend over time, from the tokens each step recorded.

One call's cost is split the way Anthropic bills it: uncached input, cache
writes, cache reads and output, each at its own rate per million tokens
(``money.rates``). ``input_tokens`` is the whole input of a call (uncached +
cache writes + cache reads), as everywhere in Dayflow; the uncached part is
what is left.

Costs of stored runs are computed when they are shown, from the tokens, the
model and the day of each call, so a price override in the settings file
applies to old runs too. A run is summed from ``Store.token_groups`` (one
aggregate query for a whole page of runs); a group whose largest request
passed a price tier is priced call by call, since a tier applies per request.
A run with any call of a model that has no price has no total: "price
unknown", never a partial sum.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Iterable

from ..config.errors import UsageError
from . import rates
from ..config.settings import OFFLINE_MODEL
from .rates import MILLION, ZERO, ModelPrices

BUILTIN_AGENT = "brief"


@dataclass(frozen=True)
class Usage:
    """One call's tokens as the API reports them (``input_tokens``: the whole input)."""

    input_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    cache_write_1h_tokens: int = 0  # of cache_write_tokens, the part kept for an hour (billed 2x input)
    web_search_requests: int = 0  # billed per search, apart from tokens

    @property
    def uncached_input_tokens(self) -> int:
        return max(self.input_tokens - self.cache_write_tokens - self.cache_read_tokens, 0)


@dataclass(frozen=True)
class Cost:
    """Dollars, split as Anthropic bills them."""

    uncached_input: Decimal = ZERO
    cache_write: Decimal = ZERO
    cache_read: Decimal = ZERO
    output: Decimal = ZERO
    server_tools: Decimal = ZERO  # web search fees

    @property
    def total(self) -> Decimal:
        return self.uncached_input + self.cache_write + self.cache_read + self.output + self.server_tools

    @property
    def input(self) -> Decimal:
        return self.uncached_input + self.cache_write + self.cache_read

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.uncached_input + other.uncached_input, self.cache_write + other.cache_write,
                    self.cache_read + other.cache_read, self.output + other.output,
                    self.server_tools + other.server_tools)

    def split_json(self) -> dict[str, float]:
        return {"uncached_input": usd_number(self.uncached_input), "cache_write": usd_number(self.cache_write),
                "cache_read": usd_number(self.cache_read), "output": usd_number(self.output),
                "web_search": usd_number(self.server_tools)}


def add_costs(costs: Iterable[Cost | None]) -> Cost | None:
    """The sum; None (unknown) when any part is unknown: a partial sum would be a wrong number."""
    total = Cost()
    for cost in costs:
        if cost is None:
            return None
        total = total + cost
    return total


def usd_number(amount: Decimal | None) -> float | None:
    """For JSON: dollars to the micro-dollar."""
    return None if amount is None else float(round(amount, 6))


def format_usd(amount: "Decimal | Cost | None", *, unknown: str = "price unknown") -> str:
    """``$0.50``, ``$0.0042``, ``$0.1234``, ``$12.34``: cents when the amount is whole cents (a budget),
    else four decimals under a dollar, so a cheap step is not $0.00 and spent is not rounded up to a budget."""
    if isinstance(amount, Cost):
        amount = amount.total
    if amount is None:
        return unknown
    if amount >= 1 or amount == amount.quantize(Decimal("0.01")):
        return f"${amount:,.2f}"
    if amount < Decimal("0.00005"):
        return "<$0.0001"
    return f"${amount:.4f}"


# -- pricing a call ------------------------------------------------------------------------------


def cost_of(prices: ModelPrices, usage: Usage, at: datetime | date | str | None = None, *,
            cache_ttl: str = "5m", request_size: int | None = None) -> Cost:
    """``usage`` at ``prices``' rates on the day ``at`` (UTC); cache writes at the lifetime the request asked for.

    A price tier is chosen by one request's whole input: ``usage``'s own, or
    ``request_size`` when ``usage`` sums several calls (the largest of them).
    """
    in_force = prices.rates_on(rates.day_of(at))
    size = usage.input_tokens if request_size is None else request_size
    input_rate = in_force["input"].at(size)

    def rate(key: str) -> Decimal:
        found = in_force.get(key)
        return found.at(size) if found is not None else input_rate

    # Writes kept for an hour cost twice the input rate (the library may lack the rate: Anthropic's factor).
    hour_rate = in_force["cache_write_1h"].at(size) if "cache_write_1h" in in_force else (
        input_rate * rates.CACHE_WRITE_1H_FACTOR)
    hour = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    if cache_ttl == "1h" and not hour:
        hour = usage.cache_write_tokens  # a prediction for a request asking for the hour: no breakdown yet
    searches = ZERO if prices.model == OFFLINE_MODEL else (
        rates.WEB_SEARCH_USD_PER_1000 * usage.web_search_requests / 1000)
    return Cost(uncached_input=input_rate * usage.uncached_input_tokens / MILLION,
                cache_write=(rate("cache_write") * (usage.cache_write_tokens - hour) + hour_rate * hour) / MILLION,
                cache_read=rate("cache_read") * usage.cache_read_tokens / MILLION,
                output=in_force["output"].at(size) * usage.output_tokens / MILLION, server_tools=searches)


def price_call(model: str | None, usage: Usage, at: datetime | date | str | None = None) -> Cost | None:
    """What one call of ``model`` cost (None: no price is known for that model)."""
    prices = rates.lookup(model)
    return None if prices is None else cost_of(prices, usage, at)


# -- stored runs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCost:
    """What a run's calls cost so far."""

    cost: Cost | None  # None: some call's model has no price
    calls: int
    input_tokens: int
    cache_read_tokens: int
    unpriced_models: tuple[str, ...] = ()

    @property
    def total(self) -> Decimal | None:
        return None if self.cost is None else self.cost.total

    @property
    def cache_hit_rate(self) -> float | None:
        """The share of input tokens read from the prompt cache (None: no input yet)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else None


NO_CALLS = RunCost(Cost(), 0, 0, 0)


def step_usage(step) -> Usage:
    """A ``steps`` row's (or a ``StepView``'s) tokens."""
    write = getattr(step, "cache_creation_input_tokens", None)
    read = getattr(step, "cache_read_input_tokens", None)
    if write is None:
        write, read = getattr(step, "cache_write_tokens", 0), getattr(step, "cache_read_tokens", 0)
    return Usage(step.input_tokens or 0, write or 0, read or 0, step.output_tokens or 0,
                 getattr(step, "cache_write_1h_tokens", 0) or 0, getattr(step, "web_search_requests", 0) or 0)


def step_cost(step, model: str | None, prices: dict | None = None) -> Cost | None:
    """One stored call's cost; ``model`` is the step's own (the reply's), else the run's.

    ``prices``: a caller pricing many steps at once keeps the models' prices here (each lookup reads the
    settings, which hash the environment: most of a 5,000-step transcript's pricing time).
    """
    name = getattr(step, "model", None) or model
    if prices is None:
        return price_call(name, step_usage(step), step.created_at)
    if name not in prices:
        prices[name] = rates.lookup(name)
    found = prices[name]
    return None if found is None else cost_of(found, step_usage(step), step.created_at)


def _group_cost(store, group) -> Cost | None:
    prices = rates.lookup(group.model)
    if prices is None:
        return None
    starts = prices.tier_starts
    if starts and group.largest_input > starts[0]:
        # Some request of this group may have passed a tier: the tier applies per request.
        calls = [s for s in store.step_tokens(group.run_id)
                 if (s.model or group.model) == group.model and s.created_at[:10] == group.day]
        return add_costs(cost_of(prices, step_usage(s), s.created_at) for s in calls)
    usage = Usage(group.input_tokens, group.cache_write_tokens, group.cache_read_tokens, group.output_tokens,
                  group.cache_write_1h_tokens, group.web_search_requests)
    return cost_of(prices, usage, group.day, request_size=group.largest_input)


def _sum_groups(store, groups: Iterable) -> RunCost:
    costs, unpriced = [], set()
    calls = input_tokens = read = 0
    for group in groups:
        cost = _group_cost(store, group)
        if cost is None:
            unpriced.add(group.model or "?")
        costs.append(cost)
        calls += group.calls
        input_tokens += group.input_tokens
        read += group.cache_read_tokens
    return RunCost(add_costs(costs), calls, input_tokens, read, tuple(sorted(unpriced)))


def run_costs(store, run_ids: Iterable[str]) -> dict[str, RunCost]:
    """Each run's cost (runs without a committed call cost nothing)."""
    ids = list(dict.fromkeys(run_ids))
    by_run: dict[str, list] = defaultdict(list)
    for group in store.token_groups(ids):
        by_run[group.run_id].append(group)
    return {run_id: _sum_groups(store, by_run[run_id]) if run_id in by_run else NO_CALLS for run_id in ids}


def run_cost(store, run_id: str) -> RunCost:
    return run_costs(store, [run_id])[run_id]


# -- spend over time -------------------------------------------------------------------------------

SPEND_KEYS = ("agent", "model", "day", "source")


@dataclass(frozen=True)
class SpendRow:
    key: str
    runs: int
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cost: Cost | None  # None: some call of these had no price
    priced: Cost  # the part that has a price
    unpriced_calls: int


def spend(store, *, since: str | None = None, by: str = "model") -> tuple[list[SpendRow], SpendRow]:
    """Spend per ``by`` (agent, model, day or source) on calls made at or after ``since``, and the total."""
    if by not in SPEND_KEYS:
        raise UsageError(f"--by {by!r}: expected one of {', '.join(SPEND_KEYS)}")
    groups = store.token_groups(since=since)
    agents = store.run_agents({g.run_id for g in groups}) if by == "agent" else {}

    def key_of(group) -> str:
        if by == "model":
            return group.model or "?"
        if by == "day":
            return group.day
        if by == "source":  # Dayflow's own runs, imported Claude Code sessions, collected OpenTelemetry runs
            return group.source
        return agents.get(group.run_id) or BUILTIN_AGENT

    buckets: dict[str, list] = defaultdict(list)
    for group in groups:
        buckets[key_of(group)].append(group)
    rows = [_spend_row(store, key, members) for key, members in buckets.items()]
    rows.sort(key=lambda r: r.key if by == "day" else (-(r.priced.total), r.key))
    return rows, _spend_row(store, "total", groups)


def _spend_row(store, key: str, groups: list) -> SpendRow:
    priced = Cost()
    unpriced_calls = 0
    known = True
    for group in groups:
        cost = _group_cost(store, group)
        if cost is None:
            known = False
            unpriced_calls += group.calls
        else:
            priced = priced + cost
    return SpendRow(key=key, runs=len({g.run_id for g in groups}), calls=sum(g.calls for g in groups),
                    input_tokens=sum(g.input_tokens for g in groups),
                    output_tokens=sum(g.output_tokens for g in groups),
                    cache_read_tokens=sum(g.cache_read_tokens for g in groups),
                    cost=priced if known else None, priced=priced, unpriced_calls=unpriced_calls)


def since_label(since: str | None) -> str:
    return "all time" if since is None else f"since {since[:16].replace('T', ' ')} UTC"


# -- how a run's money reads (CLI and dashboard alike) ------------------------------------------------


def cache_text(run_cost: RunCost) -> str:
    """The run's cache hit rate: ``64%`` of its input read from the cache, or ``—`` before any call."""
    rate = run_cost.cache_hit_rate
    return "—" if rate is None else f"{rate:.0%}"


def budget_text(budget_usd: Decimal | None, spent: Decimal | None) -> str | None:
    """``$0.1234 / $0.50`` (spent / budget), or None for a run without a dollar budget."""
    if budget_usd is None:
        return None
    return f"{format_usd(spent)} / {format_usd(budget_usd)}"


def run_cost_json(run_cost: RunCost, budget_usd: Decimal | None = None) -> dict:
    """The cost fields of ``runs --json``."""
    cost = run_cost.cost
    return {"cost_usd": usd_number(run_cost.total),
            "cost_split_usd": cost.split_json() if cost is not None else None,
            "cache_hit_rate": None if run_cost.cache_hit_rate is None else round(run_cost.cache_hit_rate, 4),
            "budget_usd": usd_number(budget_usd),
            "unpriced_models": list(run_cost.unpriced_models)}
