"""The next call before it is made: its size, whether the prompt cache is likely warm, and its price.

Used three ways: ``dayflow resume --dry-run`` and the dashboard's line under
Resume (what pressing it will cost: ``ResumeEstimate``), and the loop's dollar
budget (whether the next call fits in what is left).

The request itself is the agent's to build (``agent.resume_request`` builds
the one a resume would send, exactly as the loop builds it); this module only
prices a request it is handed, so money never imports the agent.

- **Size.** With an API key, the API's own count (``messages.count_tokens``,
  free, no reply bought). Otherwise an estimate: the previous call's exact
  input count plus the estimated size of what was added since (the last reply
  and its tool results), so the system prompt and tool schemas are counted as
  the API counted them; a run's first call is estimated whole (about four
  characters of JSON per token).
- **Cache.** Requests ask for automatic prompt caching, so a call reads from
  the cache the longest prefix it shares with the previous call and writes the
  rest. The cache is judged warm when the previous call was made less than
  the lifetime the request asked for (``cache_control.ttl``, 5 minutes unless
  it says ``1h``) ago; Anthropic keeps an entry that long after its last use,
  though it may drop it sooner.
- **Price.** Warm: the shared prefix at the cache-read rate, the rest at the
  cache-write rate. Cold: the whole input at the cache-write rate. Output: this
  run's largest reply so far (a run's first call: a quarter of max_tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from .. import clock
from . import rates
from .cost import Cost, RunCost, Usage, cost_of, format_usd, run_cost
from .rates import MILLION, ModelPrices
from .tokens import estimate_tokens

TTL_SECONDS = {"5m": 300, "1h": 3600}


def cache_ttl(request: dict) -> str | None:
    """The cache lifetime ``request`` asks for (``"5m"``, ``"1h"``), or None when it asks for no caching.

    Read from its ``cache_control`` breakpoints (after the system prompt, on a tool, on the last message's
    blocks) or the top-level ``cache_control`` of automatic caching.
    """
    found = [request.get("cache_control")]
    system = request.get("system")
    if isinstance(system, list):
        found += [b.get("cache_control") for b in system if isinstance(b, dict)]
    found += [t.get("cache_control") for t in request.get("tools") or [] if isinstance(t, dict)]
    messages = request.get("messages") or []
    last = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else None
    if isinstance(last, list):
        found += [b.get("cache_control") for b in last if isinstance(b, dict)]
    controls = [c for c in found if isinstance(c, dict)]
    if not controls:
        return None
    return "1h" if any(c.get("ttl") == "1h" for c in controls) else "5m"


@dataclass(frozen=True)
class PreviousCall:
    """The run's last paid call, as its step recorded it."""

    messages: list[dict] | None  # the message list it sent (None: not rebuilt)
    est_tokens: int | None  # estimate_tokens of those messages, as stored on the step
    input_tokens: int  # the API's count of its whole input
    output_tokens: int
    at: datetime | None  # when its reply was committed


@dataclass(frozen=True)
class NextCall:
    """What the next call will send and what it will likely cost."""

    model: str
    messages: int  # how many messages it sends
    input_tokens: int
    counted: bool  # True: counted by the API; False: estimated
    cached_prefix_tokens: int  # what a warm cache would serve
    ttl: str | None  # the cache lifetime asked for; None: no caching asked
    seconds_since_last: float | None  # since the previous call (None: no previous call)
    expected_output_tokens: int
    max_output_tokens: int
    prices: ModelPrices | None

    @property
    def warm(self) -> bool:
        if self.ttl is None or self.seconds_since_last is None or not self.cached_prefix_tokens:
            return False
        return self.seconds_since_last < TTL_SECONDS[self.ttl]

    def usage(self, *, warm: bool, output_tokens: int) -> Usage:
        if self.ttl is None:
            return Usage(self.input_tokens, 0, 0, output_tokens)
        read = min(self.cached_prefix_tokens, self.input_tokens) if warm else 0
        return Usage(self.input_tokens, self.input_tokens - read, read, output_tokens)

    def cost(self, *, warm: bool, output_tokens: int | None = None) -> Cost | None:
        if self.prices is None:
            return None
        output = self.expected_output_tokens if output_tokens is None else output_tokens
        return cost_of(self.prices, self.usage(warm=warm, output_tokens=output), clock.now(),
                               cache_ttl=self.ttl or "5m")

    @property
    def warm_cost(self) -> Cost | None:
        return self.cost(warm=True)

    @property
    def cold_cost(self) -> Cost | None:
        return self.cost(warm=False)

    @property
    def likely_cost(self) -> Cost | None:
        """The cost under the cache state judged likely."""
        return self.cost(warm=self.warm)

    def output_rate(self) -> Decimal | None:
        """Dollars per output token at this request's size."""
        if self.prices is None:
            return None
        return self.prices.rates_on(clock.today())["output"].at(self.input_tokens) / MILLION

    def size_note(self) -> str:
        return "counted by the API" if self.counted else "estimated"

    def cache_note(self) -> str:
        """``warm: last call 2m 10s ago, lifetime 5m`` and the like."""
        if self.ttl is None:
            return "no caching asked"
        if self.seconds_since_last is None:
            return "cold: no earlier call"
        state = "warm" if self.warm else "cold"
        return f"{state}: last call {clock.duration(self.seconds_since_last)} ago, lifetime {self.ttl}"


