"""Open a document in the user's editor: the app steps aside (suspends), the editor gets the terminal.

``open_in_editor``: the editor sees a temporary read-only copy: what is stored is never edited from
here (edits go through fork and edit, which keep the original). ``edit_in_editor``: a writable
temporary copy of text the person is editing anyway (a waiting call's arguments, ``ctrl+e`` in the
edit dialog), read back when the editor exits; nothing is decided until the dialog's Approve.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from textual.app import App, SuspendNotSupported

from ..safe_text import one_line


def editor_command() -> list[str] | None:
    """The editor to run: the ``editor`` setting (DAYFLOW_EDITOR, $VISUAL, $EDITOR), else vi if installed."""
    from ..config import settings

    configured = settings.current().editor
    if configured:
        try:
            return shlex.split(configured)
        except ValueError:
            return None
    found = shutil.which("vi")
    return [found] if found else None


def file_name(name: str) -> str:
    """A file name for the editor's title bar, from a payload's title (nothing a shell or path cares about)."""
    return (re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "payload") + ".json"


def open_in_editor(app: App, name: str, document: str) -> None:
    _run_editor(app, name, document, writable=False)


def edit_in_editor(app: App, name: str, document: str) -> str | None:
    """``document`` as the person left it in their editor (None: no editor ran, or it failed: said)."""
    return _run_editor(app, name, document, writable=True)


MAX_EDITED = 1_000_000  # characters read back from an edited file (as `dayflow approve --edit` reads)


def _run_editor(app: App, name: str, document: str, *, writable: bool) -> str | None:
    command = editor_command()
    if not command:
        app.notify("No editor: set DAYFLOW_EDITOR or $EDITOR (vi is not installed either).", severity="error",
                   markup=False)
        return None
    with tempfile.TemporaryDirectory(prefix="dayflow-") as folder:
        path = Path(folder) / file_name(name)
        path.write_text(document, encoding="utf-8")
        path.chmod(0o600 if writable else 0o400)
        try:
            with app.suspend():
                finished = subprocess.run([*command, str(path)], check=False)
        except SuspendNotSupported:
            app.notify("The editor needs the terminal, and this dashboard is not running in one.",
                       severity="error", markup=False)
            return None
        except OSError as exc:
            app.notify(f"Could not start the editor {one_line(command[0], 60)}: {one_line(exc.strerror or exc, 80)}. "
                       "Set DAYFLOW_EDITOR or $EDITOR.", severity="error", markup=False)
            return None
        if finished.returncode != 0:
            app.notify(f"The editor {one_line(command[0], 60)} exited with status {finished.returncode}"
                       + ("; the edit was not taken." if writable else "."), severity="warning", markup=False)
            return None
        if not writable:
            return None
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read(MAX_EDITED + 1)[:MAX_EDITED]
        except (OSError, UnicodeDecodeError) as exc:
            app.notify(f"The edited file could not be read back ({exc.__class__.__name__}).", severity="error",
                       markup=False)
            return None
