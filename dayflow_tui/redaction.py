"""Keep the API key out of everything that is shown, logged or stored.

Redaction runs *before* any cut: a message shortened first could keep a part
of the key that straddles the cut, and a part is as good as the key to a
person reading over a shoulder. After the cut, a trailing piece that could be
the start of the key (8 characters or more) is removed as well.
"""

from __future__ import annotations

import os
import sys

from .safe_text import one_line

REDACTED = "[redacted]"
# Pieces of the key shorter than this are too common to mean anything (and removing them would
# garble ordinary words); pieces this long or longer are removed wherever a cut exposes them.
MIN_PIECE = 8


def _key() -> str | None:
    key = os.environ.get("ANTHROPIC_API_KEY")
    return key if key and len(key) >= MIN_PIECE else None


def redact(text: str) -> str:
    """``text`` with every occurrence of the API key replaced."""
    key = _key()
    return text.replace(key, REDACTED) if key else text


def _strip_key_edge(text: str, key: str) -> str:
    """Drop a tail of ``text`` that is a prefix (8+ characters) of the key: a cut made there."""
    for size in range(min(len(key) - 1, len(text)), MIN_PIECE - 1, -1):
        if text.endswith(key[:size]):
            return text[:-size] + REDACTED
    return text


def redact_and_cut(text: str, width: int) -> str:
    """Redact, then cut to ``width`` characters (with ``…``), never leaving a piece of the key at the edge."""
    text = redact(text)
    if len(text) <= width:
        return text
    cut = text[: max(width - 1, 0)]
    key = _key()
    if key:
        cut = _strip_key_edge(cut, key)
    return cut + "…"


def redacted_line(text: object, width: int) -> str:
    """The first line of ``text``, printable, redacted, then cut to ``width``: the one form for error lines."""
    return redact_and_cut(one_line(text, sys.maxsize), width)
