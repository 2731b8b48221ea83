"""The agent loop: commit, then call. Knows nothing of any UI.

Each model response is committed the moment it arrives (before its tools
run), its tool results are committed before the next paid call, and the
message history is rebuilt from those rows on resume. Front ends watch
through the ``on_step`` callback.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Callable

from .. import clock
from ..config import settings
from . import backpressure, sdk_client
from ..config.errors import AgentChanged, DayflowError, HistoryError, ModelCallFailed, RateLimited, RunBusy, UsageError
from ..money import estimate, rates
from ..money.cost import Cost, Usage, format_usd, price_call
from ..redaction import redact_and_cut
from ..store import (Lease, ReplySpooled, RunStatus, Store, StepRecord, dumps, ingest_spool, spool_reply,
                     step_blocks)
from ..testhook import pause_point
from .compaction import compact
from .messages import add_assistant_turn, messages_from, rebuild_messages
from ..store.retry import patience
from .replies import BadReply, body_text, mend_surrogates, normalise, storable_raw, storable_text
from ..money.tokens import estimate_tokens
from .approvals import RunWaiting, answer_calls, approval_tools_for_new_run, needs_a_person
from . import brief
from .define import Agent
from .registry import agent_columns, agent_for_run, load_agent
from .journal import answer_call, call_id, kept_rows
from .tools import ToolContext, cut_off_results
from .events import (DEFAULT_MAX_STEPS, ENDS_BEFORE_TOOLS, MAX_TOKENS, RETRY_MAX_TOKENS, OnStep, RunResult,  # noqa: F401
                     StepEvent)
from ..config.settings import DEFAULT_API_MODEL, OFFLINE_MODEL  # noqa: F401 (the names callers import from here)

DEFAULT_TASK = brief.TASK
SYSTEM_PROMPT = brief.SYSTEM


@dataclass
class RequestPreview:
    """The messages the next call sends, with their estimated size before and after compaction."""

    messages: list[dict]
    est_before: int
    est_after: int

    @property
    def compacted(self) -> bool:
        return self.est_after != self.est_before


def prepare_messages(history: list[dict], compact_at: int | None) -> RequestPreview:
    """What goes over the wire for ``history``: the full history, or a compacted view of it.

    The database always keeps every step in full; compaction (when
    ``compact_at`` is set) only shapes the request.
    """
    before = estimate_tokens(history)
    if not compact_at:
        return RequestPreview(history, before, before)
    messages = compact(history, threshold_tokens=compact_at)
    return RequestPreview(messages, before, before if messages is history else estimate_tokens(messages))


def next_request_preview(store: Store, run_id: str) -> RequestPreview:
    """Exactly the message list the run's next call would send (for the dashboard)."""
    run = store.get_run(run_id)
    return prepare_messages(rebuild_messages(store, run.id), run.compact_at)


def replay_request(store: Store, run_id: str) -> dict:
    """The run's whole message list as a Messages API request body (``dayflow export --anthropic``).

    Every committed turn as stored, uncompacted, with the system prompt and
    tools Dayflow sends: POST it to /v1/messages to replay the run anywhere.
    """
    run = store.get_run(run_id)
    return build_request(run.model, rebuild_messages(store, run.id), load_agent(run.agent_ref))


def default_compact_at() -> int | None:
    """``DAYFLOW_COMPACT_AT`` (estimated tokens; unset, ``0`` or ``off`` for none).

    The compaction threshold of runs started without one, so every front end
    (CLI, dashboard) starts runs the same way.
    """
    return settings.current().compact_at or None  # checked when the settings were read


def default_model() -> str:
    """``DAYFLOW_MODEL``, else the offline model when no API key is set."""
    return settings.current().default_model


def make_client(model: str) -> Any:
    """The client for ``model``. Imports ``anthropic`` only here: commands that call no model stay fast."""
    if model == OFFLINE_MODEL:
        from .offline import OfflineClient

        return OfflineClient()
    if not settings.current().has_api_key:
        raise DayflowError(f"model {model[:80]!r} needs ANTHROPIC_API_KEY in the environment (export it and "
                           f"run the command again, or start an offline run: dayflow brief --model {OFFLINE_MODEL})")
    # The key is read from the environment by the SDK and never stored by us;
    # ANTHROPIC_BASE_URL is honoured by the SDK too.
    return sdk_client.build(_sdk_options())


