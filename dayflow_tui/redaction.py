"""Keep the API key out of everything that is shown, logged or stored.

Redaction runs *before* any cut: a message shortened first could keep a part
of the key that straddles the cut, and a part is as good as the key to a
person reading over a shoulder. After the cut, a trailing piece that could be
the start of the key (8 characters or more) is removed as well.

The database's password is a secret too: the command line registers it
(``also_secret``) when it opens a URL that carries one, and any URL with a
password in it (``scheme://user:PASSWORD@host``, ``password=...``) has the
password replaced wherever it appears.
"""

from __future__ import annotations

import os
import re
import sys
import threading

from .safe_text import one_line

REDACTED = "[redacted]"
# Pieces of the key shorter than this are too common to mean anything (and removing them would
# garble ordinary words); pieces this long or longer are removed wherever a cut exposes them.
MIN_PIECE = 8


# A password in a URL's user part, or a libpq "password=" parameter: kept out whoever wrote it.
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*):([^@\s/]+)@")
_PASSWORD_PARAM = re.compile(r"(?i)\b(password=)([^&\s]+)")
# Shorter secrets than this are not registered: replacing them everywhere would garble ordinary words.
MIN_SECRET = 4

_extra: frozenset[str] = frozenset()
_extra_lock = threading.Lock()


def also_secret(value: str | None) -> None:
    """Keep ``value`` (a database password) out of every redacted text from now on, like the API key."""
    global _extra
    if value and len(value) >= MIN_SECRET:
        with _extra_lock:
            _extra = _extra | {value}


def _key() -> str | None:
    key = os.environ.get("ANTHROPIC_API_KEY")
    return key if key and len(key) >= MIN_PIECE else None


def key_fingerprint() -> str:
    """The API key as a name for shared limits: 16 hex digits of a salted SHA-256, never the key nor a part of it.

    Two processes with the same key get the same name (so they share a limit); the name cannot be turned back
    into the key, and no piece of the key appears in it. No key (the offline model): ``"none"``.
    """
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        return "none"
    import hashlib

    return hashlib.sha256(b"dayflow shared limits\0" + key.encode()).hexdigest()[:16]


def _secrets() -> list[str]:
    """Every secret to hide, the longest first (so one that contains another goes whole)."""
    key = _key()
    found = set(_extra) | ({key} if key else set())
    return sorted(found, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every occurrence of the API key (and of a registered password, or a URL's) replaced."""
    for secret in _secrets():
        text = text.replace(secret, REDACTED)
    if "://" in text:
        text = _URL_PASSWORD.sub(r"\1:***@", text)
    if "=" in text:
        text = _PASSWORD_PARAM.sub(r"\1***", text)
    return text


def _strip_key_edge(text: str, key: str) -> str:
    """Drop a tail of ``text`` that is a prefix (8+ characters, or half of a shorter secret) of the key."""
    least = min(MIN_PIECE, max(MIN_SECRET - 1, len(key) // 2))
    for size in range(min(len(key) - 1, len(text)), least - 1, -1):
        if text.endswith(key[:size]):
            return text[:-size] + REDACTED
    return text


def redact_and_cut(text: str, width: int) -> str:
    """Redact, then cut to ``width`` characters (with ``…``), never leaving a piece of a secret at the edge."""
    text = redact(text)
    if len(text) <= width:
        return text
    cut = text[: max(width - 1, 0)]
    for secret in _secrets():
        cut = _strip_key_edge(cut, secret)
    return cut + "…"


def redacted_line(text: object, width: int) -> str:
    """The first line of ``text``, printable, redacted, then cut to ``width``: the one form for error lines."""
    return redact_and_cut(one_line(text, sys.maxsize), width)
