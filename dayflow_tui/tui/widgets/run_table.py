"""The run list: a line-API ``ScrollView`` over a keyset-paged window of runs.

Only the rows scrolled into view are fetched, a page at a time, and never on
the UI thread: the dashboard's reader thread (``views.reader.Reader``) runs the
read model's queries and posts ``WindowRead`` with a frozen snapshot, which
this widget swaps in. A row not loaded yet is drawn as a placeholder while its
page is read, so 100,000 runs open as fast as 10 and a stalled database
delays rows, not keys. Live updates (``poll``) redraw the rows the store
reports as changed; new runs slot in at their place, newest first.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...money.cost import NO_CALLS
from ...store.models import Run
from ...safe_text import one_line
from ...store import RunStatus, effective_status
from ...views.costs import cost_text
from ...views.reader import Reader
from ...views.titles import run_title
from ...views.run_list import PAGE, RunFilter, RunListModel, RunWindow
from .. import bindings, formatting

_KNOWN_STATUSES = frozenset(member.value for member in RunStatus)

# (title, width, right-aligned); the last column takes the rest of the line.
COLUMNS = (("id", 14, False), ("status", 13, False), ("started UTC", 11, False), ("steps", 5, True),
           ("tokens in/out", 17, True), ("cost", 8, True), ("model", 12, False), ("agent", 10, False),
           ("activity", 8, True), ("source", 7, False), ("title / error", 0, False))
# Columns a person may hide (``c``): all but the run's id and its title. Hidden unless chosen: agent
# (the title says "[agent]" for any but the brief).
OPTIONAL = tuple(title for title, width, _right in COLUMNS if width and title != "id")
HIDDEN_BY_DEFAULT = frozenset({"agent", "source"})  # source: an imported run's title says [claude-code] anyway
# The column each sort orders by (its title gets the arrow).
SORTED_COLUMN = {"started": "started UTC", "cost": "cost", "steps": "steps", "status": "status", "agent": "agent"}


# Columns given up first when the terminal is narrow, so the task or error (the last column) keeps room:
# at 80 columns a row shows id, status, steps, cost and the task.
DROP_ORDER = ("model", "activity", "started UTC", "tokens in/out", "agent", "source")  # agent: shown only when chosen
TASK_ROOM = 16


def task_room(width: int) -> int:
    """What the task column needs before the others are given up: a third of the line, at least ``TASK_ROOM``
    (the runs are told apart by their task; at 160 columns beside the preview it was left 16)."""
    return max(TASK_ROOM, width // 3)


def visible_columns(width: int, hidden: frozenset = HIDDEN_BY_DEFAULT) -> list[int]:
    """Indexes of the columns shown (not ``hidden``) that fit ``width`` with at least ``task_room(width)``
    left for the title."""
    shown = [i for i, (title, _w, _r) in enumerate(COLUMNS) if title not in hidden]
    for title in DROP_ORDER:
        fixed = sum(COLUMNS[i][1] + 1 for i in shown if COLUMNS[i][1])
        if width - fixed >= task_room(width):
            break
        shown = [i for i in shown if COLUMNS[i][0] != title]
    return shown


def title_width(width: int, hidden: frozenset = HIDDEN_BY_DEFAULT) -> int:
    """The room the title column has at ``width`` (a made title shares it between task and answer)."""
    fixed = sum(COLUMNS[i][1] + 1 for i in visible_columns(width, hidden) if COLUMNS[i][1])
    return max(width - fixed, 1)


def _cells(values: list[tuple[str, str]], width: int, hidden: frozenset = HIDDEN_BY_DEFAULT) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis", end="")
    used = 0
    shown = visible_columns(width, hidden)
    for (title, col_width, right), (value, style) in ((COLUMNS[i], values[i]) for i in shown):
        if col_width == 0:
            col_width = max(width - used - 1, 0)
        if used:
            line.append(" ")
            used += 1
        cell = value if len(value) <= col_width else value[: max(col_width - 1, 0)] + "…"
        cell = cell.rjust(col_width) if right else cell.ljust(col_width)
        line.append(cell, style)
        used += col_width
        if used >= width:
            break
    return line


def column_at(x: int, width: int, hidden: frozenset = HIDDEN_BY_DEFAULT) -> str | None:
    """The title of the column drawn at cell ``x`` of a line ``width`` wide (as ``_cells`` lays them out),
    or None on the space between two columns or past the end."""
    used = 0
    for i in visible_columns(width, hidden):
        title, col_width, _right = COLUMNS[i]
        if col_width == 0:
            col_width = max(width - used - 1, 0)
        if used:
            used += 1
        if used <= x < used + col_width:
            return title
        used += col_width
        if used >= width:
            break
    return None


def sort_at(x: int, width: int, hidden: frozenset = HIDDEN_BY_DEFAULT) -> str | None:
    """The sort (``SORTED_COLUMN``'s key) whose column is drawn at cell ``x``, or None if that column sorts nothing."""
    title = column_at(x, width, hidden)
    return next((sort for sort, column in SORTED_COLUMN.items() if column == title), None)


def header_text(width: int, hidden: frozenset = HIDDEN_BY_DEFAULT, sort: str = "started",
                ascending: bool = False) -> Text:
    """The column titles, the sorted one marked with its direction (▼ largest or newest first)."""
    arrow = "▲" if ascending else "▼"
    marked = SORTED_COLUMN.get(sort)

    def label(title: str, col_width: int) -> str:
        if title != marked:
            return title
        short = title.removesuffix(" UTC")
        return f"{short} {arrow}" if len(short) + 2 <= col_width else f"{arrow}{short[:col_width - 1]}"

    return _cells([(label(title, col_width), "bold" if title == marked else "") for title, col_width, _r in COLUMNS],
                  width, hidden)


class RunTable(ScrollView, can_focus=True):
    """Runs newest first, one line each; Enter opens the highlighted run."""

    COMPONENT_CLASSES = {
        "run-table--cursor",
        "run-table--cursor-blurred",
        "run-table--done",
        "run-table--running",
        "run-table--interrupted",
        "run-table--failed",
        "run-table--budget",
        "run-table--queued",
        "run-table--waiting",
        "run-table--forked",
        "run-table--cancelled",
        "run-table--dim",
    }
    BINDINGS = bindings.line_cursor(letters=True) + [
        Binding("enter", "select", "Open", key_display="⏎"),
        Binding("z", "fold", "Fold forks and subagent trees", show=False),
    ]

    cursor = reactive(0, always_update=True)

    class Highlighted(Message):
        def __init__(self, run_id: str | None) -> None:
            super().__init__()
            self.run_id = run_id

    class Selected(Message):
        def __init__(self, run_id: str) -> None:
            super().__init__()
            self.run_id = run_id

    class WindowRead(Message):
        """The reader's answer: a new snapshot (None: the poll found nothing new), or why it failed."""

        def __init__(self, window: RunWindow | None, error: BaseException | None = None) -> None:
            super().__init__()
            self.window = window
            self.error = error

    class Changed(Message):
        """What the table shows changed (rows, the total, or the filter it shows)."""

    def __init__(self, reader: Reader, *, page: int = PAGE, id: str | None = None) -> None:
        super().__init__(id=id)
        self.reader = reader
        self.model = RunListModel(reader.store, page=page)
        self.window = RunWindow()
        self.filter = RunFilter()  # the filter asked for; ``window.filter`` is the one shown
        self.loaded_once = False
        self._want_row = -1  # the furthest row a page read was asked for
        self.hidden: frozenset = HIDDEN_BY_DEFAULT  # the columns a person chose not to see (``c``)

    # -- data (read on the reader thread, applied here) ---------------------

    @property
    def rows(self) -> tuple[Run, ...]:
        return self.window.shown

    @property
    def total(self) -> int:
        return self.window.shown_total

    @property
    def costs(self):
        return self.window.costs

    def _read(self, key: str, job) -> None:
        def done(window, error) -> None:
            self.post_message(self.WindowRead(window, error))

        self.reader.submit(key, job, done)

    def reload(self, run_filter: RunFilter | None = None, keep: str | None = None) -> None:
        """Start over from the newest run (on open, on a new filter); ``keep`` re-selects a run id."""
        if run_filter is not None:
            self.filter = run_filter
        wanted = self.filter
        self._read("runs:reload", lambda: self.model.reload(wanted, keep))

    def poll(self) -> None:
        """One live-update tick, read off the UI thread (skipped while the last one is still out)."""
        if self.reader.pending("runs:poll") or self.reader.pending("runs:reload"):
            return
        keep = self.current.id if self.current else None
        self._read("runs:poll", lambda: self.model.poll(keep))

    def _page_in(self, index: int) -> None:
        """Ask for the page holding row ``index`` (drawn as a placeholder until it comes)."""
        if self.reader.pending("runs:page") or self.window.row(index) is not None:
            return
        if index < self.window.offset:  # above the loaded rows (after End/G): half a page more, upwards
            self._want_row = max(index - self.model.page // 2, 0)
        else:  # in the loaded rows' numbering: the forks folded away are loaded but not shown
            self._want_row = index + self.model.page // 2 + (self.window.total - self.window.shown_total)
        target = self._want_row
        self._read("runs:page", lambda: self.model.load_until(target))

    def on_run_table_window_read(self, message: WindowRead) -> None:
        message.stop()
        if message.error is not None:
            self.post_message(self.Changed())  # the screen reports the error through the app
            self.app.report_error(message.error)
            return
        self.app.connection_ok()
        window = message.window
        if window is None or window.version <= self.window.version:
            if not self.loaded_once:
                return
            self.refresh()  # liveness (a killed owner) and "activity" age change without a commit
            return
        keep = self.current.id if self.current else None
        at_top = self.scroll_offset.y == 0 and self.cursor == 0
        self.window = window
        self.loaded_once = True
        if window.reloaded:
            self._want_row = len(window.shown) - 1
        self._resize()
        if window.reloaded:
            position = window.shown_positions.get(window.keep, 0) if window.keep else 0
            self.cursor = min(position, max(window.shown_total - 1, 0))
        elif window.keep is not None and window.keep in window.shown_positions:  # a fold kept its run
            self.cursor = window.shown_positions[window.keep]
        elif keep is not None and keep in window.shown_positions and not at_top:
            self.cursor = window.shown_positions[keep]
        self.refresh()
        current = self.current
        self.post_message(self.Highlighted(current.id if current else None))
        self.post_message(self.Changed())

    def _resize(self) -> None:
        self.virtual_size = Size(self.size.width, self.total)

    def row(self, index: int) -> Run | None:
        """Row ``index`` if it is loaded (a page read is started when it is not)."""
        if index < 0 or index >= self.total:
            return None
        run = self.window.row(index)
        if run is None:
            self._page_in(index)
        return run

    @property
    def current(self) -> Run | None:
        return self.window.row(self.cursor) if self.total else None

    def select_run(self, run_id: str) -> None:
        if run_id in self.window.shown_positions:
            self.cursor = self.window.shown_positions[run_id]

    # -- rendering ---------------------------------------------------------

    def _row_text(self, run: Run, width: int) -> Text:
        status = effective_status(run)
        # Full styles, not partial: a theme colour such as $text-muted ("auto 60%") only means something
        # against the background it sits on (partial, it came out pure white on every theme).
        # A status Dayflow never wrote (a damaged row) is drawn plain, as text.
        known = status in _KNOWN_STATUSES
        status_style = self.get_component_rich_style(f"run-table--{status}" if known else "run-table--dim")
        dim = self.get_component_rich_style("run-table--dim")
        room = title_width(width, self.hidden)
        if run.error and run.status != "done":
            # Why it stopped matters more than what it was: the title gets a third of the room, the error the rest.
            note = f"{run_title(run, max(12, room // 3))} — {one_line(run.error, 120)}"
        else:
            note = run_title(run, room)
        agent = getattr(run, "agent", None)
        if getattr(run, "source", None) == "otel":  # a trace received by dayflow collect: its sender's agent
            note = f"[otel {one_line(agent or '?', 60)}] {note or ''}"
        elif agent and agent != "brief":
            note = f"[{agent}] {note or ''}"
        depth = self.window.depth.get(run.id, 0)
        source = getattr(run, "source", None) or "dayflow"
        # A subagent's run (its parent's call started it), or an imported session's subagent: nested, marked ↳.
        if getattr(run, "parent_id", None) and (source != "dayflow" or getattr(run, "parent_call_id", None)):
            note = f"↳ {run.parent_id} {note or ''}" if not depth else f"↳ {note or ''}"
        elif getattr(run, "parent_id", None):
            note = f"⑂ {run.parent_id}@{run.forked_at} {note or ''}" if not depth else f"⑂ @{run.forked_at} {note or ''}"
        forks = self.window.forks.get(run.id)
        tree = self.window.trees.get(run.id)  # views.run_tree.Rollup: it has subagent runs under it
        folded = run.id in self.window.folded
        indent = "  " * (depth - 1) + "└─ " if depth else ""
        if indent and tree is None:
            note = indent + (note or "")
            indent = ""  # (a tree's mark goes after its indent, below)
        shown_status, cost = status, cost_text(self.costs.get(run.id, NO_CALLS).total)  # as `dayflow runs` writes it
        if tree is not None and folded:
            # Folded, the row stands for its tree: the tree's dollars (Σ) and its worst status (a child that
            # failed or waits for a person shows at the parent); the run's own status is in the note.
            below = tree.runs - 1
            note = indent + f"▸ +{below} (z) · own {formatting.status_label(status)} · " + (note or "")
            shown_status, cost = tree.worst, "Σ" + cost_text(tree.total)
            known = shown_status in _KNOWN_STATUSES
            status_style = self.get_component_rich_style(f"run-table--{shown_status}" if known else "run-table--dim")
        elif tree is not None:
            below = tree.runs - 1
            worst = f"{formatting.status_label(tree.worst)} below · " if tree.differs else ""
            note = indent + f"▾ +{below} Σ{cost_text(tree.total)} · {worst}" + (note or "")
        elif forks:
            note = (f"▸ {forks} fork{'s' if forks != 1 else ''} folded (z) · " if folded
                    else f"▾ {forks} fork{'s' if forks != 1 else ''} · ") + (note or "")
        return _cells([
            (one_line(run.id, 40), ""),
            (formatting.status_label(shown_status), status_style),
            (formatting.started(run.created_at)[5:16], dim),
            (str(run.step_count), ""),
            (f"{formatting.tokens(run.input_tokens)}/{formatting.tokens(run.output_tokens)}", ""),
            (cost, ""),
            (one_line(run.model, 40), dim),
            (one_line(agent or "brief", 40), dim),
            (formatting.ago(run.updated_at), dim),
            ("claude" if source == "claude-code" else one_line(source, 40), dim),
            (one_line(note or "", 200), dim if run.status == "done" else status_style),
        ], width, self.hidden)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        run = self.row(index)
        if run is None:
            if index >= self.total:
                return Strip.blank(width, base)
            dim = self.get_component_rich_style("run-table--dim")
            placeholder = Text("  …", style=dim, no_wrap=True, end="")
            return Strip(list(placeholder.render(self.app.console))).extend_cell_length(width).apply_style(base)
        text = self._row_text(run, max(width, 1))
        if index == self.cursor:
            # Over the cells' own colours: a status colour on the cursor's blue was unreadable in most themes.
            cursor_style = "run-table--cursor" if self.has_focus else "run-table--cursor-blurred"
            text.stylize(self.get_component_rich_style(cursor_style))
            text.pad_right(max(width - text.cell_len, 0))
        strip = Strip(list(text.render(self.app.console))).crop_extend(scroll_x, scroll_x + width, None)
        return strip.apply_style(base)

    def on_resize(self, event: events.Resize) -> None:
        self._resize()

    # -- movement ------------------------------------------------------------

    def watch_cursor(self, old: int, new: int) -> None:
        self.refresh()
        if self.total:
            if new < self.scroll_offset.y:
                self.scroll_to(y=new, animate=False)
            elif new >= self.scroll_offset.y + self.scrollable_content_region.height:
                self.scroll_to(y=new - self.scrollable_content_region.height + 1, animate=False)
        current = self.current
        self.post_message(self.Highlighted(current.id if current else None))

    def _move_to(self, index: int) -> None:
        if self.total:
            self.cursor = max(0, min(index, self.total - 1))

    def action_cursor(self, delta: int) -> None:
        self._move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(self.scrollable_content_region.height - 1, 1))

    def action_edge(self, direction: int) -> None:
        self._move_to(0 if direction < 0 else self.total - 1)

    def action_fold(self) -> None:
        """Fold the highlighted run's forks and subagent runs away (or back): read on the reader thread like every
        change. A parent whose children are not loaded folds too: its row then stands for its tree."""
        current = self.current
        if current is not None and (current.id in self.window.forks or current.id in self.window.trees):
            run_id = current.id
            self._read("runs:fold", lambda: self.model.fold(run_id))

    def action_select(self) -> None:
        current = self.current
        if current is not None:
            self.post_message(self.Selected(current.id))

    def on_click(self, event: events.Click) -> None:
        index = self.scroll_offset.y + event.y
        if 0 <= index < self.total:
            if index == self.cursor and event.chain >= 2:
                self.action_select()
            self.cursor = index