def start_client_in_background(model: str) -> None:
    """A real model's client, imported and built in a thread while the caller reads the history.

    Anything wrong (no key, a bad option) is left for ``make_client`` to report where it always has.
    """
    if model == OFFLINE_MODEL or not settings.current().has_api_key:
        return
    try:
        sdk_client.start(_sdk_options())
    except DayflowError:
        pass


def _sdk_options() -> dict:
    """The SDK's own retries and timeout (settings ``api_max_retries``, ``api_timeout_s``; checked when read)."""
    current = settings.current()
    options: dict[str, Any] = {}
    if current.api_max_retries is not None:
        options["max_retries"] = current.api_max_retries
    if current.api_timeout_s is not None:
        options["timeout"] = current.api_timeout_s
    return options


def build_request(model: str, messages: list[dict], agent: Agent | None = None) -> dict:
    """The Messages API request for ``messages``, with ``agent``'s system prompt and tools (default: the brief).

    Top-level ``cache_control`` asks for automatic prompt caching: the
    history is re-sent byte for byte as stored, so each step (and a resume
    within the cache lifetime) re-reads it at the cache price.
    """
    agent = agent or brief.AGENT
    return {"model": model, "max_tokens": MAX_TOKENS, "system": agent.system, "tools": agent.schemas,
            "messages": messages, "cache_control": {"type": "ephemeral"}}


def wire_blocks(response: Any) -> list[dict]:
    """The response's content blocks as plain JSON, exactly the fields the API sent.

    ``to_dict`` leaves out fields the API did not set (``model_dump`` would
    add ``caller: null`` and friends, which the API rejects when re-sent);
    thinking and redacted_thinking blocks keep their signatures and data.
    """
    blocks = [block.to_dict(mode="json") if hasattr(block, "to_dict") else dict(block)
              for block in (getattr(response, "content", None) or [])]
    return mend_surrogates(blocks)


def _call_model(client: Any, request: dict) -> str:
    """One paid call; returns the reply body as received (the SDK's raw HTTP body where it has one)."""
    try:
        raw_api = getattr(client.messages, "with_raw_response", None)
        response = raw_api.create(**request) if raw_api is not None else client.messages.create(**request)
        text = body_text(response)
    except Exception as exc:
        status = getattr(exc, "status_code", None)
        if backpressure.is_back_pressure(status):
            # 429 / 529 after the SDK's retries: the run waits and goes on, it has not failed.
            raise RateLimited(_describe_api_error(exc), status=status,
                              wait_s=backpressure.next_wait(backpressure.retry_after_s(exc))) from exc
        raise ModelCallFailed(_describe_api_error(exc)) from exc
    backpressure.call_went_through()
    return text


def _describe_api_error(exc: BaseException) -> str:
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    detail = ""
    if isinstance(body, dict):
        err = body.get("error") if isinstance(body.get("error"), dict) else body
        detail = str(err.get("message") or "")
    detail = detail or str(exc)
    prefix = f"model API error {status} ({name})" if status else f"model API error ({name})"
    # Redacted before it is cut: a key straddling the cut must not survive in part.
    return redact_and_cut(f"{prefix}: {' '.join(detail.split())}", 300 + len(prefix) + 2)


def _text_of(blocks: list[dict]) -> str:
    return "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text").strip()


@dataclass
class _Spend:
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
class _Verdict:
    """The dollar budget's answer before a call: stop (why), or go with at most ``max_tokens`` of reply."""

    stop: str | None = None
    max_tokens: int | None = None


