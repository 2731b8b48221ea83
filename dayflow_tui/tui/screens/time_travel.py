"""Time travel in the dashboard: fork a run at the step on show (``F``), and two runs side by side (``d`` twice).

Both read and write through thread workers; the screens only draw what the
workers post back.
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, Static

from ...redaction import redacted_line
from ...safe_text import one_line, printable
from ...views.travel import STATE_WORD, headline
from ..widgets.fitting_footer import FittingFooter
from ..widgets.header import DayflowHeader

STATE_STYLE = {"shared": "$text-muted", "same": "$text-success", "results_differ": "$text-warning", "differs": "bold $text-error",
               "only_a": "magenta", "only_b": "magenta"}


class ForkDialog(ModalScreen["tuple[bool, str | None] | None"]):
    """Fork at step K: an optional note to the model after it. Dismissed with (True, note) or None."""

    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, run_id: str, at: int) -> None:
        super().__init__(classes="resume-dialog")
        self.run_id = run_id
        self.at = at

    def compose(self) -> ComposeResult:
        with Vertical(id="resume-box"):
            yield Static(Content.styled(f"Fork run {printable(self.run_id)} at step {self.at}?", "bold"))
            yield Static(Content(f"Steps 1..{self.at} are copied as stored (not paid again); the parent stays as "
                                 "it is. The fork waits until you resume it (r)."))
            yield Static(Content("A note to the model after that step (optional):"))
            yield Input(placeholder="e.g. Also check the dentist appointment", id="fork-note")
            with Horizontal(id="resume-buttons"):
                yield Button("Fork", id="fork-confirm", variant="primary")
                yield Button("Cancel", id="fork-cancel")
        yield FittingFooter()  # the keys of this dialog, where the screen's were

    def on_mount(self) -> None:
        self.query_one("#fork-note", Input).focus()

    @on(Input.Submitted, "#fork-note")
    @on(Button.Pressed, "#fork-confirm")
    def _confirm(self) -> None:
        note = self.query_one("#fork-note", Input).value.strip()
        self.dismiss((True, note[:4000] or None))

    @on(Button.Pressed, "#fork-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class Forked(Message):
    def __init__(self, parent_id: str, fork_id: str | None, error: str | None) -> None:
        super().__init__()
        self.parent_id = parent_id
        self.fork_id = fork_id
        self.error = error


def fork_in_worker(app, run_id: str, at: int, note: str | None) -> None:
    """Make the fork on a worker thread; ``Forked`` says how it went."""

    def make() -> None:
        from ...agent.messages import messages_from
        from ...store.tables.forks import ForkPlan

        try:
            fork = app.store.fork_run(run_id, ForkPlan(at=at, note=note),
                                      check=lambda run, steps: messages_from(run, steps))
            app.post_message(Forked(run_id, fork.id, None))
        except Exception as exc:  # a bad fork point, the database: one line
            app.post_message(Forked(run_id, None, redacted_line(exc, 200)))
        finally:
            app.store.close_thread_connection()

    app.run_worker(make, thread=True, exclusive=True, exit_on_error=False, group="fork")


class DiffRead(Message):
    def __init__(self, diff, error: str | None) -> None:
        super().__init__()
        self.diff = diff
        self.error = error


class DiffScreen(Screen):
    """Two runs step by step, side by side: one scroll, so both sides move together."""

    BINDINGS = [Binding("escape,backspace", "dismiss", "Back", id="close-diff")]

    def __init__(self, run_a: str, run_b: str) -> None:
        super().__init__(classes="diff-screen")
        self.run_a = run_a
        self.run_b = run_b
        self.diff = None

    def compose(self) -> ComposeResult:
        yield DayflowHeader()
        yield Static(Content.styled(f"Comparing {self.run_a} (A) and {self.run_b} (B)…", "$text-muted"), id="diff-summary")
        yield VerticalScroll(id="diff-steps")
        yield FittingFooter()

    def on_mount(self) -> None:
        self._read()

    @work(thread=True, exclusive=True, exit_on_error=False, group="diff")
    def _read(self) -> None:
        from ...views.travel import read_diff

        store = self.app.store
        try:
            self.post_message(DiffRead(read_diff(store, self.run_a, self.run_b).diff, None))
        except Exception as exc:
            self.post_message(DiffRead(None, redacted_line(exc, 200)))
        finally:
            store.close_thread_connection()

    @on(DiffRead)
    def _show(self, message: DiffRead) -> None:
        summary = self.query_one("#diff-summary", Static)
        if message.error is not None:
            summary.update(Content.styled(f"cannot compare: {message.error}", "bold $text-error"))
            return
        diff = self.diff = message.diff
        (ia, oa), (ib, ob) = diff.tokens
        where = headline(diff)  # from the same rows as drawn below
        shared = f"; steps 1..{diff.common_fork} are shared copies" if diff.common_fork else ""
        summary.update(Content.assemble(
            (f"A {diff.a}  ·  B {diff.b}", "bold"), f"{shared}\n",
            (where, "bold"), f"  ·  tokens A {ia:,}/{oa:,}, B {ib:,}/{ob:,}  ·  calls A {diff.calls[0]}, "
            f"B {diff.calls[1]}"))
        body = self.query_one("#diff-steps", VerticalScroll)
        body.remove_children()
        rows = []
        for step in diff.steps:
            left, right = _side(step, 0), _side(step, 1)
            rows.append(Horizontal(
                Static(Content.assemble((f"{step.n:>3} ", "bold"),
                                        (STATE_WORD[step.state], STATE_STYLE[step.state])), classes="diff-state"),
                Static(left, classes="diff-side"), Static(right, classes="diff-side"), classes="diff-row"))
        body.mount_all(rows)


def _side(step, side: int) -> Content:
    tokens = step.tokens[side]
    if tokens is None:
        return Content.styled("—", "$text-muted")
    stop = step.stop_reason[side]
    parts: list = [(f"{printable(stop or '—')}  {tokens[0]:,}/{tokens[1]:,}", "$text-muted")]
    for call in step.calls:
        mine = call.a if side == 0 else call.b
        if mine is not None:
            parts += ["\n", f"call #{call.index + 1} ", (printable(mine["name"]), "bold"), " ",
                      one_line(str(mine["input"]), 80)]
    for result in step.results:
        mine = result.a if side == 0 else result.b
        if mine is not None:
            parts += ["\n", f"result #{result.index + 1} ", (one_line(mine, 90), "italic")]
    lines = [line for line in step.text_diff if line.startswith("  ") or line.startswith("- " if side == 0 else "+ ")]
    if lines:
        parts += ["\n"] + [part for line in lines for part in (
            (one_line(line[2:], 120), "" if line.startswith("  ") else ("$text-error" if side == 0 else "$text-success")), " ")]
    return Content.assemble(*parts)
