"""How a command opens the database, and what it opened (closed by ``cli.main`` before the process exits)."""

from __future__ import annotations

import argparse
import sys

from ..safe_text import printable

OPENED: list = []  # stores this command opened, closed before the process exits


def open_db(args: argparse.Namespace, *, create: bool = True, upgrade: bool = True):
    from ..store import open_store
    from ..terminal_progress import ProgressBar

    keep_password_secret(args.db)

    # Opening may migrate, and the migration that adds the search index reads every step: a bar on a terminal.
    with ProgressBar.for_stderr("indexing runs for search") as bar:
        store = open_store(args.db, create=create, upgrade=upgrade, on_progress=bar, on_note=print_note)
    OPENED.append(store)
    return store


def keep_password_secret(target) -> None:
    """The database's password (in its URL, or ``PGPASSWORD``) is redacted like the API key from every
    line this process logs or prints through ``redaction``."""
    import os
    from urllib.parse import parse_qsl, urlsplit

    from ..config.settings import current
    from ..redaction import also_secret

    url = str(target or current().db or "")
    if "://" in url:
        try:
            parts = urlsplit(url)
            also_secret(parts.password)
            for key, value in parse_qsl(parts.query):
                if key.lower() == "password":
                    also_secret(value)
        except ValueError:
            pass  # not a URL the store can open either: it says so
    also_secret(os.environ.get("PGPASSWORD"))


def print_note(text: str) -> None:
    print(f"dayflow: note: {printable(text)}", file=sys.stderr)


def open_for_reading(args: argparse.Namespace):
    """Reading never writes: a named database (``--db``, ``$DAYFLOW_DB``) must exist, so a typo is not a new
    empty file, and an older schema is not upgraded behind the reader's back."""
    from ..config.settings import current

    return open_db(args, create=not (args.db or current().db), upgrade=False)
