"""How run data reads on screen: status glyphs and words, numbers, times.

Every untrusted string goes through ``safe_text`` before it reaches a
renderable; these helpers only shape trusted values (counts, timestamps).
"""

from __future__ import annotations

from datetime import datetime

from .. import clock
from ..money.estimate import duration
from ..safe_text import one_line, printable

# effective status -> (glyph, word). The word makes the status readable without colour.
STATUS_LOOK: dict[str, tuple[str, str]] = {
    "done": ("✔", "done"),
    "running": ("▶", "running"),
    "interrupted": ("⚠", "interrupted"),
    "failed": ("✖", "failed"),
    "budget": ("◼", "budget"),
    "queued": ("…", "queued"),
    "waiting": ("⏸", "waiting"),
    "forked": ("⑂", "forked"),
}
# Theme colours for statuses shown inside text (the run table takes its colours from styles/run_list.tcss).
STATUS_STYLES = {"done": "$text-success", "running": "$text-accent", "interrupted": "$text-warning",
                 "failed": "$text-error", "budget": "$text-secondary", "queued": "$text-primary",
                 "waiting": "$text-warning", "forked": "$text-primary"}
STATUS_ORDER = ("done", "running", "interrupted", "failed", "budget", "queued", "waiting", "forked")


def status_label(status: str) -> str:
    glyph, word = STATUS_LOOK.get(status, ("?", one_line(status, 20)))  # one Dayflow never wrote: as text
    return f"{glyph} {word}"


def tokens(n: int | None) -> str:
    """``12,345``; a count a damaged SQLite row holds as text is shown as that text, never a crash."""
    if n is None or isinstance(n, (int, float)):
        return f"{n or 0:,}"
    return one_line(n, 20)


def started(iso_ts: str | None) -> str:
    """``2026-12-02 13:54:47`` from a stored ISO timestamp (UTC); a damaged one is shown as text."""
    if not iso_ts:
        return ""
    return printable(str(iso_ts)[:19].replace("T", " "))


def _parse(iso_ts: str) -> datetime | None:
    try:
        return datetime.fromisoformat(iso_ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def ago(iso_ts: str | None) -> str:
    """How long ago ``iso_ts`` was, against ``clock.now()`` (pinned in tests)."""
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


def seconds(value: float | None) -> str:
    """A gap between steps: ``0.7s``, ``42s``, ``3m 05s``, ``1h 30m``."""
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.1f}s"
    return duration(value)
