"""One parser per kind of value, for every place a value is typed: command-line flags and the settings file.

Each parser takes what was given (a flag's text, an environment variable, a
TOML value) and returns the value, or raises ``BadValue`` whose message ends
the sentence "<the setting> ..." (``must be a number of seconds``). The edges
say it their way: ``argument`` turns it into argparse's one-line usage error,
the settings loader into ``SettingsError``; neither parses anything itself.
So ``dayflow spend --since 90s``, ``dayflow search --since 90s`` and
``dayflow prune --older-than 90s`` read ages the same way.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable

from .. import clock
from .errors import UsageError

DAY_S = 86_400
LARGEST_INT = 2**31 - 1
LARGEST_DOLLARS = Decimal(1_000_000)
LONGEST_AGE = timedelta(days=100 * 365)
AGE_FORMS = "an age (90s, 30m, 12h, 7d, 2w) or a date (2026-12-01)"


class BadValue(ValueError):
    """A value that cannot be used; the message finishes "<name> ...": ``must be a whole number``."""


def shown(raw: Any) -> str:
    """The given value as it is quoted back: repr, cut to 40 characters."""
    text = raw if isinstance(raw, str) else str(raw)
    return repr(text if len(text) <= 40 else text[:40] + "…")


# -- numbers -------------------------------------------------------------------------------------------


def whole(raw: Any, *, least: int = 0, most: int = LARGEST_INT) -> int:
    """A whole number from ``least`` to ``most`` (``3``, ``"3"``; never ``3.5``, ``true``)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise BadValue("must be a whole number")
    try:
        value = int(raw)
    except ValueError:
        raise BadValue("must be a whole number") from None
    if value < least:
        raise BadValue(f"must be {least} or more" if least else "must not be negative")
    if value > most:
        raise BadValue(f"is too large (at most {most:,})")
    return value


PRIORITY_MOST = 1_000_000


def priority(raw: Any) -> int:
    """A run's priority: a whole number, negative allowed (claims take higher first; 0 is the default)."""
    return whole(raw, least=-PRIORITY_MOST, most=PRIORITY_MOST)


def positive(raw: Any, *, most: int = LARGEST_INT) -> int:
    """A whole number above 0: a limit, a step count, a token budget."""
    return whole(raw, least=1, most=most)


def thread_count(raw: Any) -> int:
    """How many threads: 1 to 256."""
    return whole(raw, least=1, most=256)


def tokens_or_off(raw: Any) -> int | None:
    """A number of tokens, or ``off`` (also ``0`` or nothing): None."""
    if isinstance(raw, str) and raw.strip().lower() in ("", "off", "0"):
        return None
    if raw == 0 and not isinstance(raw, bool):
        return None
    try:
        return whole(raw.strip() if isinstance(raw, str) else raw)
    except BadValue:
        raise BadValue("must be a number of tokens or 'off'") from None


def seconds(raw: Any, *, most: float = 365 * DAY_S) -> float:
    """A number of seconds, 0 or more (``2``, ``0.5``)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise BadValue("must be a number of seconds")
    try:
        value = float(raw)
    except ValueError:
        raise BadValue("must be a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise BadValue("must be a finite number of seconds, 0 or more")
    if value > most:
        raise BadValue(f"is too large (at most {most:g} seconds)")
    return value


def dollars(raw: Any, *, above_zero: bool = False) -> Decimal:
    """An amount of dollars (``0.50``, ``$2``), exactly (Decimal)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str, Decimal)):
        raise BadValue("must be an amount of dollars")
    try:
        value = Decimal(str(raw).strip().lstrip("$"))
    except InvalidOperation:
        raise BadValue("must be an amount of dollars") from None
    if not value.is_finite() or value < 0 or (above_zero and value == 0):
        raise BadValue("must be an amount of dollars above 0" if above_zero else
                       "must be a finite amount of dollars, 0 or more")
    if value > LARGEST_DOLLARS:
        raise BadValue("is too large")
    return value


def dollars_or_off(raw: Any) -> Decimal | None:
    """An amount of dollars, or ``off`` (``none``, nothing): None."""
    if isinstance(raw, str) and raw.strip().lower() in ("", "off", "none"):
        return None
    return dollars(raw)


# -- time ----------------------------------------------------------------------------------------------

_AGE = re.compile(r"\s*(\d{1,9}(?:\.\d{1,6})?)\s*([smhdw])\s*", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": DAY_S, "w": 7 * DAY_S}


def age(raw: Any) -> timedelta:
    """A span back from now: ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (``1.5d`` too), at most 100 years."""
    match = _AGE.fullmatch(raw) if isinstance(raw, str) else None
    if match is None:
        raise BadValue("must be an age such as 90s, 30m, 12h, 7d or 2w")
    span_s = float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]
    if span_s > LONGEST_AGE.total_seconds():
        raise BadValue("is more than 100 years")
    return timedelta(seconds=span_s)


def since(raw: Any, now: datetime | None = None) -> str:
    """The stored timestamp (UTC) of ``raw``: an age ago (``7d``), or a date or time (UTC unless it says)."""
    if not isinstance(raw, str):
        raise BadValue(f"must be {AGE_FORMS}")
    try:
        return clock.iso((now or clock.now()) - age(raw))
    except BadValue as why:
        if _AGE.fullmatch(raw):  # an age, but too long
            raise why from None
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadValue(f"must be {AGE_FORMS}") from None
    return clock.iso(moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc))


