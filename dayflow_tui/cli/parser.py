"""``dayflow``'s command line: every command, option and argument type, and nothing that runs a command.

``build_parser`` is cheap to call: the commands live in ``cli.commands`` and
are imported only when one runs (``cli.main``).
"""

from __future__ import annotations

import argparse
import sys

from ..config import values
from ..config.errors import UsageError
from ..config.settings import LOG_FORMATS, LOG_LEVELS
from ..store.status import RunStatus

# ``dayflow search budget -draft``: a query word can start with "-". Before argparse sees it, such a word
# gets this mark in front (so it is not taken for an option); ``search`` takes the mark off.
QUERY_WORD = "\ue000"


# Flag values are read by the parsers the settings file uses too (``config.values``): one parser per kind.
_positive_int = values.argument(values.positive)
_thread_count = values.argument(values.thread_count)
_seconds = values.argument(values.seconds, most=values.DAY_S)
_dollars = values.argument(values.dollars, above_zero=True)
_age = values.argument(values.age)
_step_number = values.argument(values.whole, most=1_000_000)
_priority = values.argument(values.priority)
_port = values.argument(values.port_or_off)


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


def _hash_prefix(text: str) -> str:
    from ..store.tables.approvals import hash_prefix

    try:
        return hash_prefix(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--hash ")) from None


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--db", metavar="PATH|URL", help="database file, sqlite:///PATH or "
                        "postgresql://USER@HOST:PORT/DBNAME (default: $DAYFLOW_DB or "
                        "~/.local/share/dayflow/dayflow.db)")
    common.add_argument("--schema", type=values.argument(values.identifier), metavar="NAME",
                        help="PostgreSQL: the schema Dayflow's tables are in, set in every transaction (works "
                        "behind PgBouncer in transaction pooling; default: $DAYFLOW_SCHEMA, the schema setting)")

    logs = _Parser(add_help=False)
    logs.add_argument("--log-format", type=values.argument(values.one_of, choices=LOG_FORMATS), metavar="text|json",
                      help="stderr as the lines a person reads (text, default) or one JSON object per event "
                      "(default: $DAYFLOW_LOG_FORMAT, the log_format setting)")
    logs.add_argument("--log-level", type=values.argument(values.one_of, choices=LOG_LEVELS),
                      metavar="debug|info|warning|error",
                      help="the least important events logged (default: $DAYFLOW_LOG_LEVEL, else info; debug adds "
                      "claims, model calls and commits with their durations)")

    driving = _Parser(add_help=False, parents=[logs])
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
    _add_priority(brief)

    run = sub.add_parser("run", parents=[common, driving], help="start a run of your own agent (MODULE:ATTR or "
                         "path/to/file.py:ATTR) and print its answer")
    run.add_argument("agent_spec", metavar="AGENT", help="MODULE:ATTR or path/to/file.py:ATTR naming an Agent")
    run.add_argument("task", nargs="?", metavar="TASK", help="what to ask it (default: the agent's own task)")
    run.add_argument("--model", help="model name, or 'offline' (default: the agent's, else as for brief)")
    run.add_argument("--queue", action="store_true",
                     help="only add the run to the queue and print its id; a `dayflow worker` drives it")
    _add_priority(run)

    worker = sub.add_parser("worker", parents=[common, logs], help="drive queued and interrupted runs")
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
    worker.add_argument("--metrics-port", type=_port, metavar="PORT",
                        help="serve Prometheus metrics on this port (0: any free port, said at start; default: "
                        "$DAYFLOW_METRICS_PORT, else none)")
    worker.add_argument("--metrics-host", type=values.argument(values.host_name), metavar="HOST",
                        help="the address the metrics listen on (default: 127.0.0.1, this host only)")

    runs = sub.add_parser("runs", parents=[common], help="list runs, newest first")
    runs.add_argument("--json", action="store_true", help="machine-readable output")
    runs.add_argument("--limit", type=_positive_int, default=50, metavar="N",
                      help="list at most N runs, the newest (default 50)")
    runs.add_argument("--status", choices=[s.value for s in RunStatus],
                      help="only runs in this status (interrupted: running, with its owner gone)")
    runs.add_argument("--source", choices=["dayflow", "claude-code", "otel"],
                      help="only runs driven here (dayflow), imported Claude Code sessions (claude-code) or "
                      "OpenTelemetry traces received by `dayflow collect` (otel)")
    runs.add_argument("--tree", action="store_true",
                      help="each subagent run under the run whose call started it (its whole tree), with the "
                      "tree's runs, steps, dollars and worst status at the parent")

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
    tasks.add_argument("--json", action="store_true", help="machine-readable output")

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
    raw.add_argument("--json", action="store_true", help="one JSON document: the run, its subagent tree "
                     "(each child under the call that started it) with the rolled-up cost, and every step")
    show.add_argument("--no-pager", action="store_true",
                      help="on a terminal, print instead of paging through $PAGER (default: less)")
    show.add_argument("--follow", "-f", action="store_true",
                      help="keep printing steps as they commit (from any host) until the run ends; never paged "
                      "(PostgreSQL pushes each commit with LISTEN/NOTIFY; SQLite is polled twice a second)")

    cancel = sub.add_parser("cancel", parents=[common], help="stop a run for good: its call in flight is kept, "
                            "no new call starts, its pending tools do not run")
    cancel.add_argument("run_id", metavar="RUN_ID", help="a run id, or the start of one")
    cancel.add_argument("--reason", metavar="TEXT", help="why (kept with the run, shown by runs, show and the "
                        "dashboard)")
    cancel.add_argument("--as", metavar="NAME", dest="canceller",
                        help="who cancels (default: the user setting, else your login name; @host is added)")

    sub.add_parser("migrate", parents=[common], help="upgrade a database written by an older Dayflow")
    _add_travel_commands(sub, common)
    _add_approval_commands(sub, common, logs)
    _add_fork_commands(sub, common, driving)

    spend = sub.add_parser("spend", parents=[common], help="dollars spent, by agent, model, day or source")
    spend.add_argument("--since", metavar="SPAN|DATE",
                       help="count calls made since: an age (90s, 30m, 12h, 7d, 2w) or a date (default: all time)")
    spend.add_argument("--by", choices=["agent", "model", "day", "source"], default="model",
                       help="one line per agent, model, UTC day or source (dayflow, claude-code, otel; "
                       "default: model)")
    spend.add_argument("--json", action="store_true", help="machine-readable output")

    sub.add_parser("metrics", parents=[common], help="the fleet's numbers from the database (runs by status, "
                   "queue depth and age, back-offs, heartbeat lag, this host's spool) in Prometheus text format")

    workers = sub.add_parser("workers", parents=[common], help="the worker processes seen in the last day: alive, "
                             "stale (stopped beating: killed, or their host is gone) or stopped, with the runs each holds")
    workers.add_argument("--json", action="store_true", help="machine-readable output")

    prices = sub.add_parser("prices", help="where prices come from, and the rates Dayflow uses")
    prices.add_argument("--json", action="store_true", help="machine-readable output")
    _describe_commands(sub)
    return parser


