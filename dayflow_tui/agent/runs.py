"""Runs started, queued and resumed: one set of defaults, then claim-and-drive.

``run_brief`` creates a claimed run and drives it; ``queue_brief`` records one
for a worker, with the same defaults (``_new_run``); ``resume`` continues a
run where it stopped, after checking (with nothing written) everything that
could refuse it. Every drive goes through ``_drive_leased``: the drive
watchers (``events.DriveWatch``, such as the live trace export a front end
registers) are started, the ``Driver`` runs the steps, and however the
attempt ends the lease is released and a failed attempt is counted.
"""

from __future__ import annotations

import gc
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable

from ..config import settings
from ..config.errors import AgentChanged, DayflowError, HistoryError, ModelCallFailed, RunBusy, UsageError
from ..money.cost import run_cost
from ..redaction import redact_and_cut
from ..store import (Lease, ReplayStep, ReplySpooled, Run, RunStatus, Store, StepRecord, ingest_spool,
                     refuse_imported, step_blocks, still_refused)
from ..store.retry import patience
from . import brief, request, subagents, telemetry
from .approvals import RunWaiting, approval_tools_for_new_run
from .streaming import OnDelta
from .budget import check_dollar_budget, previous_call
from .define import Agent
from .driver import CancelObserved, Driver, final_state
from .events import DEFAULT_MAX_STEPS, OnStep, RunResult, StepEvent, check_watches, drive_watches
from .messages import add_assistant_turn, messages_and_lengths
from .registry import agent_columns, agent_for_run
from .replies import storable_text
from .tools import ToolContext

DEFAULT_TASK = brief.TASK
__all__ = ["DEFAULT_MAX_STEPS", "DEFAULT_TASK", "default_compact_at", "default_model", "queue_brief", "resume",
           "run_brief"]


def default_compact_at() -> int | None:
    """``DAYFLOW_COMPACT_AT`` (estimated tokens; unset, ``0`` or ``off`` for none).

    The compaction threshold of runs started without one, so every front end
    (CLI, dashboard) starts runs the same way.
    """
    return settings.current().compact_at or None  # checked when the settings were read


def default_model() -> str:
    """``DAYFLOW_MODEL``, else the offline model when no API key is set."""
    return settings.current().default_model


@dataclass(frozen=True)
class _NewRun:
    """A new run's settings once every default is filled in: the one place ``run_brief`` and ``queue_brief``
    take them from."""

    agent: Agent
    columns: dict
    task: str
    model: str
    max_steps: int
    compact_at: int | None
    budget_usd: Decimal | None
    approval_tools: tuple[str, ...]


def _new_run(agent: Agent | None, agent_ref: str | None, user_msg: str | None, model: str | None,
             max_steps: int | None, compact_at: int | None, budget_usd: Decimal | None,
             approval_tools: tuple[str, ...] | None) -> _NewRun:
    """Fill in a new run's defaults, refusing (before anything is written) what could never run."""
    agent = (agent or brief.AGENT).connected()  # MCP tools are part of what the run records
    task = user_msg or agent.task
    if not task:
        raise UsageError(f"agent {agent.name} has no default task: say what to ask it")
    columns = agent_columns(agent, agent_ref if agent is not brief.AGENT else None)
    columns["title"] = agent.title_for(task)
    model = model or agent.model or default_model()
    budget_usd = budget_usd if budget_usd is not None else settings.current().budget_usd
    check_dollar_budget(model, budget_usd)
    return _NewRun(agent=agent, columns=columns, task=task, model=model, max_steps=max_steps or agent.max_steps,
                   compact_at=(default_compact_at() if compact_at is None else compact_at) or None,
                   budget_usd=budget_usd,
                   approval_tools=approval_tools_for_new_run(agent) if approval_tools is None else approval_tools)


