"""How run data reads on screen: status glyphs and words, numbers, times.

Every untrusted string goes through ``safe_text`` before it reaches a
renderable; these helpers only shape trusted values (counts, timestamps).
"""

from __future__ import annotations

from ..safe_text import one_line
from ..views import time as time_text

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
    "cancelled": ("⊘", "cancelled"),
}
# Theme colours for statuses shown inside text (the run table takes its colours from styles/run_list.tcss).
STATUS_STYLES = {"done": "$text-success", "running": "$text-accent", "interrupted": "$text-warning",
                 "failed": "$text-error", "budget": "$text-secondary", "queued": "$text-primary",
                 "waiting": "$text-warning", "forked": "$text-primary",
                 "cancelled": "$text-secondary"}
STATUS_ORDER = ("done", "running", "interrupted", "failed", "budget", "queued", "waiting", "forked", "cancelled")


def status_label(status: str) -> str:
    glyph, word = STATUS_LOOK.get(status, ("?", one_line(status, 20)))  # one Dayflow never wrote: as text
    return f"{glyph} {word}"


def tokens(n: int | None) -> str:
    """``12,345``; a count a damaged SQLite row holds as text is shown as that text, never a crash."""
    if n is None or isinstance(n, (int, float)):
        return f"{n or 0:,}"
    return one_line(n, 20)


# Times read the same here as in ``dayflow`` (one formatter, in views.time).
started = time_text.started
ago = time_text.ago
seconds = time_text.gap
