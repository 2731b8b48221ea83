"""``dayflow``'s entry point: parse, run the command, and turn every error into one line and its exit code.

A command's module (``cli.commands``) is imported only when that command
runs: start-up imports are measured (tests/cli/test_startup_imports.py).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import Callable, Sequence

from ..config.errors import DayflowError
from ..safe_text import printable
from .opening import OPENED
from .parser import build_parser, mark_query_words

# command -> the module of ``cli.commands`` that holds its ``cmd_<command>``
COMMANDS = {
    "brief": "drive", "run": "drive", "resume": "drive", "worker": "drive",
    "runs": "runs", "show": "runs", "cancel": "cancel", "tasks": "runs", "spend": "runs",
    "search": "search",
    "pending": "approvals", "approve": "approvals", "deny": "approvals",
    "fork": "travel", "diff": "travel", "export": "travel", "import": "travel",
    "migrate": "admin", "prune": "admin", "vacuum": "admin", "prices": "admin",
    "metrics": "ops", "workers": "ops",
    "collect": "collect",
}


def command(name: str) -> Callable:
    module = importlib.import_module(f".commands.{COMMANDS[name]}", __package__)
    return getattr(module, f"cmd_{name}")


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
    while OPENED:
        try:
            OPENED.pop().close()
        except Exception:  # noqa: BLE001 - a store that cannot close has nothing left to save
            pass
    gc.freeze()


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(mark_query_words(list(sys.argv[1:] if argv is None else argv)))
    try:
        from ..config.settings import apply_flags, current

        apply_flags(schema=getattr(args, "schema", None))
        current()  # every setting is checked before anything is opened or written
        if hasattr(args, "log_format"):  # a command that drives runs logs its events (--log-format, --log-level)
            from .driving import start_logs

            start_logs(args)
        return command(args.command)(args)
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
        from ..redaction import redacted_line

        print(f"dayflow: internal error: {type(exc).__name__}: {redacted_line(exc, 300)} "
              "(set DAYFLOW_DEBUG=1 for a traceback)", file=sys.stderr)
        return 70