def _add_priority(command: argparse.ArgumentParser) -> None:
    command.add_argument("--priority", type=_priority, default=0, metavar="N",
                         help="workers take runs of a higher priority first, then the oldest (a whole number, "
                         "negative allowed; default 0)")


def _describe_commands(sub) -> None:
    """A command's ``--help`` page opens with what it does: its line in ``dayflow --help``, unless it has its own."""
    for listed in sub._choices_actions:
        command = sub.choices[listed.dest]
        if not command.description and listed.help:
            command.description = listed.help[0].upper() + listed.help[1:] + "."


def _add_travel_commands(sub, common: argparse.ArgumentParser) -> None:
    export = sub.add_parser("export", parents=[common], help="write runs as JSONL, Messages API JSON or "
                            "OpenTelemetry traces")
    export.add_argument("run_ids", nargs="+", metavar="RUN_ID", help="the runs to write (ids or their start)")
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

    collect = sub.add_parser("collect", parents=[common], help="receive OpenTelemetry GenAI spans (OTLP/HTTP) "
                             "as read-only runs, live")
    collect.add_argument("--otlp-http", type=values.argument(values.address), default=("127.0.0.1", 4318),
                         metavar="HOST:PORT", help="where to listen for POST /v1/traces (default 127.0.0.1:4318, "
                         "loopback only; protobuf or JSON)")

    imports = sub.add_parser("import", parents=[common], help="add the runs of a `dayflow export --jsonl` file, "
                             "or Claude Code's sessions (--claude-code) as read-only runs")
    imports.add_argument("file", metavar="FILE", nargs="?", help="a file written by `dayflow export --jsonl`")
    imports.add_argument("--claude-code", nargs="?", const="~/.claude/projects", metavar="DIR",
                         help="read Claude Code's session files under DIR (default ~/.claude/projects) into "
                         "read-only runs; again later, only what the files gained since")
    imports.add_argument("--as-new", action="store_true",
                         help="give every imported run a new id (to import a run this database already has)")

    prune = sub.add_parser("prune", parents=[common], help="remove old finished runs (never tasks, never a "
                           "queued or unfinished run)")
    prune.add_argument("--older-than", type=_age, required=True, metavar="AGE",
                       help="runs last changed longer ago than AGE: 90s, 30m, 12h, 7d, 2w")
    prune.add_argument("--status", default="done", metavar="S[,S...]",
                       help="which runs: done (default), failed, budget, cancelled, comma-separated")
    prune.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    prune.add_argument("--archive", metavar="FILE",
                       help="first write the runs as JSONL (`dayflow import FILE` restores them)")

    sub.add_parser("vacuum", parents=[common], help="give the space of removed runs back to the disk (safe "
                   "while the dashboard and workers run)")


