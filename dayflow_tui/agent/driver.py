"""The driver: one leased run, step after step, call -> commit -> tools. Knows nothing of any UI.

Each model response is committed the moment it arrives (before its tools
run), and its tool results are committed before the next paid call. Before
each call it asks ``budget`` whether the run may make it; the request and the
call are ``request``'s. Claiming, releasing and the run's defaults are
``runs.py``'s; front ends watch through the ``on_step`` callback.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .. import clock
from ..config.errors import ModelCallFailed, RateLimited, RunBusy
from ..money import estimate
from ..money.cost import Cost, price_call, step_usage
from ..redaction import redact_and_cut
from ..store import COMMIT_WHILE_CONFIRMED_S, CONFIRM_AFTER_S, Lease, ReplySpooled, RunStatus, Store, StepRecord, dumps, spool_reply
from ..store.retry import only_while
from ..store.tables.approvals import CallToAsk
from ..testhook import pause_point
from . import backpressure, request, telemetry
from .approvals import RunWaiting, answer_calls, needs_a_person
from .budget import Spend, TreeBudget, dollar_verdict, limit_reached, tree_budget
from .define import Agent
from .events import ENDS_BEFORE_TOOLS, MAX_TOKENS, RETRY_MAX_TOKENS, OnStep, RunResult, StepEvent
from .journal import answer_call, call_id, kept_rows
from .messages import add_assistant_turn
from .model_limits import limits_for
from .registry import agent_for_run
from .replies import BadReply, normalise, storable_raw, storable_text
from .history_size import HistorySizes
from .request import RequestPreview, build_request, call_model, prepare_messages
from .streaming import OnDelta, ReplyDelta, StreamBroken
from .shared_limits import shared_limit_for
from .subagents import call_gate, side_by_side
from .tools import CallPaused, ToolContext, cut_off_results

OVERFLOWED = "model_context_window_exceeded"

# (status, final text, error) of a response that ends the run.
Final = tuple[str, "str | None", "str | None"]


class CancelObserved(Exception):
    """A commit or heartbeat under the lease saw the run's cancel: no call starts and no tool runs after it.

    ``runs`` ends the run ``cancelled`` (under the lease) when it catches this; the message is
    ``cancelled by WHO: WHY``.
    """


class Driver:
    """Drives one leased run from ``start_step`` until it ends, stops or crashes."""

    def __init__(self, store: Store, run_id: str, lease: Lease, *, client: Any = None,
                 on_step: OnStep | None = None, crash_after_step: int | None = None,
                 should_stop: Callable[[], bool] | None = None, agent: Agent | None = None,
                 on_delta: OnDelta | None = None, above: tuple[Lease, ...] = ()):
        self.store = store
        self.run = store.get_run(run_id)
        self.lease = lease
        # A worker loads the run's agent here; a changed or missing agent fails the attempt (never silently).
        self.agent = agent.connected() if agent is not None else agent_for_run(self.run)[0]
        self.client = client
        self.on_step = on_step
        self.on_delta = on_delta
        self.crash_after_step = crash_after_step
        self.should_stop = should_stop
        self.calls = 0
        self.cut_off_call = False  # the next call gets RETRY_MAX_TOKENS (a reply cut off inside a tool call)
        self.retried_cut_off = False
        self.sent_max_tokens = MAX_TOKENS  # what the last call asked for (its cut-off message says it)
        # After a reply that filled the context window: the next request is compacted below this size.
        self.compact_below: int | None = None
        self.overflowed = False  # the last reply filled the context window (twice in a row ends the run)
        # ``above``: the leases of the runs over this one (a subagent's parents): their cancel stops it too.
        self.above = tuple(above)
        self.ctx = ToolContext(store=store, run_id=self.run.id, today=clock.today(), agent=self.agent,
                               lease=lease, above=self.above)
        self.spend = Spend(replayed=Cost())
        self.tree_stop: str | None = None  # a subagent of the last step stopped on the tree's dollar budget
        self.ticket: tuple[TreeBudget, int | None] | None = None  # the call in flight's reservation in its tree
        # A run of a tree (a parent, a subagent's run): one paid call of the tree in flight at a time.
        self.gate = (call_gate(store, self.run) if self.run.parent_call_id or self._has_subagents() else None)
        self.holding_gate = False
        # The shared limits of the run's model (settings ``limits``); None when none apply: no query then.
        self.shared = shared_limit_for(store, self.run.model)
        self.shared_used: int | None = None  # the tokens the committed reply used (charged when its slot frees)

    def emit(self, event: StepEvent) -> None:
        if self.on_step is not None:
            self.on_step(event)

    def check_cancel(self) -> None:
        """Stop here if a commit or heartbeat under the lease has seen the run's cancel (``CancelObserved``)."""
        if self.lease.cancel is not None:
            raise CancelObserved(self.lease.cancel)
        for lease in self.above:
            if lease.cancel is not None:
                raise CancelObserved(f"its parent run {lease.run_id} was {lease.cancel}")

    def run_pending_tools(self, n: int, assistant: list[dict], spent: tuple[int, int],
                          stop_reason: str | None) -> list[dict]:
        # A cancelled run's pending calls are not run (nor asked of a person); the step stays without results.
        self.check_cancel()
        # A response cut off at max_tokens may hold half-written calls: answer them, run none.
        # A call that needs a person's approval stops the run here (RunWaiting) until it is decided.
        try:
            if stop_reason in ("max_tokens", OVERFLOWED):
                results = cut_off_results(assistant)
            elif needs_a_person(self.run, assistant, self.agent):
                results = answer_calls(self.store, self.run, self.lease, self.ctx, n, assistant)
            else:
                results = self.journaled_calls(n, assistant)
        except CallPaused as exc:
            # A subagent's run waits for a person: the step's other calls are kept, and this run waits with
            # it (its lease given up, no call made) until the decision queues it again.
            paused = [CallToAsk(call_id(b), str(b.get("name")), b.get("input"), waits=False) for b in assistant
                      if b.get("type") == "tool_use" and self._is_subagent(b)]
            self.store.wait_for_approval(self.run.id, n, paused, self.lease)
            raise RunWaiting(self.run.id) from exc
        self.tree_stop = self._child_out_of_budget(assistant)
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
        calls = [block for block in assistant if block.get("type") == "tool_use"]

        def answer(ctx: ToolContext, block: dict) -> dict:
            self.check_cancel()  # seen by the heartbeat, or by the last call's commit: the rest do not run
            return answer_call(self.store, ctx, self.lease, n, block, kept.get(call_id(block)))

        def has_work(block: dict) -> bool:  # a subagent's call with no kept answer: its child runs side by side
            row = kept.get(call_id(block))
            return self._is_subagent(block) and (row is None or row.result is None)

        return side_by_side(self.ctx, calls, answer, concurrent=has_work)

    def _has_subagents(self) -> bool:
        return any(t.subagent is not None for t in self.agent.tools)

    def _is_subagent(self, block: dict) -> bool:
        found = self.agent.tool_named(block.get("name"))
        return found is not None and found.subagent is not None

    def _child_out_of_budget(self, assistant: list[dict]) -> str | None:
        """Why the run stops now: a child of this step stopped on the tree's dollar budget (None: it goes on)."""
        ids = {call_id(b) for b in assistant if b.get("type") == "tool_use" and self._is_subagent(b)}
        if not ids:
            return None
        for child in self.store.subagent_runs(self.run.id):
            # ``budget`` also ends a run at its step limit, the child's own affair: only money stops the tree.
            if (child.parent_call_id in ids and child.status == RunStatus.BUDGET.value
                    and "dollar budget" in (child.error or "")):
                return (f"the tree's dollar budget was reached in its subagent's run {child.id}"
                        + (f" ({child.error})" if child.error else ""))
        return None

    def drive(self, messages: list[dict], *, start_step: int, spent_in: int, spent_out: int,
              replayed: int, lengths: list[int | None] | None = None) -> RunResult:
        """Run steps from ``start_step``; ``spent_*`` carry the whole run's tokens for the budget guard.

        ``lengths``: the messages' encoded lengths where known (a resume reads them off the stored text).
        """
        try:
            return self._drive(messages, start_step=start_step, spent_in=spent_in, spent_out=spent_out,
                               replayed=replayed, lengths=lengths)
        finally:
            self._settle()

    def _settle(self) -> None:
        """The call in flight is committed or lost: its reservation in the tree's budget goes."""
        if self.ticket is not None:
            tree, ticket = self.ticket
            self.ticket = None
            tree.settle(ticket)
        if self.holding_gate:
            self.holding_gate = False
            self.gate.release()
        if self.shared is not None:
            used, self.shared_used = self.shared_used, None
            self.shared.release(used_tokens=used)

    def _drive(self, messages: list[dict], *, start_step: int, spent_in: int, spent_out: int,
               replayed: int, lengths: list[int | None] | None) -> RunResult:
        run, n = self.run, start_step
        sizes = HistorySizes(messages, lengths)
        while True:
            self.check_cancel()
            if self.tree_stop is not None:
                return self._stop("budget", self.tree_stop, n - 1, spent_in, spent_out, replayed)
            if self.should_stop is not None and self.should_stop():
                return self.result(RunStatus.RUNNING.value, None, n - 1, spent_in, spent_out, replayed)
            if self.lease.lost:
                raise RunBusy(f"run {run.id} was taken over by another process")
            limit = limit_reached(run, n, spent_in, spent_out)
            if limit is not None:
                return self._stop("budget", limit, n - 1, spent_in, spent_out, replayed)
            prepared = prepare_messages(messages, self.compact_below or run.compact_at, sizes)
            self.compact_below = None
            body = build_request(run.model, prepared.messages, self.agent)
            if self.cut_off_call:
                # The last reply was cut off inside a tool call: this call gets room to finish one (once),
                # never more than the model allows or the SDK sends without streaming.
                body["max_tokens"] = limits_for(run.model).sendable(max(body["max_tokens"], RETRY_MAX_TOKENS))
                self.cut_off_call = False
            reply_cap: int | None = None
            if self.gate is not None:
                # Held until the reply is committed (``_settle``): the tree's budget is judged on what its other
                # runs committed, and a death loses one call of the tree at most.
                self.gate.acquire()
                self.holding_gate = True
                self.check_cancel()  # a cancel seen while another run of the tree was calling: no call now
            tree = tree_budget(self.store, run) if run.parent_call_id or self._has_subagents() else None
            if run.budget_usd is not None or tree is not None:
                call = estimate.predict(body, self.spend.previous, expected_output_tokens=estimate.expected_output(
                    self.spend.largest_output, MAX_TOKENS))
            if run.budget_usd is not None:
                verdict = dollar_verdict(run.budget_usd, self.spend.total, call)
                if verdict.stop:
                    return self._stop("budget", verdict.stop, n - 1, spent_in, spent_out, replayed)
                if verdict.max_tokens is not None:
                    reply_cap = body["max_tokens"] = verdict.max_tokens
            if tree is not None:
                # The budget is the tree's: its other runs' spend (and calls in flight beside this one) count.
                shared, ticket = tree.judge(call)
                if shared.stop:
                    return self._stop("budget", shared.stop, n - 1, spent_in, spent_out, replayed)
                self.ticket = (tree, ticket)
                if shared.max_tokens is not None and shared.max_tokens < body["max_tokens"]:
                    reply_cap = body["max_tokens"] = shared.max_tokens
            self.sent_max_tokens = body["max_tokens"]
            if self.client is None:
                self.client = request.make_client(run.model)
            know = getattr(self.client, "know_agent", None)
            if know is not None:
                know(self.agent)
            if self.shared is not None and not self._within_shared_limit(n, prepared.est_after):
                # The worker stops while the call waited for its limit: released as at a step boundary, no call.
                return self.result(RunStatus.RUNNING.value, None, n - 1, spent_in, spent_out, replayed)
            # Never pay on a lease in doubt: heartbeats that kept failing (the database away, its connection slots
            # taken) let another worker take the run over at STALE_AFTER_S and buy this step again. Confirmed
            # here with one write (none while the heartbeat keeps it fresh); the database still away: no call.
            if self.lease.unconfirmed_for() > CONFIRM_AFTER_S and not self.store.heartbeat(self.lease):
                raise RunBusy(f"run {run.id} was taken over by another process")
            # The commit of the reply we are about to buy must land in the file the user will look at.
            self.store.verify_same_database()
            started = time.monotonic()
            self.calls += 1
            pause_point("api")
            try:
                raw = call_model(self.client, body, betas=self.agent.betas, on_piece=self._pieces_of(n))
            except StreamBroken:
                # No reply came: a failed attempt (``runs`` backs off, counts it and gives up at max_attempts).
                self._tell_call(n, started, "broken")
                raise
            except RateLimited as exc:
                self._tell_call(n, started, "rate_limited", exc.status)
                if self.shared is not None and exc.status == 429:
                    self.shared.pushed_back(exc.wait_s)  # every worker of this model and key slows, not only this one
                exc.run_id = run.id
                self._release_backing_off(exc)
                raise
            except ModelCallFailed as exc:
                self._tell_call(n, started, "failed", getattr(exc, "status", None))
                self.store.finish_run(run.id, RunStatus.FAILED, error=str(exc), lease=self.lease)
                raise
            self._tell_call(n, started, "ok")
            duration_ms = int((time.monotonic() - started) * 1000)
            step, final = self._step_of(raw, n, prepared, duration_ms)
            tokens_in, tokens_out, blocks = step.input_tokens, step.output_tokens, step.assistant
            spent_in, spent_out = spent_in + tokens_in, spent_out + tokens_out
            self.shared_used = tokens_in + tokens_out
            cost = price_call(step.model or run.model, step_usage(step))
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
                self._settle()
                self.emit(StepEvent(run.id, n, "response", step.stop_reason, blocks, None, tokens_in,
                                    tokens_out, spent_in, spent_out, step.request_est_tokens,
                                    step.compacted_est_tokens, cost, self.spend.total))
                return self.result(status, text, n, spent_in, spent_out, replayed, error)
            # Commit the paid turn before any tool runs: a crash from here on loses no call.
            self._commit(step, None)
            self._settle()
            add_assistant_turn(messages, blocks)
            self.emit(StepEvent(run.id, n, "response", step.stop_reason, blocks, None, tokens_in, tokens_out,
                                spent_in, spent_out, step.request_est_tokens, step.compacted_est_tokens, cost,
                                self.spend.total))
            if step.stop_reason == OVERFLOWED:
                # The conversation filled the context window and compaction is on: the next request is
                # compacted to at most half of this one, and the model goes on from there.
                self.overflowed = True
                self.compact_below = max(min(run.compact_at or prepared.est_after, prepared.est_after // 2), 1)
            else:
                self.overflowed = False
            if step.tool_uses and step.stop_reason == "max_tokens" and not self.retried_cut_off:
                self.cut_off_call = self.retried_cut_off = True
            if step.tool_uses:
                results = self.run_pending_tools(n, blocks, (spent_in, spent_out), step.stop_reason)
                messages.append({"role": "user", "content": results})
            if self.crash_after_step == n:
                raise SystemExit(f"simulated crash after step {n}")
            n += 1

    def _within_shared_limit(self, n: int, tokens: int) -> bool:
        """Wait until the shared limit lets this call start (True), or the worker stops meanwhile (False).

        Nothing here calls the model. A cancel or a lost lease seen while waiting ends the wait as it would end
        the step; a wait past ``limit_wait_s`` backs the run off like a 529 (queued again, never failed)."""
        def check() -> None:
            self.check_cancel()
            if self.lease.lost:
                raise RunBusy(f"run {self.run.id} was taken over by another process")

        try:
            return self.shared.acquire(self.lease, step=n, tokens=tokens, check=check, should_stop=self.should_stop)
        except RateLimited as exc:
            exc.run_id = self.run.id
            self._release_backing_off(exc)
            raise

    def _pieces_of(self, n: int) -> Callable[[int, str, str], None] | None:
        """``call_model``'s ``on_piece`` for step ``n``: each piece to ``on_delta`` (a watcher's failure is its own)."""
        if self.on_delta is None:
            return None
        on_delta, run_id = self.on_delta, self.run.id

        def tell(index: int, kind: str, text: str) -> None:
            try:
                on_delta(ReplyDelta(run_id, n, index, kind, text))
            except Exception:
                pass  # a front end that cannot draw a piece never costs the reply

        return tell

    def _tell_call(self, n: int, started: float, outcome: str, status: int | None = None) -> None:
        telemetry.note("model.call", run_id=self.run.id, step=n, model=self.run.model, agent=self.agent.name,
                       outcome=outcome, status=status, duration_s=time.monotonic() - started)

    def _release_backing_off(self, exc: RateLimited) -> None:
        """Queue the run again until the API's wait has passed, this attempt not counted (never ``failed``).

        If the database will not take it, the lease is released as after any attempt (``runs``' claim-and-drive):
        the run is then taken at once, with the attempt counted.
        """
        why = f"{backpressure.reason(exc.status, exc.wait_s)}: {exc}"
        try:
            self.store.release_backing_off(self.lease, redact_and_cut(why, 300), wait_s=exc.wait_s)
        except Exception:
            pass

    def _step_of(self, raw: str, n: int, prepared: RequestPreview,
                 duration_ms: int) -> tuple[StepRecord, Final | None]:
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
                          cache_write_1h_tokens=reply.cache_write_1h, web_search_requests=reply.web_searches,
                          max_tokens=self.sent_max_tokens,
                          raw=storable_raw(raw, dumps(reply.blocks)), **common)
        final = final_state(step, self.run.id, self.sent_max_tokens,
                            compacting=bool(self.run.compact_at) and not self.overflowed)
        if final is not None and step.stop_reason == OVERFLOWED and self.overflowed:
            final = (final[0], final[1], "the conversation filled the model's context window again after it was "
                     f"compacted (stop_reason={OVERFLOWED}); fork it from an earlier step with a lower --compact-at")
        if final is not None:
            status, text, error = final
            final = (status, storable_text(text), storable_text(error))
        return step, final

    def _commit(self, step: StepRecord, final: Final | None) -> None:
        """Commit a paid reply; if the database will not take it, keep it in this host's spool and stop."""
        status, text, error = final or (None, None, None)
        started = time.monotonic()
        lease = self.lease
        try:
            # The commit keeps trying (commit_retry_s) only while the lease is not in doubt: heartbeats failing
            # too, the reply goes to the spool before the run can be taken over and the step bought again.
            with only_while(lambda: lease.unconfirmed_for() < COMMIT_WHILE_CONFIRMED_S):
                self.store.append_step(self.run.id, step, lease=lease, final_status=status, final_text=text,
                                       final_error=error)
        except RunBusy:
            raise
        except Exception as exc:
            reason = redact_and_cut(f"{type(exc).__name__}: {exc}", 300)
            path = spool_reply(self.store, self.run.id, step, final, reason)
            raise ReplySpooled(f"run {self.run.id} step {step.n}: the paid reply could not be stored ({reason}); "
                               f"it is safe in {path}, and `dayflow resume {self.run.id}` (or a worker) on this "
                               "host stores it without paying again") from exc
        # Told after the try: nothing that happens in telling may read as a commit that failed (and spool a
        # reply that is stored already).
        self._tell_commit(step, time.monotonic() - started)

    def _tell_commit(self, step: StepRecord, duration_s: float) -> None:
        if not telemetry.listening():
            return
        try:
            cost = price_call(step.model or self.run.model, step_usage(step))
        except Exception:  # noqa: BLE001 - a price that cannot be worked out is not counted; the step is committed
            cost = None
        telemetry.note("step.committed", run_id=self.run.id, step=step.n, model=step.model or self.run.model,
                       agent=self.agent.name, duration_s=duration_s, input_tokens=step.input_tokens,
                       output_tokens=step.output_tokens, cache_read_tokens=step.cache_read_input_tokens,
                       cache_write_tokens=step.cache_creation_input_tokens,
                       dollars=None if cost is None else float(cost.total))

    def _stop(self, status: str, error: str, steps: int, spent_in: int, spent_out: int,
              replayed: int) -> RunResult:
        self.store.finish_run(self.run.id, status, error=error, lease=self.lease)
        return self.result(status, None, steps, spent_in, spent_out, replayed, error)

    def result(self, status: str, text: str | None, steps: int, spent_in: int, spent_out: int,
               replayed: int, error: str | None = None) -> RunResult:
        return RunResult(self.run.id, status, text, steps, spent_in, spent_out, self.calls, replayed, error,
                         cost=self.spend.total, paid=self.spend.paid_or_none, replayed_cost=self.spend.replayed)


def final_state(step: StepRecord, run_id: str, max_tokens: int = MAX_TOKENS, *,
                compacting: bool = False) -> Final | None:
    """(status, final text, error) when this response ends the run, else None.

    ``compacting``: the run compacts its requests, so a reply that filled the context window goes on
    (compacted) instead of ending the run.
    """
    text = _text_of(step.assistant) or None
    if step.stop_reason == OVERFLOWED and compacting:
        return None
    if step.stop_reason in ENDS_BEFORE_TOOLS:
        # Ends the run before any tool runs, whatever calls the reply holds: a refusal, or a reply cut off
        # because the conversation filled the model's context window (its calls may be half written).
        return "failed", text, ENDS_BEFORE_TOOLS[step.stop_reason](run_id, step.n)
    if step.tool_uses or step.stop_reason == "pause_turn":
        return None  # tools to run, or a server-side turn to continue
    if step.stop_reason in ("end_turn", "stop_sequence"):
        return "done", text, None
    if step.stop_reason == "max_tokens":
        return "failed", text, f"the response was cut off at max_tokens ({max_tokens:,})"
    return "failed", text, f"unexpected stop_reason {str(step.stop_reason)[:60]!r}"


def _text_of(blocks: list[dict]) -> str:
    return "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text").strip()
