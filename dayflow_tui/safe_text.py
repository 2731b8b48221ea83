"""Make untrusted text (model output, tool payloads, mail) safe to show.

Terminal control characters (ESC, CSI/OSC introducers, BEL, C1 codes) are
replaced by visible escapes such as ``\\x1b``, so a mail subject can never
move the cursor, retitle the terminal or smuggle a hyperlink. Markup is a
separate matter: callers render through ``rich.text.Text`` or
``Content``, never through markup parsing.
"""

from __future__ import annotations

import re

# C0 controls except tab and newline, DEL, and C1 controls.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """``text`` with every terminal control character shown as an escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def one_line(text: object, width: int) -> str:
    """First line of ``text``, made printable and cut to ``width`` characters."""
    line = printable(text).replace("\t", " ")
    line = line.split("\n", 1)[0]
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"