def dollar_verdict(budget: Decimal, spent: Cost | None, call: estimate.NextCall) -> _Verdict:
    """May the run make ``call`` and stay within ``budget`` dollars?

    It stops before the call when what the run has spent plus the call's likely
    cost (its input under the judged cache state, a reply as long as the run's
    longest) would pass the budget. A call that may go ahead gets a reply cap
    (``max_tokens``) that its cost cannot pass the budget under, whatever the
    reply, pricing the input as if the cache were cold: the run never makes a
    call that could take it past the budget.
    """
    if spent is None or call.prices is None:
        return _Verdict(stop=f"dollar budget cannot be checked: no price for model {call.model[:80]!r} "
                        f'(add [prices."{call.model[:80]}"] to the settings file)')
    likely = call.likely_cost
    assert likely is not None
    shown = (f"spent {format_usd(spent.total)} of {format_usd(budget)}; the next call "
             f"({call.input_tokens:,} input tokens, cache {'warm' if call.warm else 'cold'})")
    if spent.total + likely.total > budget:
        return _Verdict(stop=f"dollar budget reached: {shown} would cost about "
                        f"{format_usd(likely.total)}")
    cold_input = call.cost(warm=False, output_tokens=0)
    rate = call.output_rate()
    assert cold_input is not None and rate is not None
    room = budget - spent.total - cold_input.total
    cap = call.max_output_tokens if rate == 0 else min(int(room / rate), call.max_output_tokens)
    if cap < call.expected_output_tokens:
        return _Verdict(stop=f"dollar budget reached: {shown} leaves room for {max(cap, 0):,} reply tokens "
                        f"if the cache is cold, fewer than the {call.expected_output_tokens:,} expected")
    return _Verdict(max_tokens=cap if cap < call.max_output_tokens else None)


