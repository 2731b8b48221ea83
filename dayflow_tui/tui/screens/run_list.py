"""The first screen: every run, newest first, live."""

from __future__ import annotations

import time

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static

from ...safe_text import one_line, printable
from ...store import effective_status
from ...views.run_list import SORT_LIMIT, SORTS
from .. import bindings, formatting
from ..clipboard import copy_run
from ..cost_view import SpendPanel
from .remove import Removed
from ..widgets.run_preview import MIN_WIDTH, RunPreview
from ..widgets.run_table import HIDDEN_BY_DEFAULT, OPTIONAL, RunFilter, RunTable, header_text, sort_at
from ..widgets.fitting_footer import FittingFooter
from ..widgets.header import DayflowHeader
from .cancel import CancelsRuns

POLL_EVERY_S = 0.5
FILTERS = (None, *formatting.STATUS_ORDER)


class ColumnHeader(Widget):
    """The run table's column titles, drawn for the width it has when drawn (so it never lags a resize,
    a screen on top, or the table's first appearance), the sorted one marked."""

    def render(self) -> Text:
        screen = self.screen
        run_filter = getattr(screen, "run_filter", RunFilter())
        hidden = getattr(screen, "hidden_columns", HIDDEN_BY_DEFAULT)
        return header_text(max(self.size.width, 1), hidden, run_filter.sort, run_filter.ascending)

    def on_click(self, event: events.Click) -> None:
        """A click on a column's title sorts by it (largest or newest first); on the sorted one, reverses it.
        Columns that sort nothing (id, tokens, model, activity, title) ignore the click."""
        hidden = getattr(self.screen, "hidden_columns", HIDDEN_BY_DEFAULT)
        sort = sort_at(event.x, max(self.size.width, 1), hidden)
        if sort is not None and isinstance(self.screen, RunListScreen):
            self.screen.sort_by(sort)


