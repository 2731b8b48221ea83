"""Database URLs: telling one from a file path, and a form fit to show (no password)."""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit, urlunsplit


def is_url(target: str | os.PathLike) -> bool:
    """True for ``scheme://...`` (a database URL), False for a file path."""
    scheme, sep, _rest = os.fspath(target).partition("://")
    return bool(sep) and scheme.replace("+", "").isalpha()


def safe_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: fit for labels, errors and logs."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, _at, hostport = netloc.rpartition("@")
            netloc = f"{userinfo.split(':', 1)[0]}:***@{hostport}"
        query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return url.split("://", 1)[0] + "://***"
