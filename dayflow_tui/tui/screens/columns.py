"""``c`` on the run list: which columns it shows (k9s and Harlequin let you choose; the choice is remembered).

The run's id and its title are always shown; the rest are ticked on or off here. A column
ticked on still leaves a narrow terminal first (``widgets.run_table.DROP_ORDER``) so the
title keeps room.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, SelectionList, Static
from textual.widgets.selection_list import Selection

from ..widgets.fitting_footer import FittingFooter


class ColumnList(SelectionList):
    BINDINGS = [Binding("space", "select", "Show/hide", id="toggle-column")]


class ColumnsDialog(ModalScreen[frozenset | None]):
    """Dismissed with the columns to hide, or None (cancelled)."""

    # Enter applies wherever the focus is (the list itself would take it as space does).
    BINDINGS = [("escape", "cancel", "Cancel"), Binding("enter", "apply", "Apply", priority=True)]

    def __init__(self, optional: tuple[str, ...], hidden: frozenset) -> None:
        super().__init__(classes="resume-dialog")
        self.optional = optional
        self.hidden = hidden

    def compose(self) -> ComposeResult:
        with Vertical(id="resume-box"):
            yield Static(Content.styled("Columns of the run list", "bold"))
            yield Static(Content.assemble(("space", "bold"), " shows or hides the column under the cursor, ",
                                          ("enter", "bold"), " applies. The id and the title are always shown."))
            yield ColumnList(*[Selection(name, name, name not in self.hidden) for name in self.optional],
                                id="columns")
            with Horizontal(id="resume-buttons"):
                yield Button("Apply", id="columns-apply", variant="primary")
                yield Button("Cancel", id="columns-cancel")
        yield FittingFooter()  # the keys of this dialog, where the screen's were

    def on_mount(self) -> None:
        self.query_one("#columns", SelectionList).focus()

    @on(Button.Pressed, "#columns-apply")
    def action_apply(self) -> None:
        shown = set(self.query_one("#columns", SelectionList).selected)
        self.dismiss(frozenset(name for name in self.optional if name not in shown))

    @on(Button.Pressed, "#columns-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
