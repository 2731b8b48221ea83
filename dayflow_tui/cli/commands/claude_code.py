"""``dayflow import --claude-code [DIR]``: Claude Code's session files as read-only runs (``claude_code.importer``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...config.errors import NoSuchFile
from ...safe_text import printable
from ..opening import open_db


def import_sessions(args: argparse.Namespace) -> int:
    from ...claude_code.importer import import_claude_code

    root = Path(args.claude_code).expanduser()
    if not root.exists():
        raise NoSuchFile(f"{printable(root)}: no such directory (Claude Code keeps its sessions in ~/.claude/projects)")
    store = open_db(args)  # checked before the database is opened: a wrong DIR creates nothing

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    summary = import_claude_code(store, root, say=say)
    notes = [f"{summary.steps} new step(s) in {len(summary.runs)} run(s)", f"{summary.unchanged} unchanged"]
    if summary.foreign:
        notes.append(f"{summary.foreign} not Claude Code's")
    if summary.problems:
        notes.append(f"{summary.problems} problem(s), said above")
    if summary.waiting:
        notes.append(f"{summary.waiting} still being written (the rest comes next time)")
    print(f"{summary.files} session file(s) under {printable(root)} into {printable(store.label)}: "
          f"{', '.join(notes)}", file=sys.stderr)
    return 0