def run_brief(store: Store, *, user_msg: str | None = None, model: str | None = None, client: Any = None,
              budget_tokens: int | None = None, max_steps: int | None = None,
              compact_at: int | None = None, run_id: str | None = None, on_step: OnStep | None = None,
              on_start: Callable[[str], None] | None = None, crash_after_step: int | None = None,
              should_stop: Callable[[], bool] | None = None, budget_usd: Decimal | None = None,
              approval_tools: tuple[str, ...] | None = None, agent: Agent | None = None,
              agent_ref: str | None = None, priority: int = 0, on_delta: OnDelta | None = None) -> RunResult:
    """Start a new run of ``agent`` (default: the built-in brief) and drive it to its end (or until a tool
    call waits for a person). ``agent_ref`` is where the agent is found again (``registry.resolve_ref``).

    ``on_delta`` is told each piece of a reply as it streams in (``streaming.ReplyDelta``, on the driving
    thread; never stored). ``compact_at`` (estimated tokens of the message list) turns compaction on;
    ``None`` takes ``DAYFLOW_COMPACT_AT``, ``0`` means off. ``budget_usd``
    (None: the ``budget_usd`` setting) is the whole run's dollar limit.
    """
    new = _new_run(agent, agent_ref, user_msg, model, max_steps, compact_at, budget_usd, approval_tools)
    if client is None:
        client = request.make_client(new.model)  # fail on a missing key before a run is recorded
    check_watches()
    run, lease = store.create_claimed_run(new.task, model=new.model, budget_tokens=budget_tokens,
                                          max_steps=new.max_steps, compact_at=new.compact_at, run_id=run_id,
                                          budget_usd=new.budget_usd, approval_tools=new.approval_tools,
                                          agent=new.columns, priority=priority)
    if on_start is not None:
        on_start(run.id)
    return _drive_leased(store, run.id, lease, client=client, on_step=on_step, on_delta=on_delta,
                         crash_after_step=crash_after_step, should_stop=should_stop, agent=new.agent)


def queue_brief(store: Store, *, user_msg: str | None = None, model: str | None = None,
                budget_tokens: int | None = None, max_steps: int | None = None,
                compact_at: int | None = None, budget_usd: Decimal | None = None,
                approval_tools: tuple[str, ...] | None = None, agent: Agent | None = None,
                agent_ref: str | None = None, priority: int = 0) -> str:
    """Record a run for a worker to drive (``dayflow worker``); the same defaults as ``run_brief``.

    No client is built here: the model's key is needed where the worker runs.
    """
    new = _new_run(agent, agent_ref, user_msg, model, max_steps, compact_at, budget_usd, approval_tools)
    run = store.create_run(new.task, model=new.model, budget_tokens=budget_tokens, max_steps=new.max_steps,
                           compact_at=new.compact_at, status=RunStatus.QUEUED, budget_usd=new.budget_usd,
                           approval_tools=new.approval_tools, agent=new.columns, priority=priority)
    return run.id


def resume(run_id: str, *, store: Store, client: Any = None, budget_tokens: int | None = None,
           max_steps: int | None = None, compact_at: int | None = None, on_step: OnStep | None = None,
           on_start: Callable[[str], None] | None = None, crash_after_step: int | None = None,
           should_stop: Callable[[], bool] | None = None, lease: Lease | None = None,
           budget_usd: Decimal | None = None, allow_changed_agent: bool = False,
           on_delta: OnDelta | None = None) -> RunResult:
    """Continue a run where it stopped. A finished run returns its stored result, builds no client, calls nothing.

    ``budget_tokens``, ``budget_usd``, ``max_steps`` and ``compact_at`` (``0``: off) replace the run's own
    when given.
    ``lease``: the run is already claimed (a worker's ``store.claim_next``). Without one (a person's
    resume) everything that can refuse the run is checked before it is claimed, so a resume that
    cannot start changes nothing: the history is validated and the client built first.
    """
    run = store.get_run(run_id)
    refuse_imported(run)  # an imported session (Claude Code's) is read-only here: said before anything else
    if lease is None:
        if run.status == RunStatus.WAITING.value:
            below = subagents.waiting_below(store, run.id)
            if below and not any(row.state == "pending" for row in store.approvals(run.id)):
                # The tree waits on a subagent's call: the decision is asked there, not of this run.
                raise RunBusy(f"run {run.id} waits on its subagent's run {below[0].id}, whose tool call waits for a "
                              f"decision: see `dayflow pending`, then `dayflow approve {below[0].id}`, then "
                              f"`dayflow resume {run.id}`")
        still_refused(run)  # cancelled (or waiting for a person): said before anything is loaded or built
    if run.status != RunStatus.DONE and client is None:
        request.start_client_in_background(run.model)  # the SDK loads while the history is read and checked
    if run.status == RunStatus.DONE:
        if lease is not None:
            store.release(lease)
        return RunResult(run.id, run.status, run.final_text, run.step_count, run.input_tokens,
                         run.output_tokens, 0, run.step_count)
    agent = change = None
    validated = None
    if lease is None:
        check_dollar_budget(run.model, budget_usd)
        # A damaged history is refused with nothing written; a sound one is handed to the drive, which reads it
        # again only if the run moved on before the claim (a 10,000-step history read and decoded once).
        validated = _read_history(store, run)
        # An agent that cannot be loaded, or whose code changed, is refused with nothing written.
        agent, change = agent_for_run(run, allow_changed=allow_changed_agent)
        if client is None:
            client = request.make_client(run.model)  # a missing key is refused with nothing written
        check_watches()
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
    return _drive_leased(store, run.id, lease, client=client, on_step=on_step, on_delta=on_delta,
                         crash_after_step=crash_after_step, should_stop=should_stop, agent=agent,
                         validated=validated)


