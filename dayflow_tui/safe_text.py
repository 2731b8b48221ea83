"""Make untrusted text (model output, tool payloads, mail) safe to show.

Terminal control characters (ESC, CSI/OSC introducers, BEL, C1 codes) are
replaced by visible escapes such as ``\\x1b``, so a mail subject can never
move the cursor, retitle the terminal or smuggle a hyperlink. Markup is a
separate matter: callers render through ``rich.text.Text`` or
``Content``, never through markup parsing.
"""

from __future__ import annotations

import json
import re

# C0 controls except tab and newline, DEL, C1 controls, lone surrogates
# (undecodable bytes: a terminal cannot be sent them at all), and the bidi
# embedding/override/isolate controls, which reorder what is shown so a
# subject can read differently from what it holds ("Trojan Source").
# Right-to-left letters themselves are shown as they are.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` with every terminal control character shown as an escape."""
    return _CONTROL.sub(_escape, str(text))


def one_line(text: object, width: int) -> str:
    """First line of ``text``, made printable and cut to ``width`` characters."""
    line = printable(text).replace("\t", " ")
    line = line.split("\n", 1)[0]
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


# What json.dumps(ensure_ascii=False) leaves raw but a terminal may act on (DEL, C1 controls
# such as the one-byte CSI) or cannot be written at all (lone surrogates).
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\ud800-\udfff]")


def printable_json(value: object, *, indent: int | None = 2) -> str:
    """``value`` as JSON for a terminal or a script: readable UTF-8, every control character escaped."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
