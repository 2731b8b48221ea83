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