class _Driver:
    """Drives one leased run from ``start_step`` until it ends, stops or crashes."""

    def __init__(self, store: Store, run_id: str, lease: Lease, *, client: Any = None,
                 on_step: OnStep | None = None, crash_after_step: int | None = None,
                 should_stop: Callable[[], bool] | None = None, agent: Agent | None = None):
        self.store = store
        self.run = store.get_run(run_id)
        self.lease = lease
        # A worker loads the run's agent here; a changed or missing agent fails the attempt (never silently).
        self.agent = agent if agent is not None else agent_for_run(self.run)[0]
        self.client = client
        self.on_step = on_step
        self.crash_after_step = crash_after_step
        self.should_stop = should_stop
        self.calls = 0
        self.cut_off_call = False  # the next call gets RETRY_MAX_TOKENS (a reply cut off inside a tool call)
        self.retried_cut_off = False
        self.ctx = ToolContext(store=store, run_id=self.run.id, today=clock.today(), agent=self.agent)
        self.spend = _Spend(replayed=Cost())

    def emit(self, event: StepEvent) -> None:
        if self.on_step is not None:
            self.on_step(event)

    def run_pending_tools(self, n: int, assistant: list[dict], spent: tuple[int, int],
                          stop_reason: str | None) -> list[dict]:
        # A response cut off at max_tokens may hold half-written calls: answer them, run none.
        # A call that needs a person's approval stops the run here (RunWaiting) until it is decided.
        if stop_reason == "max_tokens":
            results = cut_off_results(assistant)
        elif needs_a_person(self.run, assistant, self.agent):
            results = answer_calls(self.store, self.run, self.lease, self.ctx, n, assistant)
        else:
            results = self.journaled_calls(n, assistant)
        self.store.set_tool_results(self.run.id, n, results, lease=self.lease)
        self.emit(StepEvent(self.run.id, n, "tools", stop_reason, assistant, results, 0, 0, *spent))
        return results

    def journaled_calls(self, n: int, assistant: list[dict]) -> list[dict]:
        """Run step ``n``'s calls one by one, each result committed as it completes (the per-call journal).

        After a crash only the calls with no kept result run again: the history
        ends up as a run that never stopped would have it. A plain tool (a side
        effect that must not happen twice) is marked started before it runs;
        started with no result, it is not run again but answered "outcome
        unknown", so the model decides.
        """
        kept = kept_rows(self.store, self.run.id, n)
        return [answer_call(self.store, self.ctx, self.lease, n, block, kept.get(call_id(block)))
                for block in assistant if block.get("type") == "tool_use"]

    def drive(self, messages: list[dict], *, start_step: int, spent_in: int, spent_out: int,
              replayed: int) -> RunResult:
        """Run steps from ``start_step``; ``spent_*`` carry the whole run's tokens for the budget guard."""
        run, n = self.run, start_step
        while True:
            if self.should_stop is not None and self.should_stop():
                return self._result(RunStatus.RUNNING.value, None, n - 1, spent_in, spent_out, replayed)
            if self.lease.lost:
                raise RunBusy(f"run {run.id} was taken over by another process")
            if n > run.max_steps:
                return self._stop("budget", f"stopped at the step limit ({run.max_steps} step{'' if run.max_steps == 1 else 's'})",
                                  n - 1, spent_in, spent_out, replayed)
            if run.budget_tokens is not None and spent_in + spent_out >= run.budget_tokens:
                return self._stop("budget", f"token budget reached: {spent_in + spent_out:,} of "
                                  f"{run.budget_tokens:,} spent", n - 1, spent_in, spent_out, replayed)
            prepared = prepare_messages(messages, run.compact_at)
            request = build_request(run.model, prepared.messages, self.agent)
            if self.cut_off_call:
                # The last reply was cut off inside a tool call: this call gets room to finish one (once).
                request["max_tokens"] = RETRY_MAX_TOKENS
                self.cut_off_call = False
            reply_cap: int | None = None
            if run.budget_usd is not None:
                call = estimate.predict(request, self.spend.previous, expected_output_tokens=estimate.expected_output(
                    self.spend.largest_output, MAX_TOKENS))
                verdict = dollar_verdict(run.budget_usd, self.spend.total, call)
                if verdict.stop:
                    return self._stop("budget", verdict.stop, n - 1, spent_in, spent_out, replayed)
                if verdict.max_tokens is not None:
                    reply_cap = request["max_tokens"] = verdict.max_tokens
            if self.client is None:
                self.client = make_client(run.model)
            know = getattr(self.client, "know_agent", None)
            if know is not None:
                know(self.agent)
            # The commit of the reply we are about to buy must land in the file the user will look at.
            self.store.verify_same_database()
            started = time.monotonic()
            self.calls += 1
            pause_point("api")
            try:
                raw = _call_model(self.client, request)
            except RateLimited as exc:
                exc.run_id = run.id
                self._release_backing_off(exc)
                raise
            except ModelCallFailed as exc:
                self.store.finish_run(run.id, RunStatus.FAILED, error=str(exc), lease=self.lease)
                raise
            duration_ms = int((time.monotonic() - started) * 1000)
            step, final = self._step_of(raw, n, prepared, duration_ms)
            tokens_in, tokens_out, blocks = step.input_tokens, step.output_tokens, step.assistant
            spent_in, spent_out = spent_in + tokens_in, spent_out + tokens_out
            cost = price_call(step.model or run.model, Usage(tokens_in, step.cache_creation_input_tokens,
                                                                     step.cache_read_input_tokens, tokens_out))
            self.spend.add(cost)
            self.spend.largest_output = max(self.spend.largest_output, tokens_out)
            self.spend.previous = estimate.PreviousCall(prepared.messages, prepared.est_after, tokens_in, tokens_out,
                                                        clock.now())
            if final is not None and reply_cap is not None and step.stop_reason == "max_tokens":
                final = ("budget", final[1], f"dollar budget reached: the reply used all {reply_cap:,} tokens "
                         "the budget left room for")
            if final is not None:
                status, text, error = final
                self._commit(step, final)
                self.emit(StepEvent(run.id, n, "response", step.stop_reason, blocks, None, tokens_in,
                                    tokens_out, spent_in, spent_out, step.request_est_tokens,
                                    step.compacted_est_tokens, cost, self.spend.total))
                return self._result(status, text, n, spent_in, spent_out, replayed, error)
            # Commit the paid turn before any tool runs: a crash from here on loses no call.
            self._commit(step, None)
            add_assistant_turn(messages, blocks)
            self.emit(StepEvent(run.id, n, "response", step.stop_reason, blocks, None, tokens_in, tokens_out,
                                spent_in, spent_out, step.request_est_tokens, step.compacted_est_tokens, cost,
                                self.spend.total))
            if step.tool_uses and step.stop_reason == "max_tokens" and not self.retried_cut_off:
                self.cut_off_call = self.retried_cut_off = True
            if step.tool_uses:
                results = self.run_pending_tools(n, blocks, (spent_in, spent_out), step.stop_reason)
                messages.append({"role": "user", "content": results})
            if self.crash_after_step == n:
                raise SystemExit(f"simulated crash after step {n}")
            n += 1

    def _release_backing_off(self, exc: RateLimited) -> None:
        """Queue the run again until the API's wait has passed, this attempt not counted (never ``failed``).

        If the database will not take it, the lease is released as after any attempt (``_drive_claimed``):
        the run is then taken at once, with the attempt counted.
        """
        why = f"{backpressure.reason(exc.status, exc.wait_s)}: {exc}"
        try:
            self.store.release_backing_off(self.lease, redact_and_cut(why, 300), wait_s=exc.wait_s)
        except Exception:
            pass

    def _step_of(self, raw: str, n: int, prepared: RequestPreview,
                 duration_ms: int) -> tuple[StepRecord, tuple[str, str | None, str | None] | None]:
        """The step a paid reply becomes, and how it ends the run (None: the run goes on).

        Nothing here may fail the reply: a body that cannot be used becomes a
        step with no content (kept with its body for ``dayflow show --raw``)
        that ends the run ``failed`` with the reason, so it is bought once.
        """
        common = dict(n=n, duration_ms=duration_ms, request_est_tokens=prepared.est_before,
                      compacted_est_tokens=prepared.est_after if prepared.compacted else None)
        try:
            reply = normalise(raw)
        except BadReply as exc:
            step = StepRecord(stop_reason=None, assistant=[], model=self.run.model, raw=storable_raw(raw), **common)
            return step, (RunStatus.FAILED.value, None,
                          storable_text(redact_and_cut(f"the API sent a reply that cannot be used: {exc}", 400)))
        tokens_in, tokens_out, cache_write, cache_read = reply.usage
        step = StepRecord(stop_reason=reply.stop_reason, assistant=reply.blocks, input_tokens=tokens_in,
                          output_tokens=tokens_out, cache_creation_input_tokens=cache_write,
                          cache_read_input_tokens=cache_read, model=reply.model or self.run.model,
                          raw=storable_raw(raw, dumps(reply.blocks)), **common)
        final = self._final_state(step, self.run.id)
        if final is not None:
            status, text, error = final
            final = (status, storable_text(text), storable_text(error))
        return step, final

    def _commit(self, step: StepRecord, final: tuple[str, str | None, str | None] | None) -> None:
        """Commit a paid reply; if the database will not take it, keep it in this host's spool and stop."""
        status, text, error = final or (None, None, None)
        try:
            self.store.append_step(self.run.id, step, lease=self.lease, final_status=status, final_text=text,
                                   final_error=error)
        except RunBusy:
            raise
        except Exception as exc:
            reason = redact_and_cut(f"{type(exc).__name__}: {exc}", 300)
            path = spool_reply(self.store, self.run.id, step, final, reason)
            raise ReplySpooled(f"run {self.run.id} step {step.n}: the paid reply could not be stored ({reason}); "
                               f"it is safe in {path}, and `dayflow resume {self.run.id}` (or a worker) on this "
                               "host stores it without paying again") from exc

    @staticmethod
    def _final_state(step: StepRecord, run_id: str) -> tuple[str, str | None, str | None] | None:
        """(status, final text, error) when this response ends the run, else None."""
        text = _text_of(step.assistant) or None
        if step.stop_reason in ENDS_BEFORE_TOOLS:
            # Ends the run before any tool runs, whatever calls the reply holds: a refusal, or a reply cut off
            # because the conversation filled the model's context window (its calls may be half written).
            return "failed", text, ENDS_BEFORE_TOOLS[step.stop_reason](run_id, step.n)
        if step.tool_uses or step.stop_reason == "pause_turn":
            return None  # tools to run, or a server-side turn to continue
        if step.stop_reason in ("end_turn", "stop_sequence"):
            return "done", text, None
        if step.stop_reason == "max_tokens":
            return "failed", text, f"the response was cut off at max_tokens ({MAX_TOKENS})"
        return "failed", text, f"unexpected stop_reason {str(step.stop_reason)[:60]!r}"

    def _stop(self, status: str, error: str, steps: int, spent_in: int, spent_out: int,
              replayed: int) -> RunResult:
        self.store.finish_run(self.run.id, status, error=error, lease=self.lease)
        return self._result(status, None, steps, spent_in, spent_out, replayed, error)

    def _result(self, status: str, text: str | None, steps: int, spent_in: int, spent_out: int,
                replayed: int, error: str | None = None) -> RunResult:
        return RunResult(self.run.id, status, text, steps, spent_in, spent_out, self.calls, replayed, error,
                         cost=self.spend.total, paid=self.spend.paid_or_none, replayed_cost=self.spend.replayed)


