"""Dollars of stored runs: per step, per run, and spend over time, from the tokens each step recorded.

Costs are computed when they are shown, from the tokens, the model and the
day of each call (``pricing``), so a price override in the settings file
applies to old runs too. A run is summed from ``Store.token_groups`` (one
aggregate query for a whole page of runs); a group whose largest request
passed a price tier is priced call by call, since a tier applies per request.
A run with any call of a model that has no price has no total: "price
unknown", never a partial sum.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Iterable

from . import clock, pricing
from .errors import UsageError
from .pricing import Cost, Usage

BUILTIN_AGENT = "brief"


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
    return Usage(step.input_tokens or 0, write or 0, read or 0, step.output_tokens or 0)


def step_cost(step, model: str | None) -> Cost | None:
    """One stored call's cost; ``model`` is the step's own (the reply's), else the run's."""
    return pricing.price_call(getattr(step, "model", None) or model, step_usage(step), step.created_at)


def _group_cost(store, group) -> Cost | None:
    prices = pricing.lookup(group.model)
    if prices is None:
        return None
    starts = prices.tier_starts
    if starts and group.largest_input > starts[0]:
        # Some request of this group may have passed a tier: the tier applies per request.
        calls = [s for s in store.step_tokens(group.run_id)
                 if (s.model or group.model) == group.model and s.created_at[:10] == group.day]
        return pricing.add_costs(pricing.cost_of(prices, step_usage(s), s.created_at) for s in calls)
    usage = Usage(group.input_tokens, group.cache_write_tokens, group.cache_read_tokens, group.output_tokens)
    return pricing.cost_of(prices, usage, group.day, request_size=group.largest_input)


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
    return RunCost(pricing.add_costs(costs), calls, input_tokens, read, tuple(sorted(unpriced)))


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

SPEND_KEYS = ("agent", "model", "day")
_SPAN = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$", re.I)
_SPAN_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> str:
    """``7d``, ``24h``, ``30m``, ``2w`` ago, or a date / ISO time (UTC): the ISO time spend is counted from."""
    now = now or clock.now()
    span = _SPAN.match(text or "")
    if span:
        moment = now - timedelta(**{_SPAN_UNITS[span.group(2).lower()]: int(span.group(1))})
        return clock.iso(moment)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {text!r}: expected a span like 7d, 24h, 30m, 2w or a date like 2026-11-01") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=clock.now().tzinfo)
    return clock.iso(moment)


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
    """Spend per ``by`` (agent, model or day) on calls made at or after ``since``, and the total."""
    if by not in SPEND_KEYS:
        raise UsageError(f"--by {by!r}: expected one of {', '.join(SPEND_KEYS)}")
    groups = store.token_groups(since=since)
    agents = store.run_agents({g.run_id for g in groups}) if by == "agent" else {}

    def key_of(group) -> str:
        if by == "model":
            return group.model or "?"
        if by == "day":
            return group.day
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
    return f"{pricing.format_usd(spent)} / {pricing.format_usd(budget_usd)}"


def run_cost_json(run_cost: RunCost, budget_usd: Decimal | None = None) -> dict:
    """The cost fields of ``runs --json``."""
    cost = run_cost.cost
    return {"cost_usd": pricing.usd_number(run_cost.total),
            "cost_split_usd": cost.split_json() if cost is not None else None,
            "cache_hit_rate": None if run_cost.cache_hit_rate is None else round(run_cost.cache_hit_rate, 4),
            "budget_usd": pricing.usd_number(budget_usd),
            "unpriced_models": list(run_cost.unpriced_models)}
