"""Long output on a terminal goes through a pager, as git does: ``$PAGER``, else ``less``.

Only when stdout is a terminal and ``--no-pager`` was not given; an empty ``$PAGER`` (or ``cat``) means none.
``less`` gets ``LESS=FRX`` unless the user set ``LESS``: quit when it fits one screen (F), pass colour through
(R), leave the screen as it was (X). ``-R`` passes the SGR colour sequences Rich writes and shows any other
escape as text; untrusted text never reaches it raw anyway (``safe_text.printable`` has neutralised every
control character before Rich sees it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from typing import Iterator

from rich.console import Console

from ..render import transcript_console

DEFAULT_PAGER = "less"


def pager_command() -> str | None:
    """The pager to run, or None: stdout is not a terminal, or ``$PAGER`` says none."""
    if not sys.stdout.isatty():
        return None
    command = os.environ.get("PAGER", DEFAULT_PAGER).strip()
    return None if command in ("", "cat") else command


@contextlib.contextmanager
def paged(enabled: bool = True) -> Iterator[Console]:
    """A Console writing to the pager (when ``enabled`` and there is one), else to stdout.

    A pager the user quits before the end (``q`` in less) is the end of the output, not an error.
    """
    command = pager_command() if enabled else None
    if command is None:
        yield transcript_console()
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    width = shutil.get_terminal_size().columns
    try:
        pager = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env, text=True,
                                 encoding="utf-8", errors="replace")
    except OSError:  # no shell, or it cannot start: print as if there were no pager
        yield transcript_console()
        return
    console = transcript_console(file=pager.stdin, force_terminal=True, width=width)
    # Rich's own handling of a closed pipe exits 1 (it is meant for stdout); q in the pager is a normal end.
    console.on_broken_pipe = _pager_closed
    try:
        yield console
        pager.stdin.close()
    except BrokenPipeError:
        pass  # the user quit the pager
    finally:
        with contextlib.suppress(BrokenPipeError, OSError):
            pager.stdin.close()
        pager.wait()


def _pager_closed() -> None:
    raise BrokenPipeError
