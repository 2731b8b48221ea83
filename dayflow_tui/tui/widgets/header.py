"""The dashboard's header: which database, how many runs in each state, and whether it is reachable.

One line on every screen, in place of Textual's clock header. What it shows
comes from the app (``header_facts``), which the run list's reader snapshots
fill off the UI thread; drawing it reads nothing. Parts give way by priority
on narrow terminals: the name and a lost connection stay longest, runs that
need a person next, totals of finished runs go first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from textual.content import Content
from textual.widget import Widget

from ...safe_text import one_line, printable
from .. import formatting

# The order counts are read in, and (second) how long each stays as the terminal narrows: lower stays longer.
COUNT_ORDER = ("waiting", "running", "interrupted", "failed", "budget", "queued", "done", "forked", "cancelled")
COUNT_PRIORITY = {"waiting": 2, "interrupted": 4, "failed": 5, "running": 6, "budget": 7, "queued": 8,
                  "done": 9, "forked": 10, "cancelled": 11}


@dataclass(frozen=True)
class HeaderFacts:
    database: str
    backend: str  # the database's name as shown (the store dialect's title)
    counts: Mapping[str, int] = field(default_factory=dict)
    counted: bool = False  # False until the first read answered (then "0 runs" means none)
    reconnecting: bool = False


def header_content(facts: HeaderFacts, width: int) -> Content:
    """The header line for ``width`` cells: every part that fits, by priority, in reading order."""
    parts: list[tuple[int, int, Content]] = [(0, 0, Content.styled(" Dayflow", "bold $text-accent"))]
    if facts.reconnecting:
        parts.append((1, 1, Content.styled("⟳ reconnecting…", "bold $text-warning")))
    parts.append((3, 2, Content.assemble((printable(one_line(facts.database, 60)), "bold"))))
    parts.append((11, 3, Content.styled(facts.backend, "$text-muted")))
    if facts.counted:
        shown = [status for status in COUNT_ORDER if facts.counts.get(status)]
        for order, status in enumerate(shown):
            glyph, word = formatting.STATUS_LOOK.get(status, ("?", status))
            style = formatting.STATUS_STYLES.get(status, "")
            parts.append((COUNT_PRIORITY.get(status, 12), 10 + order,
                          Content.styled(f"{glyph} {facts.counts[status]:,} {word}", style)))
        if not shown:
            parts.append((12, 10, Content.styled("no runs yet", "$text-muted")))
    separator = Content.styled("  ·  ", "$text-muted")

    def line(kept: list[tuple[int, int, Content]]) -> Content:
        ordered = [content for _, _, content in sorted(kept, key=lambda part: part[1])]
        return Content.assemble(ordered[0], "  ", separator.join(ordered[1:]))

    kept = list(parts)
    while len(kept) > 1 and line(kept).cell_length > width - 1:
        kept.remove(max(kept, key=lambda part: part[0]))
    return line(kept)


class DayflowHeader(Widget):
    """Docked at the top of each screen; ``refresh()`` redraws it from the app's facts."""

    DEFAULT_CSS = """
    DayflowHeader {
        dock: top;
        height: 1;
        background: $background;
        color: $foreground;
        text-style: none;
    }
    """

    def render(self) -> Content:
        facts = getattr(self.app, "header_facts", None)
        if facts is None:
            return Content.styled(" Dayflow", "bold")
        return header_content(facts(), self.size.width)
