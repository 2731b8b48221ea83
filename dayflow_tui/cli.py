"""``dayflow``: the command-line front end over the store and the loop."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from typing import Sequence

from .config import values
from .errors import DayflowError, UsageError
from .safe_text import one_line, printable, printable_json
from .store.status import RunStatus


# Flag values are read by the parsers the settings file uses too (``config.values``): one parser per kind.
_positive_int = values.argument(values.positive)
_thread_count = values.argument(values.thread_count)
_seconds = values.argument(values.seconds, most=values.DAY_S)
_dollars = values.argument(values.dollars, above_zero=True)
_age = values.argument(values.age)
_step_number = values.argument(values.whole, most=1_000_000)


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line, like every other error, and exit 64 (EX_USAGE)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(UsageError.exit_code, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _VersionAction(argparse.Action):
    """``--version``: Dayflow's version with SQLite's, Textual's and the SDK's (looked up only when asked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        import sqlite3
        from importlib import metadata

        def version_of(name: str) -> str:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                return "not installed"

        print(f"dayflow {version_of('dayflow-tui')} (SQLite {sqlite3.sqlite_version}, Textual "
              f"{version_of('textual')}, anthropic {version_of('anthropic')}, peewee {version_of('peewee')}, "
              f"Python {sys.version.split()[0]})")
        parser.exit(0)


def _compact_threshold(text: str) -> int:
    """A token count, or ``off`` (0, which turns off a threshold from the settings): ``--compact-at``."""
    return values.argument(values.tokens_or_off)(text) or 0


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--db", metavar="PATH|URL", help="database file, sqlite:///PATH or "
                        "postgresql://USER@HOST:PORT/DBNAME (default: $DAYFLOW_DB or "
                        "~/.local/share/dayflow/dayflow.db)")

    driving = _Parser(add_help=False)
    driving.add_argument("-v", "--verbose", action="store_true", help="print each step as it commits")
    driving.add_argument("--budget", type=_positive_int, metavar="TOKENS",
                         help="stop when the whole run has spent this many tokens (in + out)")
    driving.add_argument("--budget-usd", type=_dollars, metavar="DOLLARS",
                         help="stop before a call that could take the whole run's spend past this many dollars "
                         "(default: the settings file's budget_usd; resume: the run's own)")
    driving.add_argument("--compact-at", type=_compact_threshold, metavar="TOKENS",
                         help="compact the request when its estimate passes TOKENS, or 'off' "
                         "(default: $DAYFLOW_COMPACT_AT, else off; resume: the run's own)")
    driving.add_argument("--max-steps", type=_positive_int, metavar="N", help="stop after N model calls")
    driving.add_argument("--delay", type=_seconds, metavar="SECONDS",
                         help="slow the offline model down by this much per call (to watch a run)")
    driving.add_argument("--crash-after", type=_positive_int, metavar="N",
                         help="test hook: exit right after committing step N")

    parser = _Parser(prog="dayflow", description="Durable daily-brief agent runs.")
    parser.add_argument("--version", action=_VersionAction,
                        help="Dayflow's version, with SQLite's, Textual's and the anthropic SDK's")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    brief = sub.add_parser("brief", parents=[common, driving], help="start a new run and print the brief")
    brief.add_argument("--model", help="model name, or 'offline' (default: $DAYFLOW_MODEL, else offline "
                       "without ANTHROPIC_API_KEY)")
    brief.add_argument("--task", help="what to ask the agent (default: the daily brief)")
    brief.add_argument("--queue", action="store_true",
                       help="only add the run to the queue and print its id; a `dayflow worker` drives it")

    run = sub.add_parser("run", parents=[common, driving], help="start a run of your own agent (MODULE:ATTR or "
                         "path/to/file.py:ATTR) and print its answer")
    run.add_argument("agent_spec", metavar="AGENT", help="MODULE:ATTR or path/to/file.py:ATTR naming an Agent")
    run.add_argument("task", nargs="?", metavar="TASK", help="what to ask it (default: the agent's own task)")
    run.add_argument("--model", help="model name, or 'offline' (default: the agent's, else as for brief)")
    run.add_argument("--queue", action="store_true",
                     help="only add the run to the queue and print its id; a `dayflow worker` drives it")

    worker = sub.add_parser("worker", parents=[common], help="drive queued and interrupted runs")
    worker.add_argument("--once", action="store_true", help="take what is waiting now, then exit")
    worker.add_argument("--concurrency", type=_thread_count, default=1, metavar="N",
                        help="drive up to N runs at a time (threads; default 1)")
    worker.add_argument("--poll", type=_seconds, default=1.0, metavar="SECONDS",
                        help="how often an idle worker looks for work (default 1)")
    worker.add_argument("--stale-after", type=_seconds, default=None, metavar="SECONDS",
                        help="take over a run from another host when its heartbeat is this old (default 60)")
    worker.add_argument("--delay", type=_seconds, metavar="SECONDS",
                        help="slow the offline model down by this much per call")
    worker.add_argument("-v", "--verbose", action="store_true", help="print each step as it commits")

    runs = sub.add_parser("runs", parents=[common], help="list runs, newest first")
    runs.add_argument("--json", action="store_true", help="machine-readable output")
    runs.add_argument("--limit", type=_positive_int, default=50)
    runs.add_argument("--status", choices=[s.value for s in RunStatus])

    resume = sub.add_parser("resume", parents=[common, driving], help="continue an unfinished run")
    resume.add_argument("run_id", nargs="?", metavar="RUN_ID", help="default: the latest unfinished run")
    resume.add_argument("--dry-run", action="store_true",
                        help="make no call: print the next request's size, whether the prompt cache is likely "
                        "warm, and what the next call would cost warm and cold")
    resume.add_argument("--allow-changed-agent", action="store_true",
                        help="go on although the run's agent changed since it started (the new definition "
                        "applies from the next call, and the run records it)")

    tasks = sub.add_parser("tasks", parents=[common], help="list tasks")
    tasks.add_argument("--all", action="store_true", help="include finished tasks")
    tasks.add_argument("--json", action="store_true")

    search = sub.add_parser("search", parents=[common], help="find text in every run, newest first",
                            description="Search every run's task, model text, tool calls, tool results, final "
                            'text and errors. QUERY: words (all must match), "exact phrase", -word, prefix*, '
                            "and status:S tool:NAME run:ID in:text|args|result|error|final|task.")
    search.add_argument("query", nargs="*", metavar="QUERY", help="what to look for (quote phrases for the shell)")
    search.add_argument("--json", action="store_true", help="machine-readable output")
    search.add_argument("--status", metavar="S[,S]", help="only runs with these statuses (interrupted included)")
    search.add_argument("--agent", metavar="NAME", help="only runs of this agent")
    search.add_argument("--tool", metavar="NAME", action="append", default=[],
                        help="only calls to this tool and their results (repeatable)")
    search.add_argument("--since", metavar="WHEN", help="only hits newer than this: an age (90s, 30m, 12h, 7d, 2w) or a date")
    search.add_argument("--limit", type=_positive_int, default=50, metavar="N", help="at most N hits (default 50)")
    search.add_argument("--reindex", action="store_true",
                        help="rebuild the search index from every stored run, then exit")

    show = sub.add_parser("show", parents=[common], help="print a run's transcript")
    show.add_argument("run_id", metavar="RUN_ID", help="a run id, or the start of one")
    raw = show.add_mutually_exclusive_group()
    raw.add_argument("--raw", action="store_true", help="plain JSON, one document per step: the blocks and "
                     "tool results as stored, the reply body as the API sent it, tokens")
    raw.add_argument("--jsonl", action="store_true", help="the same, one step per line")

    sub.add_parser("migrate", parents=[common], help="upgrade a database written by an older Dayflow")
    _add_travel_commands(sub, common)
    _add_approval_commands(sub, common)
    _add_fork_commands(sub, common, driving)

    spend = sub.add_parser("spend", parents=[common], help="dollars spent, by agent, model or day")
    spend.add_argument("--since", metavar="SPAN|DATE",
                       help="count calls made since: an age (90s, 30m, 12h, 7d, 2w) or a date (default: all time)")
    spend.add_argument("--by", choices=["agent", "model", "day"], default="model",
                       help="one line per agent, model or UTC day (default: model)")
    spend.add_argument("--json", action="store_true", help="machine-readable output")

    prices = sub.add_parser("prices", help="where prices come from, and the rates Dayflow uses")
    prices.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