def _add_approval_commands(sub, common: argparse.ArgumentParser, logs: argparse.ArgumentParser) -> None:
    deciding = _Parser(add_help=False, parents=[logs])
    deciding.add_argument("run_id", metavar="RUN_ID", help="the waiting run (`dayflow pending` lists them)")
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


def _add_fork_commands(sub, common: argparse.ArgumentParser, driving: argparse.ArgumentParser) -> None:
    fork = sub.add_parser("fork", parents=[common, driving],
                          help="a new run from another's first steps (changed if you like); no call until resumed")
    fork.add_argument("run_id", metavar="RUN_ID", help="the run to fork (it is not changed)")
    fork.add_argument("--at", type=_step_number, required=True, metavar="K",
                      help="copy steps 1..K: the fork's next call is the one the run made after step K")
    fork.add_argument("--edit-result", action="append", default=[], metavar="STEP:TOOL_USE_ID=FILE|-",
                      help="replace one tool result (of a copied step) with this file's text (repeatable)")
    fork.add_argument("--append", metavar="TEXT", help="a note to the model after step K, labelled as yours")
    fork.add_argument("--model", help="the model the fork calls (default: the run's)")
    fork.add_argument("--run", action="store_true", help="go on at once (else: dayflow resume NEW_ID)")
    diff = sub.add_parser("diff", parents=[common], help="compare two runs step by step")
    diff.add_argument("run_a", metavar="RUN_A", help="the first run (left)")
    diff.add_argument("run_b", metavar="RUN_B", help="the second run (right)")
    diff.add_argument("--json", action="store_true", help="the same as data")


def mark_query_words(argv: list[str]) -> list[str]:
    if not argv or argv[0] != "search":
        return argv
    marked = [argv[0]]
    words_only = False
    for token in argv[1:]:
        if words_only or (token.startswith("-") and not token.startswith("--") and token not in ("-", "-h")):
            marked.append(QUERY_WORD + token)
        else:
            words_only = token == "--"
            marked.append(token)
    return marked
