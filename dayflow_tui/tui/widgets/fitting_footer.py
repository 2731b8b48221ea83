"""A footer that fits its line: compact spacing when narrow, and the least needed keys left out.

Textual's ``Footer`` draws every shown binding and cuts the line at the
right edge (at 80 columns the transcript's read ``… x Next request r Re``).
This one measures what it would draw and, when that is wider than the
terminal, first packs the keys tighter, then leaves out keys in
``LEAVE_OUT_FIRST`` order, then the screen's ``FOOTER_LEAVE_OUT``, and then from the right. Every key still works and
``?`` lists them all.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# Actions whose keys go first when the line is too short: everywhere-keys a person learns once. `n` goes
# last of them: it is the first key the README gives a new user, who must find it at 80x24.
LEAVE_OUT_FIRST = ("quit", "help", "new_run")
PALETTE_ROOM = 14  # "▏^p palette" at the right edge


def key_width(key: FooterKey, compact: bool) -> int:
    return len(key.key_display) + len(key.description) + (2 if compact else 3)  # "key desc " or " key desc  "


class FittingFooter(Footer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._fitted_width = 0

    def compose(self) -> ComposeResult:
        widgets = list(super().compose())
        width = self.app.size.width - PALETTE_ROOM
        keys = [w for w in widgets if isinstance(w, FooterKey) and "-command-palette" not in w.classes]
        wide = sum(key_width(k, False) for k in keys)
        compact = wide > width
        self.compact = compact
        kept = list(keys)

        def used() -> int:
            return sum(key_width(k, compact) for k in kept)

        for action in LEAVE_OUT_FIRST + tuple(getattr(self.screen, "FOOTER_LEAVE_OUT", ())):
            if used() <= width:
                break
            kept = [k for k in kept if k.action != action]
        while kept and used() > width:
            kept.pop()
        for widget in widgets:
            if not isinstance(widget, FooterKey) or widget in kept or "-command-palette" in widget.classes:
                yield widget

    def on_resize(self, event: events.Resize) -> None:
        # Refit when the terminal's width changes (the bindings' own changes recompose already).
        if self.app.size.width != self._fitted_width:
            self._fitted_width = self.app.size.width
            self.refresh(recompose=True)
