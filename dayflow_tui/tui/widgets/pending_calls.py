"""The calls a waiting run holds for a person, one row each: space marks, the transcript's keys decide.

A ``SelectionList`` over ``views.pending.PendingCall`` rows (read on the reader thread): the tool,
its kind of side effect, a short preview of the arguments. Redrawn only when the calls change, so a
live tick keeps the marks and the cursor where the person left them.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content
from textual.widgets import SelectionList
from textual.widgets.selection_list import Selection

from ...safe_text import one_line

KIND_STYLE = {"plain": "bold $text-warning", "idempotent": "$text-muted", "read only": "$text-muted"}


def call_prompt(call) -> Content:
    return Content.assemble((one_line(call.tool, 24), "bold"), "  ",
                            (call.kind, KIND_STYLE.get(call.kind, "$text-muted")), "  ",
                            (f"step {call.n}", "$text-muted"), "  ", call.preview(160))


class PendingCalls(SelectionList):
    """Waiting calls; ``chosen`` is what ``a``/``d`` act on: the marked ones, else the one under the cursor."""

    # j and k move between the calls while the list has the focus (Tab: to the steps, where they move steps).
    BINDINGS = [Binding("space", "select", "Mark", id="mark-call", tooltip="Mark or unmark the call under the cursor"),
                Binding("j", "cursor_down", "Down", show=False), Binding("k", "cursor_up", "Up", show=False)]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.calls: tuple = ()
        self.border_title = "Waiting for your decision"
        self.border_subtitle = "space marks · a approve · A all · d deny · E edit"

    def show(self, calls: tuple) -> None:
        if tuple((c.tool_use_id, c.input_hash) for c in calls) == tuple(
                (c.tool_use_id, c.input_hash) for c in self.calls):
            self.calls = calls
            return
        marked = set(self.selected)
        highlighted = self.highlighted
        current = self.calls[highlighted].tool_use_id if highlighted is not None and highlighted < len(self.calls) else None
        self.calls = calls
        self.clear_options()
        self.add_options([Selection(call_prompt(call), call.tool_use_id, call.tool_use_id in marked)
                          for call in calls])
        if calls:
            ids = [c.tool_use_id for c in calls]
            self.highlighted = ids.index(current) if current in ids else min(highlighted or 0, len(calls) - 1)
        self.border_title = f"Waiting for your decision: {len(calls)} call{'s' if len(calls) != 1 else ''}"

    @property
    def under_cursor(self):
        index = self.highlighted
        return self.calls[index] if index is not None and 0 <= index < len(self.calls) else None

    @property
    def chosen(self) -> tuple:
        marked = set(self.selected)
        if marked:
            return tuple(call for call in self.calls if call.tool_use_id in marked)
        call = self.under_cursor
        return (call,) if call is not None else ()
