"""The workers screen (``w``): every worker process seen in the last day, alive first, with the runs each
holds now; read on the dashboard's reader thread every two seconds. Enter opens a run the worker holds."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ...redaction import redacted_line
from ...safe_text import one_line, printable
from ...views.workers import WorkerLine, worker_lines
from .. import bindings
from ..widgets.fitting_footer import FittingFooter
from ..widgets.header import DayflowHeader

REFRESH_S = 2.0
STATE_STYLE = {"alive": "$text-success", "stale": "$text-warning", "stopped": "$text-muted"}


class WorkersRead(Message):
    def __init__(self, lines: tuple[WorkerLine, ...] | None, error: BaseException | None) -> None:
        super().__init__()
        self.lines, self.error = lines, error


def worker_prompt(line: WorkerLine) -> Content:
    row = line.row
    return Content.assemble(
        (f"{row.state:<8}", STATE_STYLE.get(row.state, "")),
        (printable(one_line(f"{row.host} pid {row.pid}", 60)), "bold"),
        (f" · v{printable(one_line(row.version, 20))} · beat {line.beat} · done {row.runs_done}", "$text-muted"),
        "\n", ("└ ", "$text-muted"), (f"runs {printable(one_line(line.held, 200))}", "" if row.runs else "$text-muted"),
    )


class WorkersScreen(Screen):
    BINDINGS = bindings.WORKERS

    def __init__(self) -> None:
        super().__init__(id="workers")
        self.lines: tuple[WorkerLine, ...] = ()
        self.loaded = False

    def compose(self) -> ComposeResult:
        yield DayflowHeader()
        yield Static(Content.styled("Reading workers…", "$text-muted"), id="workers-status")
        yield OptionList(id="worker-list")
        yield FittingFooter()

    def on_mount(self) -> None:
        self.query_one("#worker-list", OptionList).focus()
        self.action_refresh()
        self.set_interval(REFRESH_S, self.action_refresh)

    def action_refresh(self) -> None:
        store = self.app.store

        def done(result, error) -> None:
            self.post_message(WorkersRead(tuple(result) if result is not None else None, error))

        self.app.reader.submit("workers", lambda: worker_lines(store), done)

    def on_workers_read(self, message: WorkersRead) -> None:
        status = self.query_one("#workers-status", Static)
        if message.error is not None:
            self.app.report_error(message.error)
            status.update(Content.styled(f"cannot read workers: {redacted_line(message.error, 200)}", "$text-error"))
            return
        lines = message.lines or ()
        listing = self.query_one("#worker-list", OptionList)
        highlighted = listing.highlighted
        with self.app.batch_update():
            listing.clear_options()
            listing.add_options([Option(worker_prompt(line), id=f"worker-{line.row.id}") for line in lines])
            if lines:
                listing.highlighted = min(highlighted or 0, len(lines) - 1)
        self.lines, self.loaded = lines, True
        alive = sum(1 for line in lines if line.row.state == "alive")
        text = (f"{alive} alive of {len(lines)} worker{'s' if len(lines) != 1 else ''} seen in the last day · "
                "Enter opens a run it holds" if lines else
                "No workers in the last day. Start one: dayflow worker (it shows up here within a second).")
        status.update(Content.styled(text, "$text-muted"))

    @on(OptionList.OptionSelected, "#worker-list")
    def _open(self, event: OptionList.OptionSelected) -> None:
        line = next((line for line in self.lines if f"worker-{line.row.id}" == event.option_id), None)
        if line is None:
            return
        if not line.row.runs:
            self.app.notify("This worker holds no run now.", severity="information")
            return
        self.app.open_transcript(line.row.runs[0])

    def action_back(self) -> None:
        self.app.pop_screen()
