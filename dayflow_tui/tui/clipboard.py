"""``y`` and ``Y``: a run's id, or the command that resumes it, to the clipboard (OSC 52), with a toast."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..safe_text import one_line, printable


def resume_command(store, run_id: str) -> str:
    """``dayflow resume ID``, naming the database when it is a SQLite file other than the default one.

    A PostgreSQL URL may carry a password, so it is never put on a clipboard (DAYFLOW_DB names it there).
    """
    from ..store import default_db_path

    text = f"dayflow resume {shlex.quote(run_id)}"
    path = store.label
    if store.dialect.title == "SQLite" and Path(path).resolve() != Path(default_db_path()).resolve():
        text += f" --db {shlex.quote(path)}"
    return text


def copy_run(app, run_id: str, *, command: bool = False) -> None:
    text = resume_command(app.store, run_id) if command else run_id
    app.copy_to_clipboard(text)
    app.notify(printable(one_line(text, 200)), title="Copied to the clipboard")
