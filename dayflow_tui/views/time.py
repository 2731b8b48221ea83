"""How moments and spans of time read, the same in ``dayflow`` and on the dashboard.

``clock.duration`` is the one way a span is written (the next call's cache
note in ``agent`` uses it too, below this layer); everything here builds on
it and on ``clock.now()`` (pinned in tests).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from .. import clock
from ..clock import duration
from ..safe_text import printable

__all__ = ["duration", "gap", "ago", "started", "age_words"]


def gap(value: float | None) -> str:
    """A gap between steps: ``0.7s``, ``42s``, ``3m 05s``, ``1h 30m``; ``—`` when there is none."""
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.1f}s"
    return duration(value)


def started(iso_ts: str | None) -> str:
    """``2026-12-02 13:54:47`` from a stored ISO timestamp (UTC); a damaged one is shown as text."""
    if not iso_ts:
        return ""
    return printable(str(iso_ts)[:19].replace("T", " "))


def _parse(iso_ts: str) -> datetime | None:
    try:
        return datetime.fromisoformat(iso_ts.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None


def ago(iso_ts: str | None) -> str:
    """How long ago ``iso_ts`` was, against ``clock.now()``: ``42s ago``, ``5m ago``, ``3h ago``, ``2d ago``."""
    then = _parse(iso_ts) if iso_ts else None
    if then is None:
        return ""
    seconds = max((clock.now() - then).total_seconds(), 0)
    if seconds < 60:
        return f"{int(seconds)}s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)}m ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h ago"
    return f"{int(seconds // 86400)}d ago"


def age_words(age: timedelta) -> str:
    """An age as words: ``30 days``, ``2 weeks``, ``90 minutes``; ``45 seconds`` when no larger unit divides it."""
    seconds = int(age.total_seconds())
    for unit, size in (("week", 604_800), ("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"
