"""What every command that drives a run shares: its options, the line per step, and how it ends.

``brief``, ``run``, ``resume``, ``fork --run``, ``approve`` and ``deny`` all
drive a run through the loop; they print its steps, wait out rate limits and
end (exit code, the answer, what waits for a person) the same way.
"""

from __future__ import annotations

import argparse
import sys

from ..safe_text import one_line, printable
from ..store.status import RunStatus
from .opening import OPENED


def show_step(event) -> None:
    if event.phase == "response":
        from ..money.cost import format_usd

        print(f"[step {event.n}] stop={event.stop_reason}  tokens={event.input_tokens}/{event.output_tokens}  "
              f"cost={format_usd(event.cost, unknown='unknown')}  run={format_usd(event.run_cost, unknown='unknown')}")
        if event.compacted_est_tokens is not None:
            print(f"    (request compacted: ~{event.request_est_tokens:,} -> ~{event.compacted_est_tokens:,} "
                  "estimated tokens)")
        for block in event.assistant:
            if block.get("type") == "tool_use":
                print(f"    -> {printable(block.get('name'))}({printable(repr(block.get('input')))})")
    else:
        errors = sum(1 for r in event.tool_results or [] if r.get("is_error"))
        note = f", {errors} error(s)" if errors else ""
        print(f"    <- {len(event.tool_results or [])} tool result(s){note}")
    sys.stdout.flush()


def start_logs(args: argparse.Namespace) -> None:
    """Events go to stderr in the ``--log-format`` and from the ``--log-level`` asked for (else the settings')."""
    from ..config import settings
    from ..ops import logs

    settings.apply_flags(log_format=getattr(args, "log_format", None), log_level=getattr(args, "log_level", None))
    if settings.current().log_format == "json":
        logs.configure(stream=sys.stderr)
        logs.stderr_as_events()  # the command's own lines ([run ID], errors) are events too: all of stderr is JSON
    else:
        logs.configure()


def driving_options(args: argparse.Namespace) -> dict:
    from ..config import settings

    settings.apply_flags(offline_delay_s=args.delay)
    return dict(budget_tokens=args.budget, compact_at=args.compact_at, crash_after_step=args.crash_after,
                on_step=show_step if args.verbose else None, budget_usd=args.budget_usd)


def finish(result) -> int:
    if result.trace_problem:
        print(f"dayflow: warning: {printable(result.trace_problem)}", file=sys.stderr)
    if result.status == "done":
        print(printable(result.final_text or ""))
        return 0
    if result.status == RunStatus.WAITING.value:
        say_what_waits(result.run_id)
        return 0  # nothing failed: the run waits for a person, its paid reply committed
    if result.status == RunStatus.CANCELLED.value:
        # Someone cancelled it (`dayflow cancel`, the dashboard): not a failure of this command's run to mend.
        kept = (f"its {result.steps} committed step(s) are kept (a fork goes on from them: dayflow fork "
                f"{result.run_id} --at {result.steps} --run)" if result.steps else "no step was committed")
        print(f"dayflow: run {result.run_id} {printable(result.error or 'cancelled')}; {kept}", file=sys.stderr)
        return 3
    advice = f"; continue with: dayflow resume {result.run_id}" if result.resume_helps else ""
    print(f"dayflow: run {result.run_id} stopped ({result.status}): {printable(result.error or '')}{advice}",
          file=sys.stderr)
    return 3


def watch_drives() -> None:
    """The runs this command drives send their spans live when the ``otel_endpoint`` setting is set.

    The agent does not know the OpenTelemetry export; it calls the drive watchers registered with it
    (``agent.events.DriveWatch``), and this puts the live export among them. Imported here, not at the
    top: a reading command that shares this module (``export``, ``pending``) does not load it.
    """
    from ..otel.live import watch_drives as watch_with_live_export

    watch_with_live_export()


def waiting_out_rate_limits(start, store, options: dict):
    """``start()``, and while the model API pushes back (429, 529) wait as it asks and resume the run,
    saying so on stderr, for at most the ``rate_limit_wait_s`` setting in all (past it: one line, exit 75,
    the run left queued for a worker or a later resume). Every drive is watched (``watch_drives``)."""
    from ..config import settings
    from ..agent.backpressure import wait_out
    from ..agent.runs import resume

    import logging

    from ..ops import logs

    watch_drives()
    again = {k: v for k, v in options.items() if k in ("on_step", "on_start", "crash_after_step")}
    return wait_out(start, lambda run_id: resume(run_id, store=store, **again),
                    bound_s=settings.current().rate_limit_wait_s,
                    say=lambda line: logs.event(logging.WARNING, "rate_limit.wait", line))


def saved_text(result) -> str:
    """What a resume paid, and what it did not pay again: the committed steps' cost."""
    from ..money.cost import format_usd

    text = f"this resume paid {format_usd(result.paid)} for {result.calls} call(s)"
    if result.replayed_steps:
        text += (f"; the {result.replayed_steps} committed step(s) ({format_usd(result.replayed_cost)}) "
                 "were not paid again")
    return text


def say_what_waits(run_id: str) -> None:
    store = OPENED[-1]
    if not any(row.state == "pending" for row in store.approvals(run_id)):
        from ..agent.subagents import waiting_below

        for child in waiting_below(store, run_id):  # the run waits on a subagent's run: that is where to decide
            print(f"[waiting {run_id}] its subagent {printable(child.agent or '')} (run {child.id}) waits for a "
                  "decision:", file=sys.stderr)
            say_what_waits(child.id)
        print(f"[waiting {run_id}] once decided, go on with: dayflow resume {run_id}", file=sys.stderr)
        return
    for row in store.approvals(run_id):
        if row.state == "pending":
            print(f"[waiting {run_id}] {printable(row.tool_name)} {one_line(row.input, 200)} "
                  f"({printable(row.tool_use_id)}, arguments {row.input_hash[:12]})", file=sys.stderr)
    print(f"[waiting {run_id}] decide with: dayflow approve {run_id}  or  dayflow deny {run_id} --reason ...",
          file=sys.stderr)