_OPENED: list = []  # stores this command opened, closed before the process exits


def _open(args: argparse.Namespace, *, create: bool = True, upgrade: bool = True):
    from .store import open_store
    from .terminal_progress import ProgressBar

    # Opening may migrate, and the migration that adds the search index reads every step: a bar on a terminal.
    with ProgressBar.for_stderr("indexing runs for search") as bar:
        store = open_store(args.db, create=create, upgrade=upgrade, on_progress=bar, on_note=_print_note)
    _OPENED.append(store)
    return store


def _print_note(text: str) -> None:
    print(f"dayflow: note: {printable(text)}", file=sys.stderr)


def _open_for_reading(args: argparse.Namespace):
    """Reading never writes: a named database (``--db``, ``$DAYFLOW_DB``) must exist, so a typo is not a new
    empty file, and an older schema is not upgraded behind the reader's back."""
    from .settings import current

    return _open(args, create=not (args.db or current().db), upgrade=False)


def _print_step(event) -> None:
    if event.phase == "response":
        from .money.cost import format_usd

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


def _driving_options(args: argparse.Namespace) -> dict:
    from . import settings

    settings.apply_flags(offline_delay_s=args.delay)
    return dict(budget_tokens=args.budget, compact_at=args.compact_at, crash_after_step=args.crash_after,
                on_step=_print_step if args.verbose else None, budget_usd=args.budget_usd)


def _finish(result) -> int:
    if result.trace_problem:
        print(f"dayflow: warning: {printable(result.trace_problem)}", file=sys.stderr)
    if result.status == "done":
        print(printable(result.final_text or ""))
        return 0
    if result.status == RunStatus.WAITING.value:
        _say_what_waits(result.run_id)
        return 0  # nothing failed: the run waits for a person, its paid reply committed
    advice = f"; continue with: dayflow resume {result.run_id}" if result.resume_helps else ""
    print(f"dayflow: run {result.run_id} stopped ({result.status}): {printable(result.error or '')}{advice}",
          file=sys.stderr)
    return 3


def cmd_brief(args: argparse.Namespace) -> int:
    from .agent.loop import DEFAULT_TASK, DEFAULT_MAX_STEPS, queue_brief, run_brief

    store = _open(args)
    if args.queue:
        run_id = queue_brief(store, user_msg=args.task or DEFAULT_TASK, model=args.model, budget_tokens=args.budget,
                             max_steps=args.max_steps or DEFAULT_MAX_STEPS, compact_at=args.compact_at,
                             budget_usd=args.budget_usd)
        print(run_id)
        print(f"[queued {run_id}] a `dayflow worker` on this database will drive it", file=sys.stderr)
        return 0
    options = _driving_options(args)
    result = _waiting_out_rate_limits(
        lambda: run_brief(store, user_msg=args.task or DEFAULT_TASK, model=args.model,
                          max_steps=args.max_steps or DEFAULT_MAX_STEPS,
                          on_start=lambda rid: print(f"[run {rid}]", file=sys.stderr, flush=True), **options),
        store, options)
    return _finish(result)


def cmd_run(args: argparse.Namespace) -> int:
    from .agent.loop import queue_brief, run_brief
    from .agent.registry import load_agent, resolve_ref

    if args.task is not None and not args.task.strip():
        raise UsageError("the task is empty: say what to ask the agent")
    ref = resolve_ref(args.agent_spec)
    agent = load_agent(ref)  # an agent that cannot be loaded is one line, before anything is opened
    store = _open(args)
    if args.queue:
        run_id = queue_brief(store, user_msg=args.task, model=args.model, budget_tokens=args.budget,
                             max_steps=args.max_steps, compact_at=args.compact_at, budget_usd=args.budget_usd,
                             agent=agent, agent_ref=ref)
        print(run_id)
        print(f"[queued {run_id}] agent {printable(agent.name)}: a `dayflow worker` on this database will drive it",
              file=sys.stderr)
        return 0
    options = _driving_options(args)
    result = _waiting_out_rate_limits(
        lambda: run_brief(store, user_msg=args.task, model=args.model, max_steps=args.max_steps, agent=agent,
                          agent_ref=ref, on_start=lambda rid: print(f"[run {rid}] agent {printable(agent.name)}",
                                                                    file=sys.stderr, flush=True), **options),
        store, options)
    return _finish(result)