def _check_dollar_budget(model: str, budget_usd: Decimal | None) -> None:
    """A dollar budget on a model without a price could never be checked: refused before anything is written."""
    if budget_usd is not None and rates.lookup(model) is None:
        raise UsageError(f"--budget-usd: no price is known for model {model[:80]!r}, so a dollar budget cannot be "
                         f'checked (add [prices."{model[:80]}"] with input and output to the settings file)')


def _new_run_agent(agent: Agent | None, agent_ref: str | None, user_msg: str | None,
                   max_steps: int | None) -> tuple[Agent, dict, str, int]:
    agent = agent or brief.AGENT
    task = user_msg or agent.task
    if not task:
        raise UsageError(f"agent {agent.name} has no default task: say what to ask it")
    columns = agent_columns(agent, agent_ref if agent is not brief.AGENT else None)
    return agent, columns, task, max_steps or agent.max_steps


def run_brief(store: Store, *, user_msg: str | None = None, model: str | None = None, client: Any = None,
              budget_tokens: int | None = None, max_steps: int | None = None,
              compact_at: int | None = None, run_id: str | None = None, on_step: OnStep | None = None,
              on_start: Callable[[str], None] | None = None, crash_after_step: int | None = None,
              should_stop: Callable[[], bool] | None = None, budget_usd: Decimal | None = None,
              approval_tools: tuple[str, ...] | None = None, agent: Agent | None = None,
              agent_ref: str | None = None) -> RunResult:
    """Start a new run of ``agent`` (default: the built-in brief) and drive it to its end (or until a tool
    call waits for a person). ``agent_ref`` is where the agent is found again (``registry.resolve_ref``).

    ``compact_at`` (estimated tokens of the message list) turns compaction on;
    ``None`` takes ``DAYFLOW_COMPACT_AT``, ``0`` means off. ``budget_usd``
    (None: the ``budget_usd`` setting) is the whole run's dollar limit.
    """
    agent, columns, user_msg, max_steps = _new_run_agent(agent, agent_ref, user_msg, max_steps)
    if compact_at is None:
        compact_at = default_compact_at()
    model = model or agent.model or default_model()
    budget_usd = budget_usd if budget_usd is not None else settings.current().budget_usd
    _check_dollar_budget(model, budget_usd)
    if client is None:
        client = make_client(model)  # fail on a missing key before a run is recorded
    _require_live_export()
    if approval_tools is None:
        approval_tools = approval_tools_for_new_run(agent)
    run, lease = store.create_claimed_run(user_msg, model=model, budget_tokens=budget_tokens,
                                          max_steps=max_steps, compact_at=compact_at or None, run_id=run_id,
                                          budget_usd=budget_usd, approval_tools=approval_tools, agent=columns)
    if on_start is not None:
        on_start(run.id)
    return _drive_leased(store, run.id, lease, client=client, on_step=on_step,
                         crash_after_step=crash_after_step, should_stop=should_stop, agent=agent)


