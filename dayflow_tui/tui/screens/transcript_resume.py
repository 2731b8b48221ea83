"""The transcript's resume controls: the Resume button, the price of the next call under it, what the last
resume here paid, and the line that says the run is moving.

A part of ``TranscriptScreen`` (a mixin: it reads the screen's ``run`` and
``run_id``), kept apart because none of it is about showing steps. The
price is read in a thread worker (``views.costs.price_resume``).
"""

from __future__ import annotations

from textual import on, work
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, Static

from ...money.cost import format_usd
from ...redaction import redacted_line
from ...safe_text import printable
from ..cost_view import ResumePriced, aged, estimate_line


class ResumeControls(Screen):
    """Resume, and what it will cost; a ``Screen`` so Textual registers the handlers here."""

    def _price_if_changed(self) -> None:
        """Price the next call again when the run moved (a new step, a new status)."""
        run = self.run
        if run is None or self.app.resume_blocker(run) is not None:
            self.query_one("#resume-estimate", Static).display = False
            self._priced_for = None
            return
        key = (run.step_count, run.status, run.updated_at)
        if key != self._priced_for:
            self._priced_for = key
            self.price_next()
        else:
            self._draw_estimate()

    @work(thread=True, exclusive=True, exit_on_error=False, group="price")
    def price_next(self) -> None:
        from ...views.costs import price_resume

        store = self.store
        try:
            priced = price_resume(store, self.run_id)
            self.post_message(ResumePriced(self.run_id, priced.estimate, priced.error))
        except Exception as exc:  # the line says why; the screen goes on
            self.post_message(ResumePriced(self.run_id, None, redacted_line(exc, 200)))
        finally:
            store.close_thread_connection()

    @on(ResumePriced)
    def _priced(self, message: ResumePriced) -> None:
        if message.run_id == self.run_id:
            self.priced = message
            self._draw_estimate()

    def _draw_estimate(self) -> None:
        line = self.query_one("#resume-estimate", Static)
        priced = self.priced
        # Only for a run a resume from here could continue: not done, not moving under a driver.
        if priced is None or self.run is None or self.app.resume_blocker(self.run) is not None:
            line.display = False
            return
        estimate = aged(priced.estimate, priced.at) if priced.estimate is not None else None
        line.update(estimate_line(estimate, priced.error))
        line.display = True

    def _draw_saved(self) -> None:
        """After a resume from here: what it paid, and what it did not pay again."""
        line = self.query_one("#saved", Static)
        result = self.app.resumed.get(self.run_id)
        if result is None or self.app.driving == self.run_id:
            line.display = False
            return
        text = (f"Resumed here: paid {format_usd(result.paid)} for {result.calls} call"
                f"{'s' if result.calls != 1 else ''}")
        if result.replayed_steps:
            many = result.replayed_steps != 1
            text += (f"; the {result.replayed_steps} committed step{'s' if many else ''} "
                     f"({format_usd(result.replayed_cost)}) {'were' if many else 'was'} not paid again")
        line.update(Content.styled(text, "$text-success"))
        line.display = True

    def _draw_resume_button(self) -> None:
        button = self.query_one("#resume-button", Button)
        run = self.run
        blocker = self.app.resume_blocker(run) if run is not None else "no run"
        if blocker is None:
            button.label, button.disabled = Content("Resume"), False
            button.tooltip = "Continue this run where it stopped (r)"
        else:
            short = ("Done" if blocker.startswith("done") else "Running here" if blocker == "being driven here"
                     else "Waiting" if "waits for a decision" in blocker
                     else "Read-only" if "read-only" in blocker else "Busy")
            button.label, button.disabled = Content(short), True
            button.tooltip = printable(f"Cannot resume: {blocker}")
        self.sync_bindings()

    def _draw_live(self) -> None:
        found = self.query("#live")
        if not found:  # a reply's piece can come between the screen's mount and the end of its compose
            return
        live = found.first(Static)
        run = self.run
        blocker = self.app.resume_blocker(run) if run is not None else None
        if self.app.driving == self.run_id and run is not None:
            committed = f"▶ driving this run here: {run.step_count} step{'s' if run.step_count != 1 else ''} committed"
            forming = self.app.forming.get(self.run_id)
            if forming is None:
                live.update(Content.styled(f"{committed}, waiting for the model…", "bold"))
            else:
                # The reply as it streams in (the model's words: plain text, controls escaped, never markup).
                width = max((live.size.width or self.app.size.width) - 4, 20)
                lines = forming.lines(width, most=3 if self.app.size.height < 30 else 5)
                live.update(Content("\n").join([Content.styled(f"{committed}, step {forming.n} arriving:", "bold"),
                                                *(Content("  " + line) for line in lines)]))
            live.display = True
        elif blocker and blocker.startswith("held by"):
            live.update(Content.styled(f"▶ {printable(blocker)}: watching it live; resume is disabled", "bold"))
            live.display = True
        else:
            live.display = False

    def reply_forming(self, run_id: str) -> None:
        """The app's fan-out: a reply of ``run_id`` came further (drawn from what the message carried)."""
        if run_id == self.run_id and self.is_mounted:
            self._draw_live()

    def action_resume(self) -> None:
        self.app.resume_run(self.run_id, run=self.run)
        self._draw_resume_button()

    def action_resume_with_budget(self) -> None:
        self.app.resume_run(self.run_id, ask=True, run=self.run)
        self._draw_resume_button()

    @on(Button.Pressed, "#resume-button")
    def _resume_pressed(self) -> None:
        self.action_resume()
