"""Money in the dashboard: the price line under Resume, the confirm step, and the spend panel.

The numbers come from the core (``money.cost``, ``money.estimate``); this
module only shows them. Every database read or token count runs in a thread
worker and comes back as a message.
"""

from __future__ import annotations

from typing import Any

import dataclasses
import time
from decimal import Decimal, InvalidOperation

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from ..money.cost import format_usd
from ..money.estimate import ResumeEstimate
from ..redaction import redacted_line
from ..safe_text import printable
from .widgets.fitting_footer import FittingFooter

SPEND_REFRESH_S = 5.0


class ResumePriced(Message):
    """A worker priced the next call of ``run_id`` (``estimate`` None: ``error`` says why not)."""

    def __init__(self, run_id: str, estimate: ResumeEstimate | None, error: str | None = None, *,
                 then_resume: bool = False, ask: bool = False, run: Any = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.run = run  # the run as the worker read it (then_resume), so the UI thread need not read it
        self.estimate = estimate
        self.error = error
        self.then_resume = then_resume  # the app priced it to resume it (else: a transcript's line)
        self.ask = ask  # show the confirm step whatever the price
        self.at = time.monotonic()


def aged(estimate: ResumeEstimate, priced_at: float) -> ResumeEstimate:
    """The estimate with the time since the run's last call brought up to now (warm turns cold as it waits)."""
    call = estimate.call
    if call.seconds_since_last is None:
        return estimate
    waited = max(time.monotonic() - priced_at, 0.0)
    return dataclasses.replace(estimate, call=dataclasses.replace(
        call, seconds_since_last=call.seconds_since_last + waited))


def estimate_line(estimate: ResumeEstimate | None, error: str | None = None) -> Content:
    if estimate is None:
        return Content.styled(f"next call: cannot be priced ({printable(error or 'unknown')})", "$text-muted")
    return Content.styled(printable(estimate.line()), "$text-muted")


def needs_confirm(estimate: ResumeEstimate | None, threshold: Decimal) -> bool:
    """Ask before a resume whose next call likely costs more than ``threshold`` (or whose price is unknown)."""
    if estimate is None:
        return False
    likely = estimate.call.likely_cost
    return likely is None or likely.total > threshold


def parse_budget(text: str) -> Decimal | None:
    """The dialog's budget field: empty for none; raises ValueError with the reason."""
    text = text.strip().lstrip("$")
    if not text:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"not an amount of dollars: {text!r}") from None
    if not value.is_finite() or value <= 0 or value > 1_000_000:
        raise ValueError("the budget must be above $0 and at most $1,000,000")
    return value


class ResumeDialog(ModalScreen[tuple[bool, Decimal | None]]):
    """What a resume will cost, and the run's dollar budget, before anything is paid.

    Dismissed with ``(True, budget)`` to resume (budget None: leave the run's own),
    ``(False, None)`` to cancel.
    """

    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, run_id: str, estimate: ResumeEstimate | None, budget: Decimal | None, *,
                 reason: str) -> None:
        super().__init__(classes="resume-dialog")
        self.run_id = run_id
        self.estimate = estimate
        self.budget = budget
        self.reason = reason

    def compose(self) -> ComposeResult:
        with Vertical(id="resume-box"):
            yield Static(Content.styled(f"Resume run {printable(self.run_id)}?", "bold"), id="resume-title")
            yield Static(Content(printable(self.reason)), id="resume-reason")
            if self.estimate is not None:
                spent = format_usd(self.estimate.spent.total)
                yield Static(Content(printable(self.estimate.line())), id="resume-estimate-text")
                yield Static(Content(f"Already paid {spent} for the committed steps; a resume does not pay "
                                     "for them again."), id="resume-spent")
            yield Static(Content("Dollar budget for the whole run (empty: none):"))
            yield Input(value=f"{self.budget.normalize():f}" if self.budget is not None else "",
                        placeholder="e.g. 0.50", id="resume-budget")
            yield Static(id="resume-problem")
            with Horizontal(id="resume-buttons"):
                yield Button("Resume", id="resume-go", variant="primary")
                yield Button("Cancel", id="resume-cancel")
        yield FittingFooter()  # the keys of this dialog, where the screen's were

    def on_mount(self) -> None:
        self.query_one("#resume-go", Button).focus()

    @on(Button.Pressed, "#resume-go")
    @on(Input.Submitted, "#resume-budget")
    def _go(self) -> None:
        try:
            budget = parse_budget(self.query_one("#resume-budget", Input).value)
        except ValueError as exc:
            self.query_one("#resume-problem", Static).update(Content.styled(str(exc), "bold $text-error"))
            return
        self.dismiss((True, budget))

    @on(Button.Pressed, "#resume-cancel")
    def action_cancel(self) -> None:
        self.dismiss((False, None))


class SpendPanel(Static):
    """Spend today, this week and this month, and the model that took most of it (``dayflow spend``)."""

    class Totals(Message):
        def __init__(self, text: Content) -> None:
            super().__init__()
            self.text = text

    def __init__(self, **kwargs) -> None:
        super().__init__(Content.styled("spend: …", "$text-muted"), **kwargs)
        self._last = 0.0

    def on_mount(self) -> None:
        self.refresh_totals(force=True)

    def refresh_totals(self, *, force: bool = False) -> None:
        """Read again, at most every few seconds (the run list calls this on every change)."""
        if force or time.monotonic() - self._last >= SPEND_REFRESH_S:
            self._last = time.monotonic()
            self._read()

    @work(thread=True, exclusive=True, exit_on_error=False, group="spend")
    def _read(self) -> None:
        from ..views.costs import spend_summary

        store = self.app.store
        try:
            self.post_message(self.Totals(Content.styled(spend_summary(store), "$text-muted")))
        except Exception as exc:  # the panel says so; the dashboard goes on
            self.post_message(self.Totals(Content.styled(f"spend: cannot be read ({redacted_line(exc, 120)})",
                                                         "$text-muted")))
        finally:
            store.close_thread_connection()

    @on(Totals)
    def _show(self, message: Totals) -> None:
        self.update(message.text)