def queue_brief(store: Store, *, user_msg: str | None = None, model: str | None = None,
                budget_tokens: int | None = None, max_steps: int | None = None,
                compact_at: int | None = None, budget_usd: Decimal | None = None,
                approval_tools: tuple[str, ...] | None = None, agent: Agent | None = None,
                agent_ref: str | None = None) -> str:
    """Record a run for a worker to drive (``dayflow worker``); the same defaults as ``run_brief``.

    No client is built here: the model's key is needed where the worker runs.
    """
    agent, columns, user_msg, max_steps = _new_run_agent(agent, agent_ref, user_msg, max_steps)
    if compact_at is None:
        compact_at = default_compact_at()
    model = model or agent.model or default_model()
    budget_usd = budget_usd if budget_usd is not None else settings.current().budget_usd
    _check_dollar_budget(model, budget_usd)
    if approval_tools is None:
        approval_tools = approval_tools_for_new_run(agent)
    run = store.create_run(user_msg, model=model, budget_tokens=budget_tokens, max_steps=max_steps,
                           compact_at=compact_at or None, status=RunStatus.QUEUED, budget_usd=budget_usd,
                           approval_tools=approval_tools, agent=columns)
    return run.id


def resume(run_id: str, *, store: Store, client: Any = None, budget_tokens: int | None = None,
           max_steps: int | None = None, compact_at: int | None = None, on_step: OnStep | None = None,
           on_start: Callable[[str], None] | None = None, crash_after_step: int | None = None,
           should_stop: Callable[[], bool] | None = None, lease: Lease | None = None,
           budget_usd: Decimal | None = None, allow_changed_agent: bool = False) -> RunResult:
    """Continue a run where it stopped. A finished run returns its stored result, builds no client, calls nothing.

    ``budget_tokens``, ``budget_usd``, ``max_steps`` and ``compact_at`` (``0``: off) replace the run's own
    when given.
    ``lease``: the run is already claimed (a worker's ``store.claim_next``). Without one (a person's
    resume) everything that can refuse the run is checked before it is claimed, so a resume that
    cannot start changes nothing: the history is validated and the client built first.
    """
    run = store.get_run(run_id)
    if run.status != RunStatus.DONE and client is None:
        start_client_in_background(run.model)  # the SDK loads while the history is read and checked
    if run.status == RunStatus.DONE:
        if lease is not None:
            store.release(lease)
        return RunResult(run.id, run.status, run.final_text, run.step_count, run.input_tokens,
                         run.output_tokens, 0, run.step_count)
    agent = change = None
    if lease is None:
        _check_dollar_budget(run.model, budget_usd)
        messages_from(run, store.replay_steps(run.id))  # a damaged history is refused with nothing written
        # An agent that cannot be loaded, or whose code changed, is refused with nothing written.
        agent, change = agent_for_run(run, allow_changed=allow_changed_agent)
        if client is None:
            client = make_client(run.model)  # a missing key is refused with nothing written
        _require_live_export()
        lease = store.claim(run.id, fresh_attempts=True)
    try:
        if change is not None:
            store.record_agent_change(run.id, change, lease)
        if budget_tokens is not None or max_steps is not None or compact_at is not None or budget_usd is not None:
            store.update_limits(run.id, budget_tokens=budget_tokens, max_steps=max_steps, compact_at=compact_at,
                                budget_usd=budget_usd, lease=lease)
        if on_start is not None:
            on_start(run.id)
    except BaseException:
        # Claim-then-drive is one try/finally: nothing between the claim and the drive may leak the lease.
        store.release(lease)
        raise
    return _drive_leased(store, run.id, lease, client=client, on_step=on_step,
                         crash_after_step=crash_after_step, should_stop=should_stop, agent=agent)


