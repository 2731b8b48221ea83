"""A run's limits, checked before every paid call: its steps, its tokens, its dollars.

The driver asks ``limit_reached`` (steps and tokens) and ``dollar_verdict``
(dollars) before each call; ``check_dollar_budget`` refuses, before anything
is written, a dollar budget that could never be checked. ``Spend`` is the
whole run's dollars as the driver goes, and ``previous_call`` what the run's
last paid call sent (the prediction of the next call's cache state needs it).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from ..config.errors import UsageError
from ..money import estimate, rates
from ..money.cost import Cost, add_costs, format_usd, run_costs
from ..store import Store, step_blocks
from .request import prepare_messages


@dataclass
class Spend:
    """The whole run's dollars as the driver goes: what it found committed, and what it pays."""

    replayed: Cost | None
    paid: Cost = field(default_factory=Cost)
    paid_known: bool = True
    largest_output: int = 0  # the run's largest reply so far (the budget's guess of the next one)
    previous: estimate.PreviousCall | None = None

    @property
    def total(self) -> Cost | None:
        if self.replayed is None or not self.paid_known:
            return None
        return self.replayed + self.paid

    def add(self, cost: Cost | None) -> None:
        if cost is None:
            self.paid_known = False
        else:
            self.paid = self.paid + cost

    @property
    def paid_or_none(self) -> Cost | None:
        return self.paid if self.paid_known else None


@dataclass(frozen=True)
class Verdict:
    """The dollar budget's answer before a call: stop (why), or go with at most ``max_tokens`` of reply."""

    stop: str | None = None
    max_tokens: int | None = None


def limit_reached(run, n: int, spent_in: int, spent_out: int) -> str | None:
    """Why step ``n`` may not be called (the step limit, the token budget), or None."""
    if n > run.max_steps:
        return f"stopped at the step limit ({run.max_steps} step{'' if run.max_steps == 1 else 's'})"
    if run.budget_tokens is not None and spent_in + spent_out >= run.budget_tokens:
        return f"token budget reached: {spent_in + spent_out:,} of {run.budget_tokens:,} spent"
    return None


def dollar_verdict(budget: Decimal, spent: Cost | None, call: estimate.NextCall) -> Verdict:
    """May the run make ``call`` and stay within ``budget`` dollars?

    It stops before the call when what the run has spent plus the call's likely
    cost (its input under the judged cache state, a reply as long as the run's
    longest) would pass the budget. A call that may go ahead gets a reply cap
    (``max_tokens``) that its cost cannot pass the budget under, whatever the
    reply, pricing the input as if the cache were cold: the run never makes a
    call that could take it past the budget.
    """
    if spent is None or call.prices is None:
        return Verdict(stop=f"dollar budget cannot be checked: no price for model {call.model[:80]!r} "
                       f'(add [prices."{call.model[:80]}"] to the settings file)')
    likely = call.likely_cost
    assert likely is not None
    shown = (f"spent {format_usd(spent.total)} of {format_usd(budget)}; the next call "
             f"({call.input_tokens:,} input tokens, cache {'warm' if call.warm else 'cold'})")
    if spent.total + likely.total > budget:
        return Verdict(stop=f"dollar budget reached: {shown} would cost about "
                       f"{format_usd(likely.total)}")
    cold_input = call.cost(warm=False, output_tokens=0)
    rate = call.output_rate()
    assert cold_input is not None and rate is not None
    room = budget - spent.total - cold_input.total
    cap = call.max_output_tokens if rate == 0 else min(int(room / rate), call.max_output_tokens)
    if cap < call.expected_output_tokens:
        return Verdict(stop=f"dollar budget reached: {shown} leaves room for {max(cap, 0):,} reply tokens "
                       f"if the cache is cold, fewer than the {call.expected_output_tokens:,} expected")
    return Verdict(max_tokens=cap if cap < call.max_output_tokens else None)


