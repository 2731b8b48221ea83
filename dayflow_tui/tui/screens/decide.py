"""Deciding the calls a run waits on, from its transcript: ``a`` approves, ``D`` denies with a reason.

The decision is committed by a thread worker (``store.decide``, one
conditional UPDATE per call, bound to each call's argument hash as shown),
then the run is resumed like any other, in the app's drive worker.
"""

from __future__ import annotations

from typing import Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static, TextArea

from ...safe_text import printable
from ..widgets.fitting_footer import FittingFooter


class Decided(Message):
    """A worker committed (or could not commit) the decisions on a waiting run's calls.

    ``refused``: one line per call another decision got to first (another dashboard, the CLI, an
    earlier press); ``left``: calls still waiting after this; ``calls``: the ids this worker asked for.
    """

    def __init__(self, run_id: str, decided: int, error: str | None, *, refused: tuple[str, ...] = (),
                 left: int = 0, calls: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.run_id = run_id
        self.decided = decided
        self.error = error
        self.refused = refused
        self.left = left
        self.calls = calls


SHOWN_EFFECTS = 10  # lines of side effects the confirm lists (it fits 80x24 with its buttons)


class ApproveAllDialog(ModalScreen[bool]):
    """``A``: every waiting call approved at once, after the person has read what each will do."""

    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, run_id: str, effects: list[str]) -> None:
        super().__init__(classes="resume-dialog")
        self.run_id = run_id
        self.effects = effects

    def compose(self) -> ComposeResult:
        with Vertical(id="resume-box"):
            yield Static(Content.styled(f"Approve all {len(self.effects)} waiting call(s) of run "
                                        f"{printable(self.run_id)}?", "bold"))
            yield Static(Content("They run with these arguments, then the run goes on:"))
            shown = self.effects[:SHOWN_EFFECTS]
            more = len(self.effects) - len(shown)
            yield Static(Content("\n".join(f"• {printable(line)}" for line in shown)
                                 + (f"\n… and {more} more (listed in the transcript)" if more else "")),
                         id="approve-all-effects")
            with Horizontal(id="resume-buttons"):
                yield Button("Approve all", id="approve-all-confirm", variant="warning")
                yield Button("Cancel", id="approve-all-cancel")
        yield FittingFooter()  # the keys of this dialog, where the screen's were

    def on_mount(self) -> None:
        self.query_one("#approve-all-cancel", Button).focus()  # Enter at once cancels: approving is a choice

    @on(Button.Pressed, "#approve-all-confirm")
    def _confirm(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#approve-all-cancel")
    def action_cancel(self) -> None:
        self.dismiss(False)


class DenyDialog(ModalScreen[str | None]):
    """Why the calls are denied: the model is told this reason. Dismissed with the reason, or None."""

    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, run_id: str, calls: list[str]) -> None:
        super().__init__(classes="resume-dialog")
        self.run_id = run_id
        self.calls = calls

    def compose(self) -> ComposeResult:
        with Vertical(id="resume-box"):
            yield Static(Content.styled(f"Deny {len(self.calls)} call(s) of run {printable(self.run_id)}?", "bold"))
            yield Static(Content(printable(", ".join(self.calls))))
            yield Static(Content("The reason, which the model is told:"))
            yield Input(placeholder="e.g. I did this one already", id="deny-reason")
            yield Static(id="deny-problem")
            with Horizontal(id="resume-buttons"):
                yield Button("Deny", id="deny-confirm", variant="error")
                yield Button("Cancel", id="deny-cancel")
        yield FittingFooter()  # the keys of this dialog, where the screen's were

    def on_mount(self) -> None:
        self.query_one("#deny-reason", Input).focus()

    @on(Input.Submitted, "#deny-reason")
    @on(Button.Pressed, "#deny-confirm")
    def _confirm(self) -> None:
        reason = self.query_one("#deny-reason", Input).value.strip()
        if not reason:
            self.query_one("#deny-problem", Static).update(Content.styled("Say why: the model is told.", "bold"))
            return
        self.dismiss(reason[:4000])

    @on(Button.Pressed, "#deny-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class EditDialog(ModalScreen[str | None]):
    """The arguments of one waiting call, to change before approving it (checked against the tool's schema).

    ``ctrl+e`` hands the arguments to ``$EDITOR`` (the app suspends); what the editor leaves comes back into
    the box, checked like typed text when Approve is pressed.
    """

    BINDINGS = [("escape", "cancel", "Cancel"),
                Binding("ctrl+e", "external_editor", "Open in $EDITOR", priority=True, id="edit-in-editor"),
                Binding("ctrl+s", "approve_edit", "Approve", priority=True, id="approve-edit")]

    def __init__(self, run_id: str, call_name: str, call_id: str, arguments: str,
                 problem_of: Callable[[str], str | None] | None = None) -> None:
        super().__init__(classes="resume-dialog")
        self.run_id = run_id
        self.call_name = call_name
        self.call_id = call_id
        self.arguments = arguments
        # What is wrong with the typed text (None: nothing): checked here, so a bad edit keeps the dialog open.
        self.problem_of = problem_of

    def compose(self) -> ComposeResult:
        with Vertical(id="resume-box"):
            yield Static(Content.styled(f"Edit, then approve: {printable(self.call_name)} ({printable(self.call_id)})",
                                        "bold"))
            yield Static(Content.assemble("The arguments as JSON; they are checked against the tool's schema. ",
                                          ("ctrl+e", "bold"), " opens them in your $EDITOR, ",
                                          ("ctrl+s", "bold"), " approves."))
            yield TextArea(printable(self.arguments), id="edit-arguments", soft_wrap=True, show_line_numbers=False)
            yield Static(id="edit-problem")
            with Horizontal(id="resume-buttons"):
                yield Button("Approve", id="edit-confirm", variant="primary")
                yield Button("Cancel", id="edit-cancel")
        yield FittingFooter()  # the keys of this dialog, where the screen's were

    def on_mount(self) -> None:
        area = self.query_one("#edit-arguments", TextArea)
        area.cursor_blink = False
        area.focus()

    def action_approve_edit(self) -> None:
        self._confirm()

    @on(Button.Pressed, "#edit-confirm")
    def _confirm(self) -> None:
        text = self.query_one("#edit-arguments", TextArea).text
        problem = self.problem_of(text) if self.problem_of is not None else None
        if problem:
            # As the deny dialog does: the edit stays, the reason shows under it (as text, never markup).
            self.query_one("#edit-problem", Static).update(Content.styled(printable(problem), "bold"))
            return
        self.dismiss(text)

    def action_external_editor(self) -> None:
        from ..editor import edit_in_editor, file_name

        area = self.query_one("#edit-arguments", TextArea)
        edited = edit_in_editor(self.app, file_name(f"{self.call_name}-{self.call_id}"), area.text)
        if edited is None:
            return
        area.text = edited
        problem = self.problem_of(edited) if self.problem_of is not None else None
        # Said at once, as Approve would: the edit stays in the box to mend.
        self.query_one("#edit-problem", Static).update(
            Content.styled(printable(problem), "bold") if problem else Content.styled("Edited in your editor: "
                                                                                     "Approve to use it.", "$text-muted"))

    @on(Button.Pressed, "#edit-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
