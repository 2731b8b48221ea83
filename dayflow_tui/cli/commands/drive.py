"""Commands that drive runs: ``brief``, ``run``, ``resume`` (and ``--dry-run``), ``worker``."""

from __future__ import annotations

import argparse
import sys

from ...config.errors import DayflowError, SchemaAhead, UsageError
from ...safe_text import printable
from ..driving import driving_options, finish, saved_text, waiting_out_rate_limits, watch_drives
from ..opening import open_db


def cmd_brief(args: argparse.Namespace) -> int:
    from ...agent.runs import DEFAULT_TASK, DEFAULT_MAX_STEPS, queue_brief, run_brief

    store = open_db(args)
    if args.queue:
        run_id = queue_brief(store, user_msg=args.task or DEFAULT_TASK, model=args.model, budget_tokens=args.budget,
                             max_steps=args.max_steps or DEFAULT_MAX_STEPS, compact_at=args.compact_at,
                             budget_usd=args.budget_usd, priority=args.priority)
        print(run_id)
        at = f" at priority {args.priority}" if args.priority else ""
        print(f"[queued {run_id}]{at} a `dayflow worker` on this database will drive it", file=sys.stderr)
        return 0
    options = driving_options(args)
    result = waiting_out_rate_limits(
        lambda: run_brief(store, user_msg=args.task or DEFAULT_TASK, model=args.model,
                          max_steps=args.max_steps or DEFAULT_MAX_STEPS, priority=args.priority,
                          on_start=lambda rid: print(f"[run {rid}]", file=sys.stderr, flush=True), **options),
        store, options)
    return finish(result)


def cmd_run(args: argparse.Namespace) -> int:
    from ...agent.runs import queue_brief, run_brief
    from ...agent.registry import load_agent, resolve_ref

    if args.task is not None and not args.task.strip():
        raise UsageError("the task is empty: say what to ask the agent")
    ref = resolve_ref(args.agent_spec)
    agent = load_agent(ref)  # an agent that cannot be loaded is one line, before anything is opened
    store = open_db(args)
    if args.queue:
        run_id = queue_brief(store, user_msg=args.task, model=args.model, budget_tokens=args.budget,
                             max_steps=args.max_steps, compact_at=args.compact_at, budget_usd=args.budget_usd,
                             agent=agent, agent_ref=ref, priority=args.priority)
        print(run_id)
        print(f"[queued {run_id}] agent {printable(agent.name)}: a `dayflow worker` on this database will drive it",
              file=sys.stderr)
        return 0
    options = driving_options(args)
    result = waiting_out_rate_limits(
        lambda: run_brief(store, user_msg=args.task, model=args.model, max_steps=args.max_steps, agent=agent,
                          priority=args.priority,
                          agent_ref=ref, on_start=lambda rid: print(f"[run {rid}] agent {printable(agent.name)}",
                                                                    file=sys.stderr, flush=True), **options),
        store, options)
    return finish(result)


def cmd_resume(args: argparse.Namespace) -> int:
    from ...agent.runs import resume
    from ...money.cost import format_usd

    # A dry run only reads: it never upgrades an older file (nor does anything else to it).
    store = open_db(args, create=False, upgrade=not args.dry_run)
    run_id = args.run_id
    if run_id is None:
        latest = store.latest_unfinished()
        if latest is None:
            raise DayflowError("no unfinished run to resume")
        run_id = latest.id
    run = store.get_run(run_id)
    from ...store import refuse_imported

    refuse_imported(run)  # read-only: nothing is priced, claimed or written
    if args.dry_run:
        return _dry_run(store, run, args)
    if run.status == "done":
        result = resume(run.id, store=store)
        print(f"[resume {run.id}] already finished at step {result.steps}; nothing to call", file=sys.stderr)
        return finish(result)

    def announce(rid: str) -> None:
        from ...money.cost import run_cost

        current = store.get_run(rid)
        paid = run_cost(store, rid).total
        print(f"[resume {rid}] replaying {current.step_count} committed step(s), "
              f"{current.input_tokens} in / {current.output_tokens} out already spent "
              f"({format_usd(paid)}, not paid again)", file=sys.stderr, flush=True)

    options = driving_options(args)
    result = waiting_out_rate_limits(
        lambda: resume(run.id, store=store, max_steps=args.max_steps, on_start=announce,
                       allow_changed_agent=args.allow_changed_agent, **options),
        store, dict(options, on_start=announce))
    if result.status == "done":
        print(f"[resumed {result.run_id} · finished at step {result.steps} · "
              f"{result.input_tokens} in / {result.output_tokens} out total · {saved_text(result)}]", file=sys.stderr)
    elif result.replayed_steps:
        print(f"[resume {result.run_id}] {saved_text(result)}", file=sys.stderr)
    return finish(result)


