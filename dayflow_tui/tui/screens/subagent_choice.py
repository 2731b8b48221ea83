"""Enter on a step whose reply started several subagents (parallel calls): which child run to open."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ..widgets.fitting_footer import FittingFooter
from ..widgets.step_detail import child_line


class SubagentChoice(ModalScreen[str | None]):
    """Dismissed with the chosen child run's id, or None (Esc)."""

    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, children: tuple) -> None:
        super().__init__(classes="resume-dialog")
        self.choices = children  # views.run_tree.TreeNode, in the calls' order

    def compose(self) -> ComposeResult:
        with Vertical(id="resume-box"):
            yield Static(Content.styled("This step started several subagent runs: open which?", "bold"))
            yield OptionList(*[Option(child_line(child), id=f"child-{i}") for i, child in enumerate(self.choices)],
                             id="subagent-choice")
        yield FittingFooter()

    def on_mount(self) -> None:
        self.query_one("#subagent-choice", OptionList).focus()

    @on(OptionList.OptionSelected, "#subagent-choice")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.choices[event.option_index].run.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