def _require_live_export() -> None:
    """With the otel_endpoint setting, a missing OpenTelemetry SDK is refused before a run is claimed."""
    from .otel import require_live_export

    require_live_export()


def _drive_leased(store: Store, run_id: str, lease: Lease, **options: Any) -> RunResult:
    """Drive a claimed run; with the otel_endpoint setting its spans are sent as its steps commit."""
    from .otel import live_export_wanted, live_trace

    if not live_export_wanted():
        return _drive_claimed(store, run_id, lease, **options)
    try:
        trace = live_trace(store, run_id)
    except BaseException:
        store.release(lease)
        raise
    options["on_step"] = trace.watching(options.get("on_step"))
    try:
        result = _drive_claimed(store, run_id, lease, **options)
    finally:
        problem = trace.finish()  # after the release: the agent span ends with the run as it now stands
    result.trace_problem = problem
    return result


def _drive_claimed(store: Store, run_id: str, lease: Lease, **options: Any) -> RunResult:
    """Drive a leased run; however the attempt ends, the lease is released.

    An attempt that ends without committing a step (a reply that could not be
    stored, a missing key on a worker's host, a history that cannot be sent)
    is recorded on the run: it backs off, and after ``max_attempts`` in a row
    it is set ``failed`` with the reason. No run is retried in a loop.
    """
    lease.start_heartbeat()
    driver: _Driver | None = None
    committed_before = None
    try:
        ingest_spool(store, run_id, lease)  # a reply this host already paid for goes in before any call
        run = store.get_run(run_id)
        committed_before = run.step_count
        limit = settings.current().max_attempts
        if run.attempts > limit:
            # Each earlier attempt ended with its process (killed, crashed) before a step: stop here.
            reason = f"gave up after {run.attempts - 1} attempts: {run.error or 'each one ended with its process'}"
            store.finish_run(run_id, RunStatus.FAILED, error=redact_and_cut(reason, 400), lease=lease)
            return RunResult(run.id, RunStatus.FAILED.value, None, run.step_count, run.input_tokens,
                             run.output_tokens, 0, run.step_count, reason)
        steps = store.replay_steps(run_id)
        messages = messages_from(run, steps)
        driver = _Driver(store, run_id, lease, **options)
        if driver.client is None:
            driver.client = make_client(run.model)
        store.mark_running(run_id, lease)
        spent_in = sum(s.input_tokens for s in steps)
        spent_out = sum(s.output_tokens for s in steps)
        if steps:
            from ..money.cost import run_cost

            driver.spend.replayed = run_cost(store, run_id).cost
            driver.spend.largest_output = max(s.output_tokens for s in steps)
            last = steps[-1]
            assistant = step_blocks(last, "assistant") or []
            # A final reply that a person answered (a fork's note after it) is not the end any more.
            final = (_Driver._final_state(_record_of(last, assistant), run_id)
                     if assistant and last.tool_results is None else None)
            if final is not None:
                # The final response is committed; only the run's end was lost.
                status, text, error = final
                store.finish_run(run_id, status, final_text=storable_text(text), error=storable_text(error),
                                 lease=lease)
                return driver._result(status, text, last.n, spent_in, spent_out, len(steps), error)
            if last.tool_results is None and any(b.get("type") == "tool_use" for b in assistant):
                # Crashed while tools ran: the paid response is stored, so run the
                # tools (side effects are idempotent by key) and make no new call.
                results = driver.run_pending_tools(last.n, assistant, (spent_in, spent_out), last.stop_reason)
                add_assistant_turn(messages, assistant)
                messages.append({"role": "user", "content": results})
        if steps and run.budget_usd is not None:
            driver.spend.previous = previous_call(store, run, messages)
        return driver.drive(messages, start_step=len(steps) + 1, spent_in=spent_in, spent_out=spent_out,
                            replayed=len(steps))
    except RunWaiting:
        # The step's paid reply is committed; its calls wait for a person (the lease is given up already).
        run = store.get_run(run_id)
        return RunResult(run.id, RunStatus.WAITING.value, None, run.step_count, run.input_tokens,
                         run.output_tokens, driver.calls if driver else 0, committed_before or 0)
    except (RunBusy, ReplySpooled, ModelCallFailed, KeyboardInterrupt, SystemExit):
        raise  # another owner drives it / the reply is safe on disk / the run is failed already / stopped
    except (HistoryError, AgentChanged) as exc:
        # Neither heals by trying again: a history that cannot be sent, an agent whose code changed under
        # the run (a person decides: `dayflow resume --allow-changed-agent`). Failed now, with the reason.
        _give_up(store, run_id, lease, str(exc))
        raise
    except Exception as exc:
        _record_attempt(store, run_id, lease, exc, committed_before)
        raise
    finally:
        _release(store, lease)


