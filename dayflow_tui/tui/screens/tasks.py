"""The tasks screen (``t``): every side effect the agents made, with the run and step that made each.

Filter as you type: words (title or notes), ``open`` or ``done``, and
``run:ID`` (an id prefix). Reads run on the dashboard's reader thread: the
newest ``SHOWN`` matching tasks and how many match in all, plus the step of
each that created it; the next ``SHOWN`` are read when the cursor reaches the
last one listed. Enter opens that run at that step.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from ...redaction import redacted_line
from ...safe_text import one_line, printable
from ...views.tasks import PAGE, TaskFilter, TaskRow, parse_filter, read_tasks
from .. import bindings, formatting
from ..widgets.fitting_footer import FittingFooter
from ..widgets.header import DayflowHeader

SHOWN = PAGE  # tasks read at once; the cursor at the last one reads the next page
FILTER_PAUSE_S = 0.15


class TasksRead(Message):
    def __init__(self, generation: int, rows: tuple[TaskRow, ...], total: int, error: BaseException | None,
                 *, more: bool = False) -> None:
        super().__init__()
        self.generation, self.rows, self.total, self.error = generation, rows, total, error
        self.more = more  # the next page, to append to the rows listed


def task_prompt(row: TaskRow) -> Content:
    mark = ("✔ ", "$text-success") if row.done else ("○ ", "$text-accent")
    origin = (f"{printable(one_line(row.run_id, 40))}" + (f" step {row.step}" if row.step else "")
              if row.run_id else "not from a run")
    return Content.assemble(
        mark, (printable(one_line(row.title, 120)), "$text-muted" if row.done else "bold"),
        (f"  due {printable(row.due)}" if row.due else "", "$text-warning"),
        "\n   ", (f"{origin}  ·  created {formatting.started(row.created_at)}", "$text-muted"),
    )


class TasksScreen(Screen):
    BINDINGS = bindings.TASKS

    def __init__(self) -> None:
        super().__init__(id="tasks")
        self.generation = 0
        self.rows: tuple[TaskRow, ...] = ()
        self.total = 0
        self.loaded = False
        self._timer = None
        self._filter = TaskFilter()
        self._reading_more = False

    def compose(self) -> ComposeResult:
        yield DayflowHeader()
        yield Input(placeholder="/ filter: words in the title or notes · open · done · run:ID", id="task-filter", compact=True)
        yield Static(Content.styled("Reading tasks…", "$text-muted"), id="tasks-status")
        yield OptionList(id="task-list")
        yield FittingFooter()

    def on_mount(self) -> None:
        self.query_one("#task-filter", Input).cursor_blink = False
        self._read("")
        self.query_one("#task-list", OptionList).focus()

    @on(Input.Changed, "#task-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(FILTER_PAUSE_S, lambda: self._read(event.value))

    @on(Input.Submitted, "#task-filter")
    def _filter_done(self) -> None:
        self.query_one("#task-list", OptionList).focus()

    def _read(self, raw: str) -> None:
        self.generation += 1
        self._filter, self._reading_more = parse_filter(raw), False
        self._submit(before_id=None)

    def _submit(self, *, before_id: int | None) -> None:
        generation, store, task_filter = self.generation, self.app.store, self._filter

        def done(result, error) -> None:
            rows, total = result if result is not None else ((), 0)
            self.post_message(TasksRead(generation, rows, total, error, more=before_id is not None))

        self.app.reader.submit("tasks", lambda: read_tasks(store, task_filter, before_id=before_id, limit=SHOWN), done)

    @on(OptionList.OptionHighlighted, "#task-list")
    def _near_the_end(self, event: OptionList.OptionHighlighted) -> None:
        """The cursor on the last task listed, and more match: read the next page (once at a time)."""
        if (self.loaded and not self._reading_more and self.rows and len(self.rows) < self.total
                and event.option_index >= len(self.rows) - 1):
            self._reading_more = True
            self._submit(before_id=self.rows[-1].id)

    def on_tasks_read(self, message: TasksRead) -> None:
        if message.generation != self.generation:
            return  # an older filter's answer
        status = self.query_one("#tasks-status", Static)
        if message.error is not None:
            self._reading_more = False  # the cursor at the end again tries again
            self.app.report_error(message.error)
            status.update(Content.styled(f"cannot read tasks: {redacted_line(message.error, 200)}", "$text-error"))
            return
        listing = self.query_one("#task-list", OptionList)
        with self.app.batch_update():
            if not message.more:  # a new filter: list from the top (a next page is older than every row, by key)
                self.rows = ()
                listing.clear_options()
            listing.add_options([Option(task_prompt(row), id=f"task-{row.id}") for row in message.rows])
            if not message.more and message.rows:
                listing.highlighted = 0
        self.rows += message.rows
        self.total, self.loaded, self._reading_more = message.total, True, False
        shown = len(self.rows)
        if not message.total:
            typed = self.query_one("#task-filter", Input).value.strip()
            text = (f"No tasks match {printable(one_line(typed, 60))!r}: words of a title or notes, open, done "
                    "or run:ID narrow the list; clear the filter to see them all." if typed else
                    "No tasks yet: runs create them (a daily brief makes one per mail that asks for something).")
        elif shown < message.total:
            text = f"{message.total:,} tasks match; the newest {shown:,} are listed, more as the cursor reaches the end"
        else:
            text = f"{message.total:,} task{'s' if message.total != 1 else ''} · Enter opens the step that made it"
        status.update(Content.styled(text, "$text-muted"))

    @on(OptionList.OptionSelected, "#task-list")
    def _open(self, event: OptionList.OptionSelected) -> None:
        row = next((r for r in self.rows if f"task-{r.id}" == event.option_id), None)
        if row is None:
            return
        if row.run_id is None:
            self.app.notify("This task was not made by a run (it came with the sample data or an import).",
                            severity="warning")
            return
        self.app.open_transcript(row.run_id, at_step=row.step)

    def action_filter(self) -> None:
        self.query_one("#task-filter", Input).focus()

    def action_back(self) -> None:
        self.app.pop_screen()