def cmd_resume(args: argparse.Namespace) -> int:
    from .agent.loop import resume
    from .money.cost import format_usd

    # A dry run only reads: it never upgrades an older file (nor does anything else to it).
    store = _open(args, create=False, upgrade=not args.dry_run)
    run_id = args.run_id
    if run_id is None:
        latest = store.latest_unfinished()
        if latest is None:
            raise DayflowError("no unfinished run to resume")
        run_id = latest.id
    run = store.get_run(run_id)
    if args.dry_run:
        return _dry_run(store, run, args)
    if run.status == "done":
        result = resume(run.id, store=store)
        print(f"[resume {run.id}] already finished at step {result.steps}; nothing to call", file=sys.stderr)
        return _finish(result)

    def announce(rid: str) -> None:
        from .money.cost import run_cost

        current = store.get_run(rid)
        paid = run_cost(store, rid).total
        print(f"[resume {rid}] replaying {current.step_count} committed step(s), "
              f"{current.input_tokens} in / {current.output_tokens} out already spent "
              f"({format_usd(paid)}, not paid again)", file=sys.stderr, flush=True)

    options = _driving_options(args)
    result = _waiting_out_rate_limits(
        lambda: resume(run.id, store=store, max_steps=args.max_steps, on_start=announce,
                       allow_changed_agent=args.allow_changed_agent, **options),
        store, dict(options, on_start=announce))
    if result.status == "done":
        print(f"[resumed {result.run_id} · finished at step {result.steps} · "
              f"{result.input_tokens} in / {result.output_tokens} out total · {_saved(result)}]", file=sys.stderr)
    elif result.replayed_steps:
        print(f"[resume {result.run_id}] {_saved(result)}", file=sys.stderr)
    return _finish(result)


def _waiting_out_rate_limits(start, store, options: dict):
    """``start()``, and while the model API pushes back (429, 529) wait as it asks and resume the run,
    saying so on stderr, for at most the ``rate_limit_wait_s`` setting in all (past it: one line, exit 75,
    the run left queued for a worker or a later resume)."""
    from . import settings
    from .agent.backpressure import wait_out
    from .agent.loop import resume

    again = {k: v for k, v in options.items() if k in ("on_step", "on_start", "crash_after_step")}
    return wait_out(start, lambda run_id: resume(run_id, store=store, **again),
                    bound_s=settings.current().rate_limit_wait_s,
                    say=lambda line: print(line, file=sys.stderr, flush=True))


def _saved(result) -> str:
    """What a resume paid, and what it did not pay again: the committed steps' cost."""
    from .money.cost import format_usd

    text = f"this resume paid {format_usd(result.paid)} for {result.calls} call(s)"
    if result.replayed_steps:
        text += (f"; the {result.replayed_steps} committed step(s) ({format_usd(result.replayed_cost)}) "
                 "were not paid again")
    return text


def _dry_run(store, run, args: argparse.Namespace) -> int:
    """``resume --dry-run``: the next call's size, cache state and price; no call, nothing written."""
    from .agent.resume_request import resume_estimate
    from .money.cost import budget_text, format_usd
    from .store import effective_status

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