class RunListScreen(bindings.SyncedBindings, CancelsRuns, Screen):
    BINDINGS = bindings.RUN_LIST
    DYNAMIC_ACTIONS = ("resume", "resume_with_budget", "open", "cancel_run")

    def __init__(self, *, status: str | None = None, sort: str | None = None, ascending: bool = False,
                 hidden: tuple[str, ...] | None = None) -> None:
        super().__init__(id="run-list")
        # The status filter and sort remembered from the last session (ignored when no longer known).
        self.run_filter = RunFilter(status if status in FILTERS else None, sort=sort if sort in SORTS else "started",
                                    ascending=bool(ascending))
        self.hidden_columns = (HIDDEN_BY_DEFAULT if hidden is None
                               else frozenset(name for name in hidden if name in OPTIONAL))

    @property
    def store(self):
        return self.app.store

    def compose(self) -> ComposeResult:
        yield DayflowHeader()
        with Horizontal(id="filter-bar"):
            yield Static(id="filter-status")
        with Horizontal(id="list-body"):
            with Vertical(id="list-main"):
                yield ColumnHeader(id="table-header")
                yield RunTable(self.app.reader, id="runs")
                yield Static(id="empty")
                yield Static(id="preview-line")
            yield RunPreview(id="preview")
        yield SpendPanel(id="spend")
        yield FittingFooter()

    def on_mount(self) -> None:
        self._fold_preview()
        self.table.hidden = self.hidden_columns
        self.table.reload(self.run_filter)
        self._show_state()
        self.table.focus()
        self.set_interval(POLL_EVERY_S, self._poll_tick)

    @property
    def table(self) -> RunTable:
        return self.query_one(RunTable)

    def on_resize(self) -> None:
        self._fold_preview()

    def _fold_preview(self) -> None:
        previews = self.query(RunPreview)
        if previews:
            previews.first().display = self.app.size.width >= MIN_WIDTH
        self._draw_preview_line()

    def _draw_preview_line(self) -> None:
        """Below ``MIN_WIDTH`` the pane folds away and the task column is short: the highlighted run's
        whole task or error (why it stopped) shows here instead, from the row already loaded."""
        lines = self.query("#preview-line")
        if not lines:
            return
        line = lines.first(Static)
        run = self.table.current if self.query(RunTable) else None
        line.display = self.app.size.width < MIN_WIDTH and run is not None
        if run is None or not line.display:
            return
        status = effective_status(run)
        stopped = run.error if run.error and run.status != "done" else None
        text = stopped or run.user_msg or ""  # the whole of it: the row above shows the title
        line.update(Content.assemble(
            (formatting.status_label(status), f"bold {formatting.STATUS_STYLES.get(status, '')}"),
            (f" {printable(one_line(run.id, 40))}: ", "bold"),
            (printable(one_line(text, 400)), "$text-error" if stopped and status != "budget" else ""),
        ))

    def _show_state(self) -> None:
        table, empty = self.table, self.query_one("#empty", Static)
        if not table.loaded_once:
            table.display = False
            self.query_one(ColumnHeader).display = False
            empty.display = True
            empty.update(Content.styled("Reading runs…", "$text-muted"))
            self.query_one("#filter-status", Static).update(Content(""))
            return
        has_rows = table.total > 0
        was_empty = empty.display
        table.display = has_rows
        self.query_one(ColumnHeader).display = has_rows
        empty.display = not has_rows
        if not has_rows:
            if self.run_filter.active:
                empty.update(self._no_match_text())
            else:
                empty.update(Text.assemble("No runs yet. Press ", ("n", "bold"),
                                           " for a first run: a daily brief on the offline model, step by step."))
        shown = f"status: {self.run_filter.status or 'all'}"
        if self.run_filter.search:
            shown += f" · search: {printable(self.run_filter.search)}"
        if self.run_filter.sorted:
            arrow = "▲" if self.run_filter.ascending else "▼"
            shown += f" · sorted by {self.run_filter.sort} {arrow}"
            if table.window.capped:
                shown += f" (the newest {SORT_LIMIT:,} runs)"
        count = f"{table.total:,} run{'s' if table.total != 1 else ''}"
        waiting = table.window.waiting
        if waiting and self.run_filter.status != "waiting":
            shown += f" · ⏸ {waiting:,} waiting for a decision (f to filter)"
        self.query_one("#filter-status", Static).update(Content(f"{count} · {shown}"))
        if was_empty != empty.display:  # the list and the empty state swapped: lay the pane out again
            self._draw_preview_line()
            self.query_one("#list-main").refresh(layout=True)
        self.app.show_waiting(waiting)
        self.app.show_counts(table.window.counts)
        self.sync_bindings()

    def _no_match_text(self) -> Text:
        """What an empty filtered list says: what is filtered, and the keys that clear or change it."""
        run_filter = self.run_filter
        what = []
        if run_filter.status:
            what.append(f"in status {run_filter.status}")
        if run_filter.search:
            what.append(f"matching {printable(one_line(run_filter.search, 60))!r}")
        text = Text.assemble(f"No runs {' and '.join(what)}.\n", "Press ", ("Esc", "bold"), " to clear the filter, ",
                             ("f", "bold"), " for the next status")
        text.append(" or ")
        text.append("F", "bold")
        text.append(" for the previous one.")
        return text

    _polled_at = 0.0

    def _poll_tick(self) -> None:
        due = getattr(self.app, "poll_due", None)  # while the database pushes commits, a rare safety net
        if due is None or due(self._polled_at):
            self.poll()

    def poll(self) -> None:
        """Live tick: the reader checks the change marker, then reads only the changed rows."""
        self._polled_at = time.monotonic()
        tables = self.query(RunTable)
        if not tables:  # composing or being torn down (the app is exiting): nothing to poll
            return
        tables.first().poll()
        self.sync_bindings()
        self._draw_preview_line()  # the highlighted run's owner may have died since (running -> interrupted)

    @on(RunTable.Changed)
    def _table_changed(self) -> None:
        if not self.query(RunTable) or not self.query(SpendPanel):
            return
        self._show_state()
        self.query_one(SpendPanel).refresh_totals()
        self._draw_preview_line()
        previews = self.query(RunPreview)
        if previews:
            previews.first().refresh_run()

    def run_changed(self, run_id: str) -> None:
        """The app says one of its workers committed to ``run_id``."""
        self.poll()

    def select_run(self, run_id: str) -> None:
        self.table.select_run(run_id)

    # -- actions -----------------------------------------------------------

    @on(RunTable.Selected)
    def _open_selected(self, event: RunTable.Selected) -> None:
        self.app.open_transcript(event.run_id)

    @on(RunTable.Highlighted)
    def _highlighted(self, event: RunTable.Highlighted) -> None:
        self.sync_bindings()
        self._draw_preview_line()
        previews = self.query(RunPreview)
        if previews and previews.first().run_id != event.run_id:
            previews.first().show(event.run_id)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("resume", "resume_with_budget"):
            run = self.table.current if self.is_mounted and self.query(RunTable) else None
            return run is not None and not self.app.resume_blocker(run)  # left out of the footer otherwise
        if action == "cancel_run":  # in the footer only on a run it applies to
            return self.is_mounted and bool(self.query(RunTable)) and self.can_cancel()
        if action == "open":
            return True if self.is_mounted and self.query(RunTable) and self.table.current is not None else None
        return True

    def run_to_cancel(self):
        return self.table.current if self.is_mounted and self.query(RunTable) else None

    def on_key(self, event) -> None:
        self.explain_refused_resume(event, self.table.current if self.query(RunTable) else None)

    def action_open(self) -> None:
        if self.table.current is not None:
            self.app.open_transcript(self.table.current.id)

    def action_resume(self) -> None:
        if self.table.current is not None:
            self.app.resume_run(self.table.current.id, run=self.table.current)

    def action_resume_with_budget(self) -> None:
        if self.table.current is not None:
            self.app.resume_run(self.table.current.id, ask=True, run=self.table.current)

    def action_cycle_filter(self, step: int = 1) -> None:
        position = FILTERS.index(self.run_filter.status)
        self.apply_filter(status=FILTERS[(position + step) % len(FILTERS)])

    def apply_filter(self, *, status: str | None | object = ..., search: str | None | object = ...,
                     sort: str | None = None, ascending: bool | None = None) -> None:
        new_status = self.run_filter.status if status is ... else status
        new_search = self.run_filter.search if search is ... else (search or None)
        self.run_filter = RunFilter(new_status, new_search, sort=sort or self.run_filter.sort,  # type: ignore[arg-type]
                                    ascending=self.run_filter.ascending if ascending is None else ascending)
        self.app.remember(status_filter=self.run_filter.status, sort=self.run_filter.sort,
                          ascending=self.run_filter.ascending)
        keep = self.table.current.id if self.table.current else None
        self.table.reload(self.run_filter, keep=keep)
        self._show_state()

    def action_diff(self) -> None:
        """``d`` marks a run; ``d`` on another opens both side by side."""
        current = self.table.current
        if current is None:
            return
        marked = getattr(self, "diff_from", None)
        if marked is None or marked == current.id:
            self.diff_from = current.id
            self.app.notify(f"Run {current.id} marked: press d on another run to compare them.", title="Diff")
            return
        from .time_travel import DiffScreen

        self.diff_from = None
        self.app.push_screen(DiffScreen(marked, current.id))

    def action_workers(self) -> None:
        from .workers import WorkersScreen

        self.app.push_screen(WorkersScreen())

    def action_tasks(self) -> None:
        from .tasks import TasksScreen

        self.app.push_screen(TasksScreen())

    def action_search(self) -> None:
        from .search import SearchScreen  # every run, as you type; Escape comes back to this list as it was

        self.app.push_screen(SearchScreen())

    def action_clear_filters(self) -> None:
        self.apply_filter(status=None, search=None)
        self.table.focus()

    def action_remove(self) -> None:
        """``X``: remove the highlighted run (archived first if asked), by ``prune --archive``'s rules."""
        from ...views.titles import run_title
        from .remove import RemoveDialog, remove_in_worker, removal_blocker

        run = self.table.current
        if run is None:
            return
        blocker = removal_blocker(run)
        if blocker:
            self.app.notify(f"Run {printable(run.id)} cannot be removed: {blocker}.", severity="warning")
            return

        def chosen(answer) -> None:
            if answer:
                remove_in_worker(self.app, run.id, answer[1] if answer[0] == "archive" else None, self)

        self.app.push_screen(RemoveDialog(run, run_title(run)), chosen)

    @on(Removed)
    def _removed(self, message: Removed) -> None:
        if message.error:
            self.app.notify(f"Run {printable(message.run_id)} was not removed: {message.error}", severity="warning")
            return
        where = f"; archived in {printable(message.archive)}" if message.archive else ""
        self.app.notify(f"Run {printable(message.run_id)} removed{where}. Its tasks stay.", title="Removed")
        self.poll()

    def action_copy_id(self) -> None:
        if self.table.current is not None:
            copy_run(self.app, self.table.current.id)

    def action_copy_resume(self) -> None:
        if self.table.current is not None:
            copy_run(self.app, self.table.current.id, command=True)

    def action_cycle_sort(self) -> None:
        """``s``: the next order (started, cost, steps, status, agent), largest or newest first."""
        position = SORTS.index(self.run_filter.sort)
        self.apply_filter(sort=SORTS[(position + 1) % len(SORTS)], ascending=False)
        self.query_one(ColumnHeader).refresh()

    def sort_by(self, sort: str) -> None:
        """Sort by ``sort`` (a click on its column's title): largest or newest first, or reversed when it is the
        sort already shown."""
        if sort == self.run_filter.sort:
            self.action_reverse_sort()
            return
        self.apply_filter(sort=sort, ascending=False)
        self.query_one(ColumnHeader).refresh()

    def action_reverse_sort(self) -> None:
        """``S``: the same order the other way round."""
        self.apply_filter(ascending=not self.run_filter.ascending)
        self.query_one(ColumnHeader).refresh()

    def action_choose_columns(self) -> None:
        """``c``: a picker of the columns shown (the id and the title always are)."""
        from .columns import ColumnsDialog

        def chosen(hidden: frozenset | None) -> None:
            if hidden is None:
                return
            self.hidden_columns = frozenset(hidden)
            self.table.hidden = self.hidden_columns
            self.app.remember(hidden_columns=tuple(sorted(self.hidden_columns)))
            self.query_one(ColumnHeader).refresh()
            self.table.refresh()

        self.app.push_screen(ColumnsDialog(OPTIONAL, self.hidden_columns), chosen)