def drive_claimed(store: Store, run_id: str, lease: Lease, *, agent: Agent, client: Any = None,
                  above: tuple[Lease, ...] = ()) -> RunResult:
    """Drive a run this process holds the lease of with ``agent`` (a subagent's run, started by its parent's
    call: ``subagents.py``); ``above`` are its parents' leases (their cancel stops it)."""
    return _drive_leased(store, run_id, lease, client=client, agent=agent, above=above)


def hand_over(ctx: ToolContext, agent: Agent, task: str, handback: str) -> str:
    """A subagent's call (``ToolContext.hand_over``): its child run started, resumed or read, and driven here."""
    return subagents.run_child(ctx, agent, task, handback, drive=drive_claimed)


def _drive_leased(store: Store, run_id: str, lease: Lease, **options: Any) -> RunResult:
    """Drive a claimed run, watched by every registered ``DriveWatch`` (the live trace export, when set)."""
    watching = []
    try:
        for hook in drive_watches():
            started = hook.start(store, run_id)
            if started is not None:
                watching.append(started)
    except BaseException:
        for started in watching:
            _finish_quietly(started)
        store.release(lease)
        raise
    if not watching:
        return _drive_claimed(store, run_id, lease, **options)
    options["on_step"] = _told_first(watching, options.get("on_step"))
    problems: list[str] = []
    try:
        result = _drive_claimed(store, run_id, lease, **options)
    finally:
        # After the release: a watcher's end (the agent span) sees the run as it now stands.
        problems = [problem for problem in (started.finish() for started in watching) if problem]
    result.trace_problem = "; ".join(problems) or None
    return result


def _told_first(watching: list, on_step: OnStep | None) -> OnStep:
    """An ``on_step`` that tells every watcher of the step, then the caller's own callback."""
    def both(event: StepEvent) -> None:
        for started in watching:
            started.on_step(event)
        if on_step is not None:
            on_step(event)

    return both


def _finish_quietly(started) -> None:
    try:
        started.finish()
    except Exception:
        pass  # the watcher failed to start a drive that will not happen: nothing to report it on


def _history(store: Store, run: Run, validated: tuple | None) -> tuple[list[ReplayStep], list[dict], list]:
    """The run's steps, messages and their lengths: those validated before the claim when the run is as it was then.

    Only the store's two step writers change a history: ``append_step`` (the run's step count moves) and
    ``set_tool_results`` on the last step (its results appear); anything else is read again.
    """
    if validated is not None:
        steps = validated[0]
        last = steps[-1] if steps else None
        if run.step_count == len(steps) and (last is None or last.n == len(steps)) and (
                last is None or last.tool_results is not None or store.step_at(run.id, last.n).tool_results is None):
            return validated
    return _read_history(store, run)