def parse_since(text: str, now: datetime | None = None) -> str:
    """``--since``'s value as a stored timestamp; a bad one is one ``UsageError`` line (exit 64)."""
    try:
        return since(text, now)
    except BadValue as why:
        raise UsageError(f"--since {shown(text)} {why}") from None


# -- text ----------------------------------------------------------------------------------------------


def text(raw: Any) -> str | None:
    """Text, stripped; nothing is None."""
    if not isinstance(raw, str):
        raise BadValue("must be text")
    return raw.strip() or None


def flag(raw: Any) -> bool:
    """On or off: ``true``/``1``/``yes``; ``false``/``0``/``no``/``off``/nothing."""
    if isinstance(raw, bool):
        return raw
    return str(raw).strip().lower() not in ("", "0", "false", "no", "off")


def http_url(raw: Any) -> str | None:
    """An ``http://`` or ``https://`` URL (nothing: None)."""
    found = text(raw)
    if found is None:
        return None
    scheme, sep, rest = found.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.strip("/"):
        raise BadValue("is not an http:// or https:// URL")
    return found


def address(raw: Any, *, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """Where to listen: ``HOST:PORT``, ``[IPv6]:PORT``, ``HOST`` (port 8000) or ``PORT`` (on ``default_host``)."""
    found = text(raw)
    if found is None:
        raise BadValue("must be HOST:PORT")
    host, port = found, "8000"
    if found.isdigit():
        host, port = default_host, found
    elif found.startswith("["):
        inside, close, rest = found[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise BadValue("must be HOST:PORT ([::1]:8000 for an IPv6 address)")
        host, port = inside, rest[1:] or port
    elif found.count(":") == 1:
        host, port = found.split(":")
    elif ":" in found:
        raise BadValue("must be HOST:PORT ([::1]:8000 for an IPv6 address)")
    if not host or not re.fullmatch(r"[A-Za-z0-9.:_-]+", host):
        raise BadValue("must be HOST:PORT (a host name or an address)")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise BadValue("must be HOST:PORT with a port from 1 to 65535")
    return host, int(port)


def path(raw: Any) -> Path | None:
    """A file or directory path, ``~`` expanded (nothing: None)."""
    found = text(raw)
    return Path(found).expanduser() if found else None


def one_of(raw: Any, choices: tuple[str, ...]) -> str:
    """One word of ``choices``, any case (``json``, ``JSON``): a log format, a log level."""
    found = text(raw) if isinstance(raw, str) else None
    if found is None or found.lower() not in choices:
        raise BadValue(f"must be one of {', '.join(choices)}")
    return found.lower()


def port_or_off(raw: Any) -> int | None:
    """A TCP port, 0 to 65535 (0: any free port, chosen when it is bound); nothing or ``off``: None."""
    if isinstance(raw, str) and raw.strip().lower() in ("", "off"):
        return None
    try:
        return whole(raw, most=65535)
    except BadValue:
        raise BadValue("must be a port number (0 to 65535; 0: any free port) or 'off'") from None


def host_name(raw: Any) -> str:
    """A host name or address to listen on (``127.0.0.1``, ``0.0.0.0``, ``::1``, ``localhost``)."""
    found = text(raw) if isinstance(raw, str) else None
    if found is None or len(found) > 253 or not re.fullmatch(r"[A-Za-z0-9.:\-\[\]%]+", found):
        raise BadValue("must be a host name or an IP address")
    return found.strip("[]")


def identifier(raw: Any) -> str | None:
    """A database identifier written without quotes: a letter or ``_``, then letters, digits or ``_``, at most
    63 bytes (PostgreSQL's limit), folded to lower case as PostgreSQL folds it; nothing is None. It goes into
    SQL quoted, so nothing else may be in it."""
    found = text(raw)
    if found is None:
        return None
    if len(found) > 63 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", found):
        raise BadValue("must be a name of letters, digits and _ (not starting with a digit, at most 63)")
    return found.lower()


def tool_names(raw: Any) -> tuple[str, ...]:
    """Tool names, as a list or separated by commas: letters, digits, ``_`` and ``-``, at most 64 each."""
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, (list, tuple)):
        raise BadValue("must be a list of tool names")
    names = []
    for item in items:
        if not isinstance(item, str):
            raise BadValue("must be a list of tool names")
        name = item.strip()
        if name and (len(name) > 64 or not re.fullmatch(r"[A-Za-z0-9_-]+", name)):
            raise BadValue(f"holds {shown(name)}, which is not a tool name")
        if name:
            names.append(name)
    return tuple(dict.fromkeys(names))


# -- the command line's side -------------------------------------------------------------------------------


def argument(parse: Callable[..., Any], **options: Any) -> Callable[[str], Any]:
    """``parse`` as an argparse ``type=``: a bad value is argparse's one usage line (exit 64 in ``dayflow``)."""
    import argparse

    def parse_argument(raw: str) -> Any:
        try:
            return parse(raw, **options)
        except BadValue as why:
            raise argparse.ArgumentTypeError(f"{shown(raw)} {why}") from None

    parse_argument.__name__ = parse.__name__
    return parse_argument