class TreeBudget:
    """The dollar budget of a tree of runs (a parent and its subagents' runs): the root's ``budget_usd``,
    shared. Every run of the tree is judged, before each call, on what the whole tree has committed plus
    what calls in flight in this process may still cost (each reserved at its worst: the reply cap under a
    cold cache), so children side by side cannot together pass it.
    """

    def __init__(self, store: Store, root: Any, budget: Decimal):
        self.store = store
        self.root_id = root.id
        self.budget = budget

    def spent(self) -> Cost | None:
        """What the tree's runs have committed (None: a call of theirs has no price)."""
        ids = [self.root_id] + [child.id for child in self.store.runs_below(self.root_id)]
        return add_costs(cost.cost for cost in run_costs(self.store, ids).values())

    def left(self) -> Decimal | None:
        spent = self.spent()
        with _LOCK:
            return None if spent is None else self.budget - spent.total - _reserved(self.root_id)

    def judge(self, call: estimate.NextCall) -> tuple[Verdict, int | None]:
        """The verdict on ``call`` for the whole tree, and (when it may go) the ticket of its reservation."""
        spent = self.spent()
        with _LOCK:
            held = _reserved(self.root_id)
            verdict = dollar_verdict(self.budget, None if spent is None else spent + Cost(output=held), call)
            if verdict.stop is not None:
                return Verdict(stop=verdict.stop.replace("dollar budget reached", "the tree's dollar budget "
                                                         "reached", 1)), None
            worst = call.cost(warm=False, output_tokens=verdict.max_tokens or call.max_output_tokens)
            ticket = next(_TICKETS)
            _RESERVED.setdefault(self.root_id, {})[ticket] = worst.total if worst is not None else Decimal(0)
            return verdict, ticket

    def settle(self, ticket: int | None) -> None:
        """The call is over (its reply committed, or no reply): its reservation goes."""
        if ticket is None:
            return
        with _LOCK:
            held = _RESERVED.get(self.root_id, {})
            held.pop(ticket, None)
            if not held:
                _RESERVED.pop(self.root_id, None)


_LOCK = threading.Lock()
_RESERVED: dict[str, dict[int, Decimal]] = {}  # tree root -> the calls in flight in this process, at their worst
_TICKETS = itertools.count(1)


def _reserved(root_id: str) -> Decimal:
    return sum(_RESERVED.get(root_id, {}).values(), Decimal(0))


def tree_budget(store: Store, run: Any, *, alone_too: bool = False) -> TreeBudget | None:
    """The dollar budget shared by ``run``'s tree, when it is a subagent's run or has subagents (or
    ``alone_too``: is about to have one) and its root has a budget; None otherwise (a run alone keeps to its
    own ``budget_usd`` as before)."""
    root = run
    while root.parent_id is not None and root.parent_call_id is not None:
        root = store.get_run(root.parent_id)
    if root.budget_usd is None:
        return None
    if root is run and not alone_too and not store.subagent_runs(run.id):
        return None
    return TreeBudget(store, root, Decimal(root.budget_usd))


def check_dollar_budget(model: str, budget_usd: Decimal | None) -> None:
    """A dollar budget on a model without a price could never be checked: refused before anything is written."""
    if budget_usd is not None and rates.lookup(model) is None:
        raise UsageError(f"--budget-usd: no price is known for model {model[:80]!r}, so a dollar budget cannot be "
                         f'checked (add [prices."{model[:80]}"] with input and output to the settings file)')


def previous_call(store: Store, run, history: list[dict]) -> estimate.PreviousCall | None:
    """The run's last paid call as the prediction needs it: what it sent, its tokens, when.

    ``history`` is the message list rebuilt from every step; the last call sent
    what preceded its own reply, compacted as the run's setting compacts it.
    """
    step = store.step_at(run.id, run.step_count) if run.step_count else None
    if step is None:
        return None
    replies = [i for i, message in enumerate(history) if message.get("role") == "assistant"]
    # The history holds the last reply unless it has no content or its tools have not run yet.
    assistant = step_blocks(step, "assistant") or []
    pending = step.tool_results is None and any(b.get("type") == "tool_use" for b in assistant)
    held = bool(assistant) and not pending and bool(replies)
    sent = prepare_messages(history[:replies[-1]] if held else history, run.compact_at)
    try:
        at = datetime.fromisoformat(step.created_at.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        at = None
    return estimate.PreviousCall(sent.messages, sent.est_after, step.input_tokens, step.output_tokens, at)
