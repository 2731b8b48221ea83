"""Token sums for what runs cost: the store's side of ``dayflow_tui.money.cost`` (prices are not its job)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from peewee import SQL, fn

from ..models import Run, Step
from ..retry import store_call

if TYPE_CHECKING:
    from ..handle import StoreHandle


@dataclass(frozen=True)
class TokenGroup:
    """Tokens of a run's calls to one model on one UTC day (``Store.token_groups``)."""

    run_id: str
    model: str | None
    day: str  # YYYY-MM-DD
    input_tokens: int  # the whole input: uncached + cache writes + cache reads
    cache_write_tokens: int
    cache_read_tokens: int
    output_tokens: int
    calls: int
    largest_input: int
    cache_write_1h_tokens: int = 0  # of cache_write_tokens, the part kept for an hour
    web_search_requests: int = 0
    source: str = "dayflow"  # the run's source: dayflow, claude-code, otel (``spend --by source``)


@store_call
def token_groups(store: StoreHandle, run_ids: Iterable[str] | None = None, *,
                 since: str | None = None) -> list[TokenGroup]:
    """Steps' tokens summed per (run, model, UTC day): what costs are computed from.

    Prices depend on the model and the day a call was made, so those are
    the groups. ``largest_input`` (the biggest single request) tells when a
    price tier may have applied to some calls, which are then priced one by
    one. ``run_ids`` limits the runs, ``since`` (an ISO time) the steps.
    """
    day = fn.SUBSTR(Step.created_at, 1, 10)
    model = fn.COALESCE(Step.model, Run.model)
    query = (Step.select(Step.run.alias("run_id"), model.alias("model"), day.alias("day"),
                         fn.SUM(Step.input_tokens).alias("input_tokens"),
                         fn.SUM(Step.cache_creation_input_tokens).alias("cache_write_tokens"),
                         fn.SUM(Step.cache_read_input_tokens).alias("cache_read_tokens"),
                         fn.SUM(Step.output_tokens).alias("output_tokens"),
                         fn.SUM(Step.cache_write_1h_tokens).alias("cache_write_1h_tokens"),
                         fn.SUM(Step.web_search_requests).alias("web_search_requests"),
                         fn.COUNT(Step.n).alias("calls"), fn.MAX(Step.input_tokens).alias("largest_input"),
                         fn.MAX(Run.source).alias("source"))  # one run, one source: MAX only names it
             .join(Run, on=(Step.run == Run.id))
             # An imported session's prompts and markers are steps without a model call (no tokens): not calls.
             .where((Run.source == "dayflow") | ~Step.stop_reason.startswith("claude-code:")
                    | Step.stop_reason.is_null())
             # By position: PostgreSQL would see SUBSTR's bound arguments as a different expression.
             .group_by(SQL("1"), SQL("2"), SQL("3")))
    if run_ids is not None:
        ids = list(run_ids)
        if not ids:
            return []
        query = query.where(Step.run.in_(ids))
    else:
        # Money spent: a fork's copied steps (1..forked_at) were paid for once, by its parent.
        query = query.where(Run.forked_at.is_null() | (Step.n > Run.forked_at))
    if since is not None:
        query = query.where(Step.created_at >= since)
    return [TokenGroup(run_id=row["run_id"], model=row["model"], day=row["day"],
                       input_tokens=int(row["input_tokens"] or 0),
                       cache_write_tokens=int(row["cache_write_tokens"] or 0),
                       cache_read_tokens=int(row["cache_read_tokens"] or 0),
                       output_tokens=int(row["output_tokens"] or 0), calls=int(row["calls"] or 0),
                       largest_input=int(row["largest_input"] or 0),
                       cache_write_1h_tokens=int(row["cache_write_1h_tokens"] or 0),
                       web_search_requests=int(row["web_search_requests"] or 0),
                       source=row["source"] or "dayflow")
            for row in query.dicts()]


@store_call
def step_tokens(store: StoreHandle, run_id: str) -> list[Step]:
    """Each step's tokens, model and time, nothing else (pricing calls one by one)."""
    return list(Step.select(Step.run, Step.n, Step.input_tokens, Step.cache_creation_input_tokens,
                            Step.cache_read_input_tokens, Step.output_tokens, Step.model, Step.created_at,
                            Step.cache_write_1h_tokens, Step.web_search_requests)
                .where(Step.run == run_id).order_by(Step.n))


@store_call
def run_agents(store: StoreHandle, run_ids: Iterable[str]) -> dict[str, str]:
    """The agent of each run, where runs record one (a store without agents: empty)."""
    agent = Run._meta.fields.get("agent")
    ids = list(run_ids)
    if agent is None or not ids:
        return {}
    return {row.id: getattr(row, "agent") for row in Run.select(Run.id, agent).where(Run.id.in_(ids))
            if getattr(row, "agent", None)}
