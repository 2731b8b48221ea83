"""``dayflow-tui``'s entry point: its arguments, the store opened (with a migration's progress on stderr), the
theme setting checked, then the app run. Errors before the screen is taken are one line and an exit code."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from ..config.errors import DayflowError
from ..safe_text import printable
from ..store import open_store
from ..terminal_progress import ProgressBar
from .app import WATCHABLE_DELAY_S, DayflowApp


def build_parser() -> argparse.ArgumentParser:
    from ..config.values import address, argument, identifier

    parser = argparse.ArgumentParser(prog="dayflow-tui", description="Watch, inspect and resume Dayflow runs.")
    parser.add_argument("--db", metavar="PATH|URL", help="database file, sqlite:///PATH or "
                        "postgresql://USER@HOST:PORT/DBNAME (default: $DAYFLOW_DB or "
                        "~/.local/share/dayflow/dayflow.db)")
    parser.add_argument("--schema", type=argument(identifier), metavar="NAME",
                        help="PostgreSQL: the schema Dayflow's tables are in (default: $DAYFLOW_SCHEMA)")
    parser.add_argument("--serve", metavar="HOST:PORT", nargs="?", const=("127.0.0.1", 8000),
                        type=argument(address), help="serve the dashboard to a browser (textual-serve) on "
                        "HOST:PORT (default 127.0.0.1:8000), at a URL with a random token it prints")
    parser.add_argument("--follow-claude-code", metavar="DIR", nargs="?", const="~/.claude/projects",
                        help="import Claude Code's sessions under DIR (default ~/.claude/projects) now and again "
                        "every second while the dashboard is open, so live sessions show as they grow (read-only)")
    return parser


def _print_note(text: str) -> None:
    print(f"dayflow-tui: note: {printable(text)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ..config import settings as chosen

    chosen.apply_flags(schema=args.schema)
    try:
        with ProgressBar.for_stderr("indexing runs for search") as bar:  # a migration, before the screen is taken
            store = open_store(args.db, on_progress=bar, on_note=_print_note)
    except DayflowError as exc:  # a database that cannot serve (2), a missing file or directory (64)
        print(f"dayflow-tui: error: {printable(exc)}", file=sys.stderr)
        return exc.exit_code
    from ..config import settings

    if args.serve is not None:  # the database checked above; each browser connection opens its own
        store.close()
        from .serve import serve

        try:
            return serve(args.db, *args.serve)
        except DayflowError as exc:
            print(f"dayflow-tui: error: {printable(exc)}", file=sys.stderr)
            return exc.exit_code
        except OSError as exc:  # the address is taken, or not this machine's
            print(f"dayflow-tui: error: cannot listen on {printable(args.serve[0])}:{args.serve[1]}: "
                  f"{printable(exc.strerror or exc)}", file=sys.stderr)
            return 1
    follow = None
    if args.follow_claude_code is not None:
        from pathlib import Path

        follow = Path(args.follow_claude_code).expanduser()
        if not follow.is_dir():
            store.close()
            print(f"dayflow-tui: error: {printable(follow)}: no such directory (Claude Code keeps its sessions in "
                  "~/.claude/projects)", file=sys.stderr)
            return 64
    theme = settings.current().theme
    if theme and theme not in DayflowApp.known_themes():
        store.close()
        print(f"dayflow-tui: error: theme {printable(theme)!r} (setting theme) is not one of: "
              f"{', '.join(sorted(DayflowApp.known_themes()))}", file=sys.stderr)
        return 2
    if os.environ.get("DAYFLOW_OFFLINE_DELAY") is None and settings.current().offline_delay_s == 0:
        settings.apply_flags(offline_delay_s=float(WATCHABLE_DELAY_S))  # slow enough to watch a run arrive
    try:
        DayflowApp(store, follow_claude_code=follow).run()
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
