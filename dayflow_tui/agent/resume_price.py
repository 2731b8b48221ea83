"""The price of a resume before you pay: what the next call of an unfinished run will send and cost.

``dayflow resume --dry-run`` prints it and the dashboard shows it under its
Resume button. Nothing here buys a reply: the request is built exactly as
the loop would build it, its size is counted by the API's free token-count
endpoint when a key is set (estimated otherwise), and the cache is judged
by the time since the run's last call (``estimate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from ..costs import RunCost, run_cost
from ..redaction import redacted_line
from ..store import Store, step_blocks
from . import estimate
from .loop import MAX_TOKENS, OFFLINE_MODEL, build_request, make_client, prepare_messages, previous_call
from .messages import messages_from


@dataclass(frozen=True)
class ResumeEstimate:
    run_id: str
    call: estimate.NextCall
    spent: RunCost  # the committed steps: paid once, not paid again by a resume
    pending_tools: int  # tool calls of the last step that a resume runs before its call (no call for them)
    count_error: str | None = None  # why the API's count could not be had (the estimate stands)
    budget_usd: Decimal | None = None  # the run's dollar budget

    def line(self) -> str:
        """One line: what the next call likely costs, why (the cache), and what it would cost otherwise."""
        from ..pricing import format_usd

        call = self.call
        warm, cold = call.warm_cost, call.cold_cost
        size = f"{call.input_tokens:,} tokens ({call.size_note()})"
        if self.pending_tools:
            size += f" + results of {self.pending_tools} tool call(s)"
        if warm is None or cold is None:
            return f"next call: price unknown for {call.model} · {size}"
        if call.ttl is None or call.seconds_since_last is None:
            return f"next call ≈ {format_usd(cold.total)}, cache cold ({call.cache_note().split(': ', 1)[-1]}) · {size}"
        since = _since(call)
        if call.warm:
            return (f"next call ≈ {format_usd(warm.total)}, cache warm ({since} < {call.ttl}); "
                    f"{format_usd(cold.total)} if cold · {size}")
        return (f"next call ≈ {format_usd(cold.total)}, cache cold ({since} > {call.ttl}); "
                f"{format_usd(warm.total)} if warm · {size}")


def _since(call: estimate.NextCall) -> str:
    return f"last call {estimate.duration(call.seconds_since_last or 0)} ago"


def resume_estimate(store: Store, run_id: str, *, count: bool = True, client=None) -> ResumeEstimate:
    """The next call of ``run_id``, priced; ``count``: ask the API for the exact size when a key is set.

    Reads only; makes no model call and writes nothing.
    """
    from .. import settings

    run = store.get_run(run_id)
    steps = store.replay_steps(run.id)
    history = messages_from(run, steps)
    previous = previous_call(store, run, history)
    pending = 0
    if steps and steps[-1].tool_results is None:
        last = step_blocks(steps[-1], "assistant") or []
        pending = sum(1 for b in last if b.get("type") == "tool_use")
        if pending:
            # The resume runs these tools first; the next call sends their turn and its results, whose size is
            # not known before they run: empty results stand in (the request stays one the API accepts).
            results = [{"type": "tool_result", "tool_use_id": b.get("id"), "content": ""}
                       for b in last if b.get("type") == "tool_use"]
            history = history + [{"role": "assistant", "content": last}, {"role": "user", "content": results}]
    prepared = prepare_messages(history, run.compact_at)
    request = build_request(run.model, prepared.messages)
    counted, error = None, None
    if count and run.model != OFFLINE_MODEL and (client is not None or settings.current().has_api_key):
        try:
            counted = estimate.count_tokens(client or make_client(run.model), request)
        except Exception as exc:  # the estimate stands; say why the count is missing
            error = redacted_line(exc, 200)
    largest = max((s.output_tokens for s in steps), default=0)
    call = estimate.predict(request, previous, expected_output_tokens=estimate.expected_output(largest, MAX_TOKENS),
                            counted_tokens=counted)
    return ResumeEstimate(run.id, call, run_cost(store, run.id), pending, error, run.budget_usd)