def _release(store: Store, lease: Lease) -> None:
    """Give the run up; a failure to say so never hides why the attempt ended.

    The token is forgotten before the write, so even a lease the database
    never heard released reads as a gone owner (this process no longer holds it).
    """
    failing = sys.exc_info()[1] is not None
    try:
        if failing:
            with patience(1.0):  # the attempt failed already: do not keep its error waiting 15 s
                store.release(lease)
        else:
            store.release(lease)
    except Exception:
        if not failing:
            raise


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


def _give_up(store: Store, run_id: str, lease: Lease, reason: str) -> None:
    """A history that cannot be sent will not heal by trying again: the run is failed, with the reason."""
    try:
        store.finish_run(run_id, RunStatus.FAILED, error=redact_and_cut(reason, 400), lease=lease)
    except Exception:
        pass  # the database is away: the attempt count still stops a loop at the next claim


def _record_attempt(store: Store, run_id: str, lease: Lease, exc: BaseException, committed_before: int | None) -> None:
    """Count a failed attempt (one that committed no new step) against the run: back off, or give up."""
    try:
        if committed_before is not None and store.get_run(run_id).step_count > committed_before:
            return  # it made progress before failing: the next attempt starts a fresh count
        config = settings.current()
        attempts = store.get_run(run_id).attempts
        reason = redact_and_cut(f"{type(exc).__name__}: {exc}" if not isinstance(exc, DayflowError) else str(exc),
                                300)
        store.record_failed_attempt(run_id, lease, reason, max_attempts=config.max_attempts,
                                    backoff_s=config.retry_backoff_s * 2 ** max(attempts - 1, 0))
    except Exception:
        pass  # recording is best effort; the claim already counted the attempt


def _record_of(step, assistant: list[dict]) -> StepRecord:
    return StepRecord(n=step.n, stop_reason=step.stop_reason, assistant=assistant)