def cmd_runs(args: argparse.Namespace) -> int:
    from .views.costs import budget_text, cache_text, cost_text
    from .views.runs import run_json, run_lines

    store = _open_for_reading(args)
    lines = run_lines(store, limit=args.limit, status=args.status)
    if args.json:
        print(printable_json([run_json(line) for line in lines]))
        return 0
    if not lines:
        if args.status:
            print(f"no {args.status} runs", file=sys.stderr)
        else:
            print("no runs yet; start one with: dayflow brief", file=sys.stderr)
    for shown in lines:  # forks under their parents: the same tree as the dashboard's (views.forks)
        r, depth, cost = shown.run, shown.depth, shown.cost
        indent = "  " * (depth - 1) + "└─ " if depth else ""
        line = (f"{indent}{printable(r.id)}  {shown.status:<11}  {printable(r.created_at[:19])}  steps={r.step_count}  "
                f"tokens={r.input_tokens}/{r.output_tokens}  cost={cost_text(cost.total)}  "
                f"cache={cache_text(cost)}  {printable(r.model)}")
        budget = budget_text(r.budget_usd, cost.total)
        if budget:
            line += f"  budget={budget.replace(' ', '')}"
        if r.agent and r.agent != "brief":
            line += f"  agent={printable(r.agent)}"
        if r.parent_id and not depth:
            line += f"  fork of {printable(r.parent_id)} at step {r.forked_at}"
        elif r.parent_id:
            line += f"  at step {r.forked_at}"
        if r.error and r.status != "done":
            line += f"  {one_line(r.error, 60)}"
        print(printable(line))  # counts and the status too are whatever a (damaged) row holds
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from .views.costs import format_usd, usd_number
    from .views.tasks import task_lines

    store = _open_for_reading(args)
    lines = task_lines(store, include_done=args.all)
    if args.json:
        print(printable_json([{"id": t.id, "title": t.title, "due": t.due, "notes": t.notes, "done": t.done,
                               "idempotency_key": t.idempotency_key, "run_id": t.run_id,
                               "run_cost_usd": usd_number(line.run_cost.total) if t.run_id else None}
                              for line in lines for t in (line.task,)]))
        return 0
    for line in lines:
        t = line.task
        mark = "x" if t.done else " "
        due = f"  due {printable(t.due)}" if t.due else ""  # a date when a tool wrote it; a row can hold anything
        origin = f"  (run {printable(t.run_id)}, {format_usd(line.run_cost.total)})" if t.run_id else ""
        print(f"[{mark}] {t.id:>4}  {one_line(t.title, 80)}{due}  key={printable(t.idempotency_key)}{origin}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from .render import print_transcript
    from .views.transcript import read_show

    store = _open(args, create=False, upgrade=False)
    if args.raw or args.jsonl:
        return _show_json(store, store.get_run(args.run_id), lines=args.jsonl)
    shown = read_show(store, args.run_id)
    print_transcript(shown.run, list(shown.steps), run_cost=shown.cost, resumes=list(shown.resumes),
                     approvals=list(shown.approvals))
    return 0


def _show_json(store, run, *, lines: bool) -> int:
    """``show --raw`` / ``--jsonl``: every step as data (``views.json_rows.step_document``), never wrapped,
    boxed or styled; a stored column that is not valid JSON is given as the text it holds."""
    from .views.json_rows import step_document

    for step in store.steps(run.id):
        print(printable_json(step_document(run.id, step), indent=None if lines else 2))
    return 0


def cmd_spend(args: argparse.Namespace) -> int:
    from .config.values import parse_since
    from .views.costs import read_spend, spend_cache_text, spend_cost_text, spend_json

    since = parse_since(args.since) if args.since else None
    store = _open_for_reading(args)
    table = read_spend(store, since=since, by=args.by)
    rows, total = list(table.rows), table.total
    if args.json:
        print(printable_json({"since": since, "by": args.by, "rows": [spend_json(r, args.by) for r in rows],
                              "total": spend_json(total, "total")}))
        return 0
    print(f"spend {table.label()}, by {args.by}")
    width = max([len(args.by), 5] + [len(printable(r.key)) for r in rows])
    print(f"{args.by:<{width}}  {'runs':>5}  {'calls':>6}  {'input tok':>11}  {'output tok':>10}  "
          f"{'cache':>5}  cost")
    for row in rows + [total]:
        print(f"{printable(row.key):<{width}}  {row.runs:>5}  {row.calls:>6}  {row.input_tokens:>11,}  "
              f"{row.output_tokens:>10,}  {spend_cache_text(row):>5}  {spend_cost_text(row)}")
    return 0


def cmd_prices(args: argparse.Namespace) -> int:
    from . import settings
    from .money import rates as pricing

    source = pricing.price_source()
    overrides = [pricing.override_prices(name, name, rates) for name, rates in sorted(settings.current().prices.items())]
    try:
        library = pricing.library_models()
    except ImportError as exc:
        library = []
        print(f"dayflow: {exc}", file=sys.stderr)
    today = pricing.day_of(None)
    builtin = [] if any(p.model == pricing.OFFLINE_MODEL for p in overrides) else \
        [("built in", pricing.offline_prices())]
    rows = [("settings file", p) for p in overrides] + builtin + [(pricing.LIBRARY, p) for _i, _n, p in library]

    def rates(prices) -> dict:
        found = prices.rates_on(today)
        return {key: str(found[key].base) for key in pricing.PRICE_KEYS if key in found} | (
            {"tiers": {key: [[start, str(price)] for start, price in found[key].tiers]
                       for key in pricing.PRICE_KEYS if key in found and found[key].tiers}}
            if any(r.tiers for r in found.values()) else {})

    if args.json:
        print(printable_json({"source": source.line(), "library": source.library, "version": source.version,
                              "released": source.released if source.version == source.pinned else None,
                              "config_file": str(settings.current().config_file or settings.config_path(os.environ)),
                              "models": [{"model": p.model, "name": p.name, "from": origin, **rates(p)}
                                         for origin, p in rows]}))
        return 0
    print(f"prices: {source.line()}")
    print(f"overrides: [prices.\"MODEL\"] in {settings.current().config_file or settings.config_path(os.environ)}"
          " (dollars per million tokens: input, output, cache_write, cache_read)")
    print(f"rates today ({today}), dollars per million tokens:")
    print(f"  {'model':<28} {'input':>8} {'5m write':>9} {'1h write':>9} {'read':>8} {'output':>8}  from")
    for origin, prices in rows:
        found = prices.rates_on(today)

        def cell(key: str) -> str:
            rate = found.get(key)
            return "-" if rate is None else format(rate.base.normalize(), "f") + ("+" if rate.tiers else "")

        print(f"  {printable(prices.model):<28} {cell('input'):>8} {cell('cache_write'):>9} "
              f"{cell('cache_write_1h'):>9} {cell('cache_read'):>8} {cell('output'):>8}  {origin}")
    if any(r.tiers for _o, p in rows for r in p.rates_on(today).values()):
        print("  + a higher rate applies to every token of a request whose input passes the model's tier "
              "(see --json)")
    print("any other model: price unknown")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from .search.lines import hit_json, hit_plain, hit_text
    from .search.query import check_searchable, parse, parse_since, parse_statuses
    from .views.search import search_query

    if args.reindex:
        if args.query:
            raise UsageError("--reindex takes no query: dayflow search --reindex [--db PATH|URL]")
        from .terminal_progress import ProgressBar

        store = _open(args, create=False)
        with ProgressBar.for_stderr("rebuilding the search index") as bar:
            written = store.rebuild_search_index(on_progress=bar)
        print(f"search index rebuilt: {written:,} places indexed in {store.label}", file=sys.stderr)
        return 0
    # Everything the user typed is checked before the database is opened.
    words = " ".join(word.removeprefix(_QUERY_WORD) for word in args.query)
    query = parse(words).with_filters(statuses=parse_statuses(args.status or ""), tools=tuple(args.tool))
    check_searchable(query)
    since = parse_since(args.since) if args.since else None
    store = _open(args, create=False, upgrade=False)
    found = search_query(store, query, limit=args.limit, since=since, agent=args.agent)
    if found.note:
        print(f"dayflow: note: {printable(found.note)}", file=sys.stderr)
    if args.json:
        print(printable_json([hit_json(hit) for hit in found.hits]))
    elif sys.stdout.isatty():
        from rich.console import Console

        console = Console(highlight=False, markup=False, emoji=False, soft_wrap=False)
        for hit in found.hits:
            console.print(hit_text(hit))
    else:
        for hit in found.hits:
            print(hit_plain(hit))
    if not found.hits:
        print(f"no matches for {printable(query.source.strip() or 'the filters given')}", file=sys.stderr)
    elif found.more:
        print(f"showing the newest {len(found.hits)}; there are more (raise --limit or narrow the query)",
              file=sys.stderr)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    import signal
    import threading

    from .store import STALE_AFTER_S
    from .agent.worker import work

    from . import settings

    settings.apply_flags(offline_delay_s=args.delay)
    store = _open(args)
    # A long-lived worker loads the SDK (and the offline model, built on its types) before it
    # says it is ready, not inside its first run.
    from .agent import offline  # noqa: F401

    stop = threading.Event()
    # SIGTERM (systemd, docker stop) stops like Ctrl-C: each run is released at its next step boundary.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    output = threading.Lock()  # lines from several threads must not interleave

    def report(event) -> None:
        if event.kind == "started":
            return
        run = f"run {event.run_id} " if event.run_id else ""
        with output:
            if event.kind == "finished":
                result = event.result
                print(f"{run}{result.status} · {result.steps} steps · {result.calls} call(s)", flush=True)
            else:
                print(f"dayflow worker: {run}{event.kind}: {one_line(event.message, 300)}", file=sys.stderr,
                      flush=True)

    def print_step(event) -> None:
        with output:
            print(f"[{event.run_id}] ", end="")
            _print_step(event)

    mode = "until nothing is waiting" if args.once else "until stopped (Ctrl-C)"
    print(f"[worker pid {os.getpid()}] {args.concurrency} thread(s) on {store.label}, {mode}",
          file=sys.stderr, flush=True)
    try:
        outcome = work(store, concurrency=args.concurrency, once=args.once, poll_every=args.poll or 1.0,
                       stale_after=args.stale_after if args.stale_after is not None else STALE_AFTER_S,
                       stop=stop, on_event=report, on_step=print_step if args.verbose else None)
    except KeyboardInterrupt:
        print("dayflow worker: stopped; its runs were released for any worker to continue", file=sys.stderr)
        return 130
    print(f"[worker pid {os.getpid()}] {len(outcome.finished)} run(s) driven, {len(outcome.failed)} failed",
          file=sys.stderr)
    return 2 if outcome.store_errors and args.once else 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from .store import SCHEMA_VERSION

    store = _open(args, create=False)
    print(f"{store.label}: schema {SCHEMA_VERSION}, up to date", file=sys.stderr)
    return 0


COMMANDS = {"migrate": cmd_migrate, "brief": cmd_brief, "run": cmd_run, "worker": cmd_worker, "runs": cmd_runs, "resume": cmd_resume,
            "tasks": cmd_tasks, "show": cmd_show, "search": cmd_search, "spend": cmd_spend,
            "prices": cmd_prices}


# ``dayflow search budget -draft``: a query word can start with "-". Before argparse sees it, such a word
# gets this mark in front (so it is not taken for an option); cmd_search takes the mark off.
_QUERY_WORD = "\ue000"


def _mark_query_words(argv: list[str]) -> list[str]:
    if not argv or argv[0] != "search":
        return argv
    marked = [argv[0]]
    words_only = False
    for token in argv[1:]:
        if words_only or (token.startswith("-") and not token.startswith("--") and token not in ("-", "-h")):
            marked.append(_QUERY_WORD + token)
        else:
            words_only = token == "--"
            marked.append(token)
    return marked


# -- runs that travel: export, import, prune, vacuum --------------------------------------------------


def _add_travel_commands(sub, common: argparse.ArgumentParser) -> None:
    export = sub.add_parser("export", parents=[common], help="write runs as JSONL, Messages API JSON or "
                            "OpenTelemetry traces")
    export.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    where = export.add_mutually_exclusive_group(required=True)
    where.add_argument("--jsonl", metavar="FILE", help="the runs with their steps, resumes and tasks as JSON Lines "
                       "(`dayflow import` reads it; - for standard output)")
    where.add_argument("--anthropic", metavar="FILE", help="each run's messages as a Messages API request body, "
                       "one JSON object per line")
    where.add_argument("--otlp", metavar="URL", help="send the runs' traces to an OTLP/HTTP receiver "
                       "(http://HOST:4318)")
    where.add_argument("--otlp-file", metavar="FILE", help="the runs' traces as OTLP JSON, one request per run "
                       "per line")
    export.add_argument("--content", action="store_true", default=None,
                        help="traces carry the messages, replies and tool payloads (default: the otel_content "
                        "setting)")

    imports = sub.add_parser("import", parents=[common], help="add the runs of a `dayflow export --jsonl` file")
    imports.add_argument("file", metavar="FILE")
    imports.add_argument("--as-new", action="store_true",
                         help="give every imported run a new id (to import a run this database already has)")

    prune = sub.add_parser("prune", parents=[common], help="remove old finished runs (never tasks, never a "
                           "queued or unfinished run)")
    prune.add_argument("--older-than", type=_age, required=True, metavar="AGE",
                       help="runs last changed longer ago than AGE: 90s, 30m, 12h, 7d, 2w")
    prune.add_argument("--status", default="done", metavar="S[,S...]",
                       help="which runs: done (default), failed, budget, comma-separated")
    prune.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    prune.add_argument("--archive", metavar="FILE",
                       help="first write the runs as JSONL (`dayflow import FILE` restores them)")

    sub.add_parser("vacuum", parents=[common], help="give the space of removed runs back to the disk (safe "
                   "while the dashboard and workers run)")


def cmd_export(args: argparse.Namespace) -> int:
    store = _open(args, create=False, upgrade=False)  # reading only
    # Every id is resolved (a prefix is enough) before any file is written or request sent.
    run_ids = list(dict.fromkeys(store.get_run(rid).id for rid in args.run_ids))
    if args.content is not None and not (args.otlp or args.otlp_file):
        raise UsageError("--content goes with --otlp or --otlp-file")
    if args.jsonl:
        from .store.transfer import new_file, write_jsonl

        with new_file(args.jsonl, "dayflow export") as out:
            counts = write_jsonl(store, run_ids, out)
        print(f"exported {counts.run} run(s), {counts.step} step(s), {counts.resume} resume(s) and {counts.task} "
              f"task(s) to {printable(args.jsonl)}", file=sys.stderr)
        return 0
    if args.anthropic:
        from .agent.loop import replay_request
        from .store import dumps
        from .store.transfer import new_file

        bodies = [replay_request(store, rid) for rid in run_ids]
        with new_file(args.anthropic, "dayflow export") as out:
            for body in bodies:
                out.write(dumps(body) + "\n")
        print(f"wrote the messages of {len(bodies)} run(s) to {printable(args.anthropic)} as Messages API "
              "request bodies", file=sys.stderr)
        return 0
    return _export_traces(store, run_ids, args)


def _export_traces(store, run_ids: list[str], args: argparse.Namespace) -> int:
    from . import settings
    from .agent import otel

    otel.require_sdk("dayflow export --otlp" if args.otlp else "dayflow export --otlp-file")
    if args.otlp:
        otel.traces_url(args.otlp)  # a bad URL is refused before anything is read
    content = settings.current().otel_content if args.content is None else args.content
    sent: list[str] = []
    lines: list[str] = []
    for run_id in run_ids:
        spans = otel.spans_of(otel.read_source(store, run_id), content=content)
        if args.otlp:
            try:
                otel.send_otlp(args.otlp, spans)
            except DayflowError as exc:
                if sent:
                    raise DayflowError(f"{exc} (already sent: run(s) {printable(', '.join(sent))})") from None
                raise
            sent.append(run_id)
            print(f"sent {len(spans)} span(s) of run {printable(run_id)}", file=sys.stderr)
        else:
            lines.append(otel.otlp_json(spans))
    if args.otlp_file:
        from .store.transfer import new_file

        with new_file(args.otlp_file, "dayflow export") as out:
            out.writelines(line + "\n" for line in lines)
        print(f"wrote the traces of {len(lines)} run(s) to {printable(args.otlp_file)} (OTLP JSON)", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from .store.transfer import import_archive, read_archive

    archive = read_archive(args.file)  # the whole file is checked before the database is opened
    store = _open(args)
    report = import_archive(store, archive, as_new=args.as_new)
    for old, new in report.runs:
        print(f"imported run {printable(old)}" + (f" as {printable(new)}" if new != old else ""))
    notes = [f"{report.steps} step(s)", f"{report.resumes} resume(s)", f"{report.tasks_added} task(s) added"]
    if report.tasks_relinked:
        notes.append(f"{report.tasks_relinked} kept task(s) linked to their run again")
    if report.tasks_kept:
        notes.append(f"{report.tasks_kept} task(s) already here under the same key (kept as they are)")
    if report.renumbered:
        notes.append(f"{report.renumbered} row id(s) taken here, given new ones")
    print(f"{len(report.runs)} run(s) into {printable(store.label)}: {', '.join(notes)}", file=sys.stderr)
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from .store.retention import parse_statuses, prunable_runs, prune
    from .store.transfer import new_file, write_jsonl
    from .views.time import age_words

    statuses = parse_statuses(args.status)
    store = _open(args, create=False)
    candidates = prunable_runs(store, older_than=args.older_than, statuses=statuses)
    which = "/".join(s.value for s in statuses)
    if not candidates:
        print(f"nothing to prune: no {which} run was last changed more than {age_words(args.older_than)} ago", file=sys.stderr)
        return 0

    def line(verb: str, c) -> str:
        return (f"{verb} {printable(c.id)}  {printable(c.status):<6}  last change {printable(c.updated_at[:19])}  "
                f"steps={c.steps}  tasks={c.tasks}  {c.row_bytes:,} bytes")

    if args.dry_run:
        for c in candidates:
            print(line("would remove", c))
        total = sum(c.row_bytes for c in candidates)
        archive = f"; --archive would first write them to {printable(args.archive)}" if args.archive else ""
        print(f"dry run: {len(candidates)} run(s), {sum(c.steps for c in candidates)} step(s), {total:,} bytes of "
              f"stored text would go; {sum(c.tasks for c in candidates)} task(s) would stay{archive}")
        return 0
    if args.archive:
        with new_file(args.archive, "dayflow prune --archive") as out:
            write_jsonl(store, [c.id for c in candidates], out)
    report = prune(store, candidates)
    for c in report.removed:
        print(line("removed", c))
    for run_id in report.changed:
        print(f"kept {printable(run_id)}: it changed after it was selected (resumed?)")
    summary = (f"removed {len(report.removed)} run(s), {report.steps} step(s), {report.resumes} resume record(s): "
               f"{report.row_bytes:,} bytes of stored text; {report.tasks_unlinked} task(s) kept")
    if args.archive:
        summary += f"; archived in {printable(args.archive)}"
    print(summary)
    if report.freed_bytes is not None:
        print(f"{report.freed_bytes:,} bytes of the database file are now free pages, reused by new runs; "
              "`dayflow vacuum` gives them back to the disk")
    else:
        print("PostgreSQL reuses the space for new rows; `dayflow vacuum` runs VACUUM (ANALYZE) now")
    return 0


def cmd_vacuum(args: argparse.Namespace) -> int:
    from .store.retention import vacuum

    store = _open(args, create=False)
    report = vacuum(store)
    before, after = report.before.total, report.after.total
    if not report.shrinks_files:
        print(f"VACUUM (ANALYZE) done in {report.seconds:.1f} s: Dayflow's tables hold {after:,} bytes; their free "
              "space is reused by new rows (VACUUM FULL would shrink the files but locks the tables: not run)")
        return 0
    print(f"vacuumed {printable(store.label)} in {report.seconds:.1f} s: {before:,} -> {after:,} bytes on disk "
          f"({max(before - after, 0):,} given back)")
    if report.converted:
        print("this first vacuum rewrote the file once to switch it to incremental vacuuming; later ones free "
              "space a megabyte at a time")
    if not report.wal_truncated:
        print("a reader still held the write-ahead log: the -wal file shrinks at the next checkpoint")
    return 0


COMMANDS.update({"export": cmd_export, "import": cmd_import, "prune": cmd_prune, "vacuum": cmd_vacuum})


# -- approvals: approve, deny, pending -------------------------------------------------------------------


def _hash_prefix(text: str) -> str:
    from .store.tables.approvals import hash_prefix

    try:
        return hash_prefix(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--hash ")) from None


def _add_approval_commands(sub, common: argparse.ArgumentParser) -> None:
    deciding = _Parser(add_help=False)
    deciding.add_argument("run_id", metavar="RUN_ID")
    deciding.add_argument("tool_use_id", nargs="?", metavar="TOOL_USE_ID",
                          help="which waiting call (needed only when several wait)")
    deciding.add_argument("--hash", metavar="PREFIX", dest="expect_hash", type=_hash_prefix,
                          help="refuse unless the call's arguments hash to this (as `dayflow pending` shows)")
    deciding.add_argument("--as", metavar="NAME", dest="decider",
                          help="who decides (default: the user setting, else your login name)")
    deciding.add_argument("--all", action="store_true", dest="every",
                          help="every call of the run that waits (instead of naming one)")
    deciding.add_argument("--queue", action="store_true",
                          help="only record the decision; a `dayflow worker` continues the run")
    deciding.add_argument("-v", "--verbose", action="store_true", help="print each step as it commits")
    deciding.add_argument("--allow-changed-agent", action="store_true",
                          help="decide and go on although the run's agent code changed (otherwise refused, "
                               "nothing decided)")
    approve = sub.add_parser("approve", parents=[common, deciding],
                             help="let a waiting tool call run, then continue its run")
    approve.add_argument("--edit", metavar="FILE|-",
                         help="approve these arguments instead (a JSON object, checked against the tool's schema)")
    deny = sub.add_parser("deny", parents=[common, deciding],
                          help="refuse a waiting tool call; the model is told why and the run goes on")
    deny.add_argument("--reason", required=True, help="what the model is told")
    pending = sub.add_parser("pending", parents=[common], help="tool calls waiting for a decision, oldest first")
    pending.add_argument("--json", action="store_true", help="machine-readable output")


def _say_what_waits(run_id: str) -> None:
    store = _OPENED[-1]
    for row in store.approvals(run_id):
        if row.state == "pending":
            print(f"[waiting {run_id}] {printable(row.tool_name)} {one_line(row.input, 200)} "
                  f"({printable(row.tool_use_id)}, arguments {row.input_hash[:12]})", file=sys.stderr)
    print(f"[waiting {run_id}] decide with: dayflow approve {run_id}  or  dayflow deny {run_id} --reason ...",
          file=sys.stderr)


def cmd_pending(args: argparse.Namespace) -> int:
    store = _open_for_reading(args)
    rows = store.pending_approvals()
    if args.json:
        import json

        print(printable_json([{"run_id": run.id, "step": row.n, "tool_use_id": row.tool_use_id,
                               "tool": row.tool_name, "input": json.loads(row.input),
                               "input_hash": row.input_hash, "requested_at": row.requested_at,
                               "task": run.user_msg} for row, run in rows]))
        return 0
    if not rows:
        print("nothing waits for a decision")
        return 0
    for row, run in rows:
        print(f"{run.id}  step {row.n}  {printable(row.tool_name)}  {printable(row.tool_use_id)}  "
              f"since {row.requested_at}  arguments {row.input_hash[:12]}")
        print(f"    {one_line(row.input, 300)}")
        print(f"    task: {one_line(run.user_msg, 100)}")
    return 0


def _decide(args: argparse.Namespace, *, approve: bool) -> int:
    from .agent.approvals import decider, validated_edit
    from .store.tables.approvals import DecisionRefused

    from .agent.registry import agent_for_run

    store = _open(args, create=False)
    run = store.get_run(args.run_id)
    # A decision lets a call run: it is taken for the agent the run recorded, or not at all (nothing written).
    _agent, change = agent_for_run(run, allow_changed=args.allow_changed_agent)
    if change is not None and args.queue:
        raise UsageError("--allow-changed-agent goes on here, with the new definition: a worker would refuse it; "
                         "leave out --queue")
    user, host = decider()
    if args.decider is not None:
        user = args.decider.strip()
        if not user or len(user) > 200:
            raise UsageError("--as needs a name (at most 200 characters)")
    edited, tool_use_id = None, args.tool_use_id
    if args.every and (tool_use_id is not None or args.expect_hash is not None
                       or (approve and args.edit is not None)):
        raise UsageError("--all decides every waiting call: it goes without TOOL_USE_ID, --hash and --edit")
    if approve and args.edit is not None:
        text = _read_edit(args.edit)
        tool_use_id, edited = validated_edit(store, run.id, args.tool_use_id, text)
    reason = None
    if not approve:
        reason = args.reason.strip()
        if not reason:
            raise UsageError("--reason must say why (the model is told)")
        if len(reason) > 4000:
            raise UsageError("--reason is longer than 4,000 characters")
    targets = [tool_use_id or None]
    if args.every:
        targets = [r.tool_use_id for r in store.approvals(run.id) if r.state == "pending"]
        if not targets:
            raise DecisionRefused(f"run {run.id} has no tool call waiting for a decision")
    word = "approved" if approve else "denied"
    for target in targets:
        row = store.decide(run.id, target, approve=approve, by=user, host=host, reason=reason,
                           edited_input=edited, expect_hash=args.expect_hash)
        note = " with edited arguments" if row.edited_input is not None else ""
        print(f"[{word} {run.id}] {printable(row.tool_name)} ({printable(row.tool_use_id)}){note} by "
              f"{printable(user)} on {printable(host)}", file=sys.stderr)
    current = store.get_run(run.id)
    if current.status == RunStatus.WAITING.value:
        left = sum(1 for r in store.approvals(run.id) if r.state == "pending")
        print(f"[waiting {run.id}] {left} more call(s) wait for a decision (dayflow pending)", file=sys.stderr)
        return 0
    if args.queue:
        print(f"[queued {run.id}] a `dayflow worker` on this database continues it", file=sys.stderr)
        return 0
    from .agent.loop import resume
    from .errors import RunBusy

    try:
        result = resume(run.id, store=store, on_step=_print_step if args.verbose else None,
                        allow_changed_agent=args.allow_changed_agent)
    except RunBusy as exc:  # a worker took the run first: it continues it
        print(f"[{word} {run.id}] {printable(exc)}", file=sys.stderr)
        return 0
    return _finish(result)


def _read_edit(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    try:
        with open(source, encoding="utf-8") as fh:
            return fh.read(1_000_001)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--edit {printable(source)}: cannot be read ({exc.__class__.__name__})") from None


def cmd_approve(args: argparse.Namespace) -> int:
    return _decide(args, approve=True)


def cmd_deny(args: argparse.Namespace) -> int:
    return _decide(args, approve=False)


COMMANDS.update({"approve": cmd_approve, "deny": cmd_deny, "pending": cmd_pending})


# -- time travel: fork, diff ------------------------------------------------------------------------------


def _add_fork_commands(sub, common: argparse.ArgumentParser, driving: argparse.ArgumentParser) -> None:
    fork = sub.add_parser("fork", parents=[common, driving],
                          help="a new run from another's first steps (changed if you like); no call until resumed")
    fork.add_argument("run_id", metavar="RUN_ID")
    fork.add_argument("--at", type=_step_number, required=True, metavar="K",
                      help="copy steps 1..K: the fork's next call is the one the run made after step K")
    fork.add_argument("--edit-result", action="append", default=[], metavar="STEP:TOOL_USE_ID=FILE|-",
                      help="replace one tool result (of a copied step) with this file's text (repeatable)")
    fork.add_argument("--append", metavar="TEXT", help="a note to the model after step K, labelled as yours")
    fork.add_argument("--model", help="the model the fork calls (default: the run's)")
    fork.add_argument("--run", action="store_true", help="go on at once (else: dayflow resume NEW_ID)")
    diff = sub.add_parser("diff", parents=[common], help="compare two runs step by step")
    diff.add_argument("run_a", metavar="RUN_A")
    diff.add_argument("run_b", metavar="RUN_B")
    diff.add_argument("--json", action="store_true", help="the same as data")


def _edits(specs: list[str]) -> dict[tuple[int, str], str]:
    edits: dict[tuple[int, str], str] = {}
    stdin_used = False
    for spec in specs:
        where, sep, source = spec.partition("=")
        step_text, colon, tool_use_id = where.partition(":")
        if not sep or not colon or not source or not tool_use_id.strip():
            raise UsageError(f"--edit-result {printable(spec)}: expected STEP:TOOL_USE_ID=FILE (or =- for stdin)")
        try:
            n = int(step_text)
        except ValueError:
            raise UsageError(f"--edit-result {printable(spec)}: {printable(step_text)!r} is not a step number") from None
        if source == "-":
            if stdin_used:
                raise UsageError("--edit-result: only one result can come from standard input")
            stdin_used = True
        text = _read_edit(source) if source != "-" else sys.stdin.read()
        if len(text) > 1_000_000:
            raise UsageError(f"--edit-result {printable(spec)}: more than 1,000,000 characters")
        edits[(n, tool_use_id.strip())] = text
    return edits


def cmd_fork(args: argparse.Namespace) -> int:
    from .agent.messages import messages_from
    from .store.tables.forks import ForkPlan

    if args.append is not None and not args.append.strip():
        raise UsageError("--append needs some text")
    if args.model is not None and (not args.model.strip() or len(args.model) > 200):
        raise UsageError("--model needs a model name")
    edits = _edits(args.edit_result)  # every file read and checked before the database is opened for writing
    store = _open(args, create=False)
    plan = ForkPlan(at=args.at, results=edits, note=args.append, model=args.model, max_steps=args.max_steps,
                    budget_tokens=args.budget, budget_usd=args.budget_usd)
    fork = store.fork_run(args.run_id, plan, check=lambda run, steps: messages_from(run, steps))
    print(fork.id)
    changes = []
    if edits:
        changes.append(f"{len(edits)} tool result(s) replaced")
    if args.append:
        changes.append("your note added")
    changed = f" ({', '.join(changes)})" if changes else ""
    print(f"[fork {fork.id}] of run {fork.parent_id} at step {fork.forked_at}{changed}; "
          + ("going on now" if args.run else f"continue it with: dayflow resume {fork.id}"), file=sys.stderr)
    if not args.run:
        return 0
    from .agent.loop import resume

    options = _driving_options(args)
    result = resume(fork.id, store=store, **options)
    if result.replayed_steps:
        print(f"[fork {fork.id}] {_saved(result)}", file=sys.stderr)
    return _finish(result)


def cmd_diff(args: argparse.Namespace) -> int:
    from .views.travel import read_diff

    store = _open_for_reading(args)
    compared = read_diff(store, args.run_a, args.run_b)
    a, b, found = compared.a, compared.b, compared.diff
    if args.json:
        print(printable_json(found.as_json()))
        return 0
    print(f"diff {a.id} (a) .. {b.id} (b)" + (f"; steps 1..{found.common_fork} are shared copies"
                                               if found.common_fork else ""))
    for step in found.steps:
        if step.state in ("same", "shared"):
            print(f"step {step.n:>3}  {step.state}")
            continue
        if step.state in ("only_a", "only_b"):
            side = "a" if step.state == "only_a" else "b"
            print(f"step {step.n:>3}  only in {side}")
            continue
        (ta, tb) = step.tokens
        word = "results differ" if step.state == "results_differ" else "differs"
        print(f"step {step.n:>3}  {word}  stop {printable(step.stop_reason[0])} -> {printable(step.stop_reason[1])}"
              f"  tokens {ta[0]}/{ta[1]} -> {tb[0]}/{tb[1]}")
        for line in step.text_diff:
            print(f"    text {one_line(line, 200)}")
        for call in step.calls:
            left = f"{call.a['name']}({one_line(json.dumps(call.a['input'], ensure_ascii=False), 120)})" if call.a else "-"
            right = f"{call.b['name']}({one_line(json.dumps(call.b['input'], ensure_ascii=False), 120)})" if call.b else "-"
            print(f"    call #{call.index + 1}: {printable(left)} -> {printable(right)}")
        for result in step.results:
            print(f"    result #{result.index + 1}: {one_line(result.a or '-', 100)} -> {one_line(result.b or '-', 100)}")
    (ia, oa), (ib, ob) = found.tokens
    where = f"first divergence at step {found.first_divergence}" if found.first_divergence else "no divergence"
    print(f"{where}; tokens {ia}/{oa} (a) vs {ib}/{ob} (b), {ib + ob - ia - oa:+,}; "
          f"calls {found.calls[0]} vs {found.calls[1]}, {found.calls[1] - found.calls[0]:+}")
    return 0


COMMANDS.update({"fork": cmd_fork, "diff": cmd_diff})


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        if argv is None:  # the console script, about to exit (an in-process caller passes argv)
            _exit_quickly()


def _exit_quickly() -> None:
    """Close what the command opened, then keep the collector out of the interpreter's exit.

    The final collections at exit walked the SDK's object graph for about a
    second (once ``anthropic`` is imported), after the command's work was
    done. Frozen objects are never collected, so anything that must be
    closed (a SQLite connection removes its -wal and -shm files on close) is
    closed here first; the commits are already durable either way.
    """
    while _OPENED:
        try:
            _OPENED.pop().close()
        except Exception:  # noqa: BLE001 - a store that cannot close has nothing left to save
            pass
    gc.freeze()


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(_mark_query_words(list(sys.argv[1:] if argv is None else argv)))
    try:
        from .settings import current

        current()  # every setting is checked before anything is opened or written
        return COMMANDS[args.command](args)
    except DayflowError as exc:
        print(f"dayflow: error: {printable(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("dayflow: interrupted; the run is saved and can be continued with: dayflow resume",
              file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # last resort: one line, no traceback, unless asked for
        if os.environ.get("DAYFLOW_DEBUG"):
            raise
        from .redaction import redacted_line

        print(f"dayflow: internal error: {type(exc).__name__}: {redacted_line(exc, 300)} "
              "(set DAYFLOW_DEBUG=1 for a traceback)", file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
