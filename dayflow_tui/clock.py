"""The one place that reads the wall clock.

``DAYFLOW_FAKE_NOW`` (ISO timestamp) pins it, so snapshot tests, screenshots
and sample-data dates are reproducible.
"""

from __future__ import annotations

import os
from datetime import date, datetime, timezone


def now() -> datetime:
    """Current time, timezone-aware UTC."""
    fake = os.environ.get("DAYFLOW_FAKE_NOW")
    if fake:
        pinned = datetime.fromisoformat(fake)
        return pinned if pinned.tzinfo else pinned.replace(tzinfo=timezone.utc)
    return datetime.now(timezone.utc)


def today() -> date:
    return now().date()


def iso(moment: datetime | None = None) -> str:
    """Second-resolution ISO string stored in the database."""
    return (moment or now()).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def is_pinned() -> bool:
    """True when ``DAYFLOW_FAKE_NOW`` pins the clock (tests, screenshots)."""
    return bool(os.environ.get("DAYFLOW_FAKE_NOW"))


def duration(seconds: float) -> str:
    """A span of time as it is written everywhere: ``45s``, ``2m 10s``, ``1h 05m``, ``2d 3h``.

    Here, at the bottom, because the next call's cache note (``agent``) and
    both front ends (``views.time``) write spans the same way.
    """
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"