def _read_history(store: Store, run: Run):
    """The run's stored steps, its messages and their encoded lengths, read and decoded once.

    The cyclic collector is paused while it is built: decoding a long history makes millions of objects that
    all live on, and each full collection the growth set off walked all of them again (at 10,000 steps a
    fifth of the resume's work). Nothing made here is a cycle; the collector runs again as soon as it ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        steps = store.replay_steps(run.id)
        return (steps, *messages_and_lengths(run, steps))
    finally:
        if was_enabled:
            gc.enable()


def _drive_claimed(store: Store, run_id: str, lease: Lease, *,
                   validated: tuple | None = None, **options: Any) -> RunResult:
    """Drive a leased run; however the attempt ends, the lease is released.

    An attempt that ends without committing a step (a reply that could not be
    stored, a missing key on a worker's host, a history that cannot be sent)
    is recorded on the run: it backs off, and after ``max_attempts`` in a row
    it is set ``failed`` with the reason. No run is retried in a loop.
    """
    lease.start_heartbeat()
    driver: Driver | None = None
    committed_before = None
    try:
        ingest_spool(store, run_id, lease)  # a reply this host already paid for goes in before any call
        if lease.cancel is not None:
            raise CancelObserved(lease.cancel)  # asked of an owner that died: nothing more runs
        run = store.get_run(run_id)
        committed_before = run.step_count
        limit = settings.current().max_attempts
        if run.attempts > limit:
            # Each earlier attempt ended with its process (killed, crashed) before a step: stop here.
            reason = f"gave up after {run.attempts - 1} attempts: {run.error or 'each one ended with its process'}"
            store.finish_run(run_id, RunStatus.FAILED, error=redact_and_cut(reason, 400), lease=lease)
            return RunResult(run.id, RunStatus.FAILED.value, None, run.step_count, run.input_tokens,
                             run.output_tokens, 0, run.step_count, reason)
        steps, messages, lengths = _history(store, run, validated)
        driver = Driver(store, run_id, lease, **options)
        driver.ctx.hand_over = hand_over  # a subagent's call drives its child run through this module
        if driver.client is None:
            driver.client = request.make_client(run.model)
        store.mark_running(run_id, lease)
        spent_in = sum(s.input_tokens for s in steps)
        spent_out = sum(s.output_tokens for s in steps)
        if steps:
            driver.spend.replayed = run_cost(store, run_id).cost
            driver.spend.largest_output = max(s.output_tokens for s in steps)
            last = steps[-1]
            assistant = step_blocks(last, "assistant") or []
            # A final reply that a person answered (a fork's note after it) is not the end any more.
            final = (final_state(_record_of(last, assistant), run_id, compacting=bool(run.compact_at))
                     if assistant and last.tool_results is None else None)
            if final is not None:
                # The final response is committed; only the run's end was lost.
                status, text, error = final
                store.finish_run(run_id, status, final_text=storable_text(text), error=storable_text(error),
                                 lease=lease)
                return driver.result(status, text, last.n, spent_in, spent_out, len(steps), error)
            if last.tool_results is None and any(b.get("type") == "tool_use" for b in assistant):
                # Crashed while tools ran: the paid response is stored, so run the
                # tools (side effects are idempotent by key) and make no new call.
                results = driver.run_pending_tools(last.n, assistant, (spent_in, spent_out), last.stop_reason)
                before = len(messages)
                add_assistant_turn(messages, assistant)
                # Lengths held up to the turn this changed (a pause_turn's continuation joins the last one);
                # the driver measures the rest.
                lengths = lengths[:before - (len(messages) == before)]
                messages.append({"role": "user", "content": results})
        if steps and run.budget_usd is not None:
            driver.spend.previous = previous_call(store, run, messages)
        return driver.drive(messages, start_step=len(steps) + 1, spent_in=spent_in, spent_out=spent_out,
                            replayed=len(steps), lengths=lengths)
    except CancelObserved as exc:
        # The reply of the call in flight (if any) is committed; its tools and every later call are not run.
        store.finish_run(run_id, RunStatus.CANCELLED, error=storable_text(str(exc)), lease=lease)
        run = store.get_run(run_id)
        return RunResult(run.id, RunStatus.CANCELLED.value, None, run.step_count, run.input_tokens,
                         run.output_tokens, driver.calls if driver else 0, committed_before or 0, run.error,
                         cost=driver.spend.total if driver else None, paid=driver.spend.paid_or_none if driver else None)
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
        backoff_s = config.retry_backoff_s * 2 ** max(attempts - 1, 0)
        gave_up = store.record_failed_attempt(run_id, lease, reason, max_attempts=config.max_attempts,
                                              backoff_s=backoff_s)
        telemetry.note("run.backoff", run_id=run_id, attempt=attempts, backoff_s=None if gave_up else backoff_s,
                       gave_up=bool(gave_up), reason=reason)
    except Exception:
        pass  # recording is best effort; the claim already counted the attempt


def _record_of(step, assistant: list[dict]) -> StepRecord:
    return StepRecord(n=step.n, stop_reason=step.stop_reason, assistant=assistant)