def _dry_run(store, run, args: argparse.Namespace) -> int:
    """``resume --dry-run``: the next call's size, cache state and price; no call, nothing written."""
    from ...agent.resume_request import resume_estimate
    from ...money.cost import budget_text, format_usd
    from ...store import effective_status

    status = effective_status(run)
    if run.status == "done":
        print(printable(f"[dry run {run.id}] done at step {run.step_count}; a resume makes no call (nothing to pay)"))
        return 0
    found = resume_estimate(store, run.id)
    call = found.call
    print(printable(f"[dry run {run.id}] {status}, {run.step_count} committed step(s); no call was made"))
    size = f"next request: {call.messages} messages, {call.input_tokens:,} input tokens ({call.size_note()})"
    if found.count_error:
        size += f"; the API's count failed: {printable(found.count_error)}"
    print(size)
    if found.pending_tools:
        print(f"  plus the results of {found.pending_tools} tool call(s) from step {run.step_count}, "
              "which the resume runs first (they are not counted here)")
    cache = f"prompt cache: {call.cache_note()}"
    if call.cached_prefix_tokens and call.ttl:
        cache += f" ({min(call.cached_prefix_tokens, call.input_tokens):,} tokens would be read from it)"
    print(cache)
    warm, cold = call.warm_cost, call.cold_cost
    if warm is None or cold is None:
        print(f"next call: price unknown (no price for model {printable(call.model)}; "
              f'add [prices."{printable(call.model)}"] to the settings file)')
    else:
        likely = "warm" if call.warm else "cold"
        print(f"next call: {format_usd(warm.total)} with a warm cache, {format_usd(cold.total)} cold "
              f"(likely: {likely}; reply of {call.expected_output_tokens:,} tokens, this run's largest so far; "
              f"at most {call.max_output_tokens:,})")
    print(f"already paid: {format_usd(found.spent.total)} for {run.step_count} committed step(s); "
          "a resume does not pay for them again")
    budget = budget_text(args.budget_usd or run.budget_usd, found.spent.total)
    if budget:
        print(f"dollar budget: {budget} spent")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    import signal
    import threading

    from ...store import STALE_AFTER_S
    from ...store.retry import keep_trying
    from ...agent.worker import work
    from ..worker_log import WorkerLog

    from ...config import settings

    settings.apply_flags(offline_delay_s=args.delay, metrics_port=args.metrics_port, metrics_host=args.metrics_host)
    metrics = _metrics_or_none()  # checked before anything is opened: a missing prometheus-client is one line
    watch_drives()  # the runs it drives send their spans live (setting otel_endpoint); work() checks the SDK first
    log = WorkerLog(on_event=metrics.worker_event if metrics else None)
    url = metrics.serve() if metrics else None
    stop = threading.Event()
    # SIGTERM (systemd, docker stop) stops like Ctrl-C: each run is released at its next step boundary.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        # A server that is down, restarting or full is waited for (logged), never a reason to exit.
        store = keep_trying(lambda: open_db(args), on_wait=log.waiting_for_database, sleep=stop.wait)
    except SchemaAhead as exc:  # a newer Dayflow migrated the database: this version must not drive it
        log.outdated_at_start(str(exc))
        return SchemaAhead.WORKER_EXIT
    except DayflowError:
        if stop.is_set():
            log.interrupted(connected=False)
            return 0
        raise
    # A long-lived worker loads the SDK (and the offline model, built on its types) before it
    # says it is ready, not inside its first run.
    from ...agent import offline  # noqa: F401

    if metrics:
        metrics.watch(store)
    store.close_thread_connection()  # the main thread only waits from here on: no backend held for it
    log.started(args.concurrency, store.label, args.once, url)
    try:
        outcome = work(store, concurrency=args.concurrency, once=args.once, poll_every=args.poll or 1.0,
                       stale_after=args.stale_after if args.stale_after is not None else STALE_AFTER_S,
                       stop=stop, on_event=log.report, on_step=log.print_step if args.verbose else None)
    except KeyboardInterrupt:
        log.interrupted()
        return 130
    log.stopped(len(outcome.finished), len(outcome.failed))
    if outcome.outdated is not None:  # said when it was noticed (worker.outdated); its runs are released
        return SchemaAhead.WORKER_EXIT
    return 2 if outcome.store_errors and args.once else 0


def _metrics_or_none():
    """The worker's Prometheus metrics when a port is set (``--metrics-port``, the metrics_port setting)."""
    from ...config.settings import current

    if current().metrics_port is None:
        return None
    from ...ops.metrics import WorkerMetrics

    return WorkerMetrics.for_settings()