def _shared_prefix(previous: list[dict], following: list[dict]) -> int:
    count = 0
    for before, after in zip(previous, following):
        if before != after:
            break
        count += 1
    return count


def predict(request: dict, previous: PreviousCall | None, *, expected_output_tokens: int,
            counted_tokens: int | None = None, now: datetime | None = None) -> NextCall:
    """The next call for ``request`` (as the agent's ``build_request`` makes it), after ``previous``."""
    messages = request["messages"]
    est_messages = estimate_tokens(messages)
    if counted_tokens is not None:
        size = counted_tokens
    elif previous is not None and previous.input_tokens and previous.est_tokens is not None:
        # The previous call's exact count calibrates the part the estimate does not see (system, tools).
        size = max(previous.input_tokens + est_messages - previous.est_tokens, est_messages)
    else:
        size = estimate_tokens({"system": request.get("system"), "tools": request.get("tools"),
                                "messages": messages})
    prefix = 0
    if previous is not None and previous.input_tokens:
        prefix = previous.input_tokens
        if previous.messages is not None:
            shared = _shared_prefix(previous.messages, messages)
            if shared < len(previous.messages):  # compaction rewrote part of what was sent before
                prefix = max(previous.input_tokens - estimate_tokens(previous.messages[shared:]), 0)
        prefix = min(prefix, size)
    since = None
    if previous is not None and previous.at is not None:
        since = max(((now or clock.now()) - previous.at).total_seconds(), 0.0)
    return NextCall(model=request["model"], messages=len(messages), input_tokens=size,
                    counted=counted_tokens is not None, cached_prefix_tokens=prefix, ttl=cache_ttl(request),
                    seconds_since_last=since, expected_output_tokens=expected_output_tokens,
                    max_output_tokens=int(request.get("max_tokens") or 0), prices=rates.lookup(request["model"]))


def expected_output(largest_so_far: int, max_tokens: int) -> int:
    """The reply size a prediction assumes: the run's largest so far, else a quarter of max_tokens."""
    return min(largest_so_far or max_tokens // 4, max_tokens)


# -- the price of a resume ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResumeEstimate:
    """What resuming a run will likely cost before anything is paid (``dayflow resume --dry-run``, the dashboard)."""

    run_id: str
    call: NextCall
    spent: RunCost  # the committed steps: paid once, not paid again by a resume
    pending_tools: int  # tool calls of the last step that a resume runs before its call (no call for them)
    count_error: str | None = None  # why the API's count could not be had (the estimate stands)
    budget_usd: Decimal | None = None  # the run's dollar budget

    def line(self) -> str:
        """One line: what the next call likely costs, why (the cache), and what it would cost otherwise."""
        call = self.call
        warm, cold = call.warm_cost, call.cold_cost
        size = f"{call.input_tokens:,} tokens ({call.size_note()})"
        if self.pending_tools:
            size += f" + results of {self.pending_tools} tool call(s)"
        if warm is None or cold is None:
            return f"next call: price unknown for {call.model} · {size}"
        if call.ttl is None or call.seconds_since_last is None:
            return f"next call ≈ {format_usd(cold.total)}, cache cold ({call.cache_note().split(': ', 1)[-1]}) · {size}"
        since = f"last call {clock.duration(call.seconds_since_last or 0)} ago"
        if call.warm:
            return (f"next call ≈ {format_usd(warm.total)}, cache warm ({since} < {call.ttl}); "
                    f"{format_usd(cold.total)} if cold · {size}")
        return (f"next call ≈ {format_usd(cold.total)}, cache cold ({since} > {call.ttl}); "
                f"{format_usd(warm.total)} if warm · {size}")


def price_resume(store, run, request: dict, previous: PreviousCall | None, *, pending_tools: int,
                 largest_output: int, counted_tokens: int | None = None,
                 count_error: str | None = None) -> ResumeEstimate:
    """Price the request a resume of ``run`` would send (built by the agent), with what the run spent so far.

    ``largest_output``: the run's largest reply so far (the reply size assumed); reads only.
    """
    call = predict(request, previous, counted_tokens=counted_tokens,
                   expected_output_tokens=expected_output(largest_output, int(request.get("max_tokens") or 0)))
    return ResumeEstimate(run.id, call, run_cost(store, run.id), pending_tools, count_error, run.budget_usd)
