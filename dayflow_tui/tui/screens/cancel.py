"""Cancelling a run from the dashboard: ``C`` on the run list and in a transcript, after a confirm naming it.

The cancel is committed by a thread worker (``store.cancel_run``, recorded as by
"dashboard"), never on the UI thread; a run a live process drives (this
dashboard's own drive included) is asked, and ends at its driver's next commit
or heartbeat. ``C`` shows in the footer only on a run it applies to.
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, Static

from ...redaction import redacted_line
from ...safe_text import one_line, printable
from ...store.models import Run
from ...store.status import ENDED

CANCELLED_BY = "dashboard"
REASON_MOST = 1000


def cancellable(run: Run | None) -> bool:
    """Whether ``C`` applies: a run that has not ended, and whose cancel has not been asked already."""
    return run is not None and run.status not in {s.value for s in ENDED} and not getattr(run, "cancel_at", None)


class RunCancelled(Message):
    """A worker cancelled a run (``asked``: its driver ends it), or could not (``error``)."""

    def __init__(self, run_id: str, asked: bool, error: str | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.asked = asked
        self.error = error


class CancelDialog(ModalScreen[str | None]):
    """Confirm the cancel of one run, named with its task; dismissed with the reason ("" for none), or None."""

    BINDINGS = [("escape", "keep", "Keep it")]

    def __init__(self, run: Run) -> None:
        super().__init__(classes="resume-dialog")
        self.run = run

    def compose(self) -> ComposeResult:
        run = self.run
        with Vertical(id="resume-box"):
            yield Static(Content.styled(f"Cancel run {printable(run.id)}?", "bold"))
            yield Static(Content(f"{printable(run.status)} · {run.step_count} step(s) · task: "
                                 f"{printable(one_line(run.user_msg or '', 120))}"))
            yield Static(Content("A call in flight finishes and is kept; no new call starts and its pending tools "
                                 "do not run. Cancelled is final (a fork can go on from its steps)."))
            yield Input(placeholder="Why (optional)", id="cancel-reason")
            with Horizontal(id="resume-buttons"):
                yield Button("Cancel run", id="cancel-confirm", variant="error")
                yield Button("Keep it", id="cancel-keep")

    def on_mount(self) -> None:
        reason = self.query_one("#cancel-reason", Input)
        reason.cursor_blink = False  # as in the edit dialog: a steady cursor (and a steady snapshot)
        reason.focus()

    @on(Input.Submitted, "#cancel-reason")
    @on(Button.Pressed, "#cancel-confirm")
    def _confirm(self) -> None:
        self.dismiss(" ".join(self.query_one("#cancel-reason", Input).value.split())[:REASON_MOST])

    @on(Button.Pressed, "#cancel-keep")
    def action_keep(self) -> None:
        self.dismiss(None)


class CancelsRuns(Screen):
    """``C``: a mixin for the screens that show a run (``run_to_cancel``), a ``Screen`` so its handlers register."""

    def run_to_cancel(self) -> Run | None:
        raise NotImplementedError

    def can_cancel(self) -> bool:
        return cancellable(self.run_to_cancel())

    def action_cancel_run(self) -> None:
        run = self.run_to_cancel()
        if not cancellable(run):
            return

        def chosen(reason: str | None) -> None:
            if reason is not None:
                self._cancel(run.id, reason or None)

        self.app.push_screen(CancelDialog(run), chosen)

    @work(thread=True, exclusive=True, exit_on_error=False, group="cancel")
    def _cancel(self, run_id: str, reason: str | None) -> None:
        store = self.app.store
        try:
            outcome = store.cancel_run(run_id, by=CANCELLED_BY, reason=reason)
            self.post_message(RunCancelled(run_id, outcome.asked, None))
        except Exception as exc:  # ended meanwhile, or the database: the line says which
            self.post_message(RunCancelled(run_id, False, redacted_line(exc, 200)))
        finally:
            store.close_thread_connection()

    @on(RunCancelled)
    def _cancelled(self, message: RunCancelled) -> None:
        if message.error:
            self.app.notify(f"Run {message.run_id} was not cancelled: {printable(message.error)}",
                            severity="warning")
        elif message.asked:
            self.app.notify(f"Cancel asked of run {message.run_id}: it stops after its call in flight.",
                            title="Cancel")
        else:
            self.app.notify(f"Run {message.run_id} is cancelled.", title="Cancel")
        self.run_changed(message.run_id)  # each screen's own: read the run again
