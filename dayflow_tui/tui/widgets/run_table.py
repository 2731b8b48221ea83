"""The run list: a line-API ``ScrollView`` over a keyset-paged window of runs.

Only the rows scrolled into view are fetched (``store.list_runs`` a page at a
time), so 100,000 runs open as fast as 10. Live updates redraw the rows the
store reports as changed (``store.runs_updated_since``); new runs slot in at
their place, newest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...costs import NO_CALLS, RunCost, run_costs
from ...pricing import format_usd
from ...store.models import Run
from ...safe_text import one_line
from ...store import Store, effective_status
from .. import formatting

PAGE = 200
# Stored status that each shown status comes from ("interrupted" is a running run with a dead owner).
STORED_STATUS = {"interrupted": "running"}
# Runs with these shown statuses are few, so a filter on them loads them all and filters in Python.
LIVENESS_FILTERS = ("running", "interrupted")
LIVENESS_LIMIT = 10_000

# (title, width, right-aligned); the last column takes the rest of the line.
COLUMNS = (("id", 14, False), ("status", 13, False), ("started UTC", 11, False), ("steps", 5, True),
           ("tokens in/out", 17, True), ("cost", 8, True), ("model", 12, False), ("activity", 8, True),
           ("task / error", 0, False))


def _cells(values: list[tuple[str, str]], width: int) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis", end="")
    used = 0
    for (title, col_width, right), (value, style) in zip(COLUMNS, values):
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


def header_text(width: int) -> Text:
    return _cells([(title, "") for title, _w, _r in COLUMNS], width)


@dataclass(frozen=True)
class RunFilter:
    status: str | None = None  # a shown status (formatting.STATUS_ORDER) or None for all
    search: str | None = None

    @property
    def active(self) -> bool:
        return bool(self.status or self.search)

    def stored(self) -> list[str] | None:
        return [STORED_STATUS.get(self.status, self.status)] if self.status else None

    def matches(self, run: Run) -> bool:
        if self.status and effective_status(run) != self.status:
            return False
        if self.search:
            needle = self.search.casefold()
            haystack = [run.user_msg, getattr(run, "final_text", None), run.error]
            if not run.id.startswith(self.search) and not any(needle in (h or "").casefold() for h in haystack):
                return False
        return True


def _key(run: Run) -> tuple[str, str]:
    return (run.created_at, run.id)


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
        "run-table--dim",
    }
    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "first", "First", show=False),
        Binding("end,G", "last", "Last", show=False),
        Binding("enter", "select", "Open", key_display="⏎"),
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

    def __init__(self, store: Store, *, page: int = PAGE, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self.page = page
        self.filter = RunFilter()
        self.rows: list[Run] = []
        self.costs: dict[str, RunCost] = {}  # by run id, read with the rows (costs.run_costs)
        self.total = 0
        self._positions: dict[str, int] = {}
        self._exhausted = False
        self._marker: tuple | None = None
        self._last_seen = ""

    # -- data --------------------------------------------------------------

    def reload(self, run_filter: RunFilter | None = None, keep: str | None = None) -> None:
        """Start over from the newest run (on open, on a new filter); ``keep`` re-selects a run id."""
        if run_filter is not None:
            self.filter = run_filter
        self._marker = self.store.change_marker()
        self.rows, self._positions, self._exhausted = [], {}, False
        if self.filter.status in LIVENESS_FILTERS:
            candidates = self.store.list_runs(limit=LIVENESS_LIMIT, status=self.filter.stored(),
                                              search=self.filter.search)
            self.rows = [run for run in candidates if self.filter.matches(run)]
            self.total, self._exhausted = len(self.rows), True
            self._read_costs(self.rows)
        else:
            self.total = self.store.count_runs(status=self.filter.stored(), search=self.filter.search)
            self._load_until(self.page - 1)
        self._reindex()
        self._last_seen = max((run.updated_at for run in self.rows), default="")
        position = self._positions.get(keep, 0) if keep else 0
        self._resize()
        self.cursor = min(position, max(self.total - 1, 0))
        self.refresh()

    def _load_until(self, index: int) -> None:
        """Fetch pages (keyset on the last loaded row) until row ``index`` is loaded."""
        while not self._exhausted and len(self.rows) <= index:
            want = max(self.page, index + 1 - len(self.rows))
            before = _key(self.rows[-1]) if self.rows else None
            batch = self.store.list_runs(limit=want, before=before, status=self.filter.stored(),
                                         search=self.filter.search)
            start = len(self.rows)
            self.rows.extend(batch)
            self._read_costs(batch)
            for offset, run in enumerate(batch):
                self._positions[run.id] = start + offset
                self._last_seen = max(self._last_seen, run.updated_at)
            if len(batch) < want:
                self._exhausted = True
                self.total = len(self.rows)

    def _read_costs(self, runs: list[Run]) -> None:
        """The dollars of these rows: one aggregate query over their steps."""
        if runs:
            self.costs.update(run_costs(self.store, [run.id for run in runs]))

    def _reindex(self) -> None:
        self._positions = {run.id: i for i, run in enumerate(self.rows)}

    def _resize(self) -> None:
        self.virtual_size = Size(self.size.width, self.total)

    def row(self, index: int) -> Run | None:
        if index < 0 or index >= self.total:
            return None
        self._load_until(index)
        return self.rows[index] if index < len(self.rows) else None

    @property
    def current(self) -> Run | None:
        return self.row(self.cursor)

    def select_run(self, run_id: str) -> None:
        if run_id in self._positions:
            self.cursor = self._positions[run_id]

    def poll(self) -> bool:
        """One live-update tick: apply what other connections committed. True when rows changed."""
        marker = self.store.change_marker()
        if marker == self._marker:
            self.refresh()  # liveness (a killed owner) and "activity" age change without a commit
            return False
        self._marker = marker
        changed = self.store.runs_updated_since(self._since())
        if self._runs_were_removed(changed):
            self.reload(keep=self.current.id if self.current else None)
            return True
        if self.filter.active and any(run.id not in self._positions for run in changed):
            self.reload(keep=self.current.id if self.current else None)
            return True
        keep = self.current.id if self.current else None
        inserted = 0
        self._read_costs(changed)
        for run in changed:
            self._last_seen = max(self._last_seen, run.updated_at)
            position = self._positions.get(run.id)
            if position is not None:
                self.rows[position] = run
                continue
            # Not loaded. Every run newer than the last loaded row is loaded, so one that sorts there
            # is new: slot it in. An older one is not loaded yet (paging will fetch it as it is now).
            key = _key(run)
            if self._exhausted or not self.rows or key > _key(self.rows[-1]):
                slot = next((i for i, row in enumerate(self.rows) if _key(row) < key), len(self.rows))
                self.rows.insert(slot, run)
                self._reindex()
                inserted += 1
        if inserted:
            self.total = len(self.rows) if self._exhausted else self.store.count_runs()
        if inserted or changed:
            at_top = self.scroll_offset.y == 0
            self._resize()
            if keep is not None and keep in self._positions:
                self.cursor = self._positions[keep] if not (at_top and self.cursor == 0) else 0
            self.refresh()
        return bool(changed)

    def _runs_were_removed(self, changed: list[Run]) -> bool:
        """Did another process remove runs (``dayflow prune``)? A deleted row is not among the changed ones.

        Fewer runs than shown plus the new ones that are about to slot in
        means some went. One ``COUNT`` per poll that saw a commit (an index
        scan: a few milliseconds at 100,000 runs).
        """
        if self.filter.status in LIVENESS_FILTERS:
            return False  # running and interrupted runs are never removed
        last = _key(self.rows[-1]) if self.rows else None
        arriving = sum(1 for run in changed if run.id not in self._positions
                       and (self._exhausted or last is None or _key(run) > last))
        return self.store.count_runs(status=self.filter.stored(), search=self.filter.search) < self.total + arriving

    def _since(self) -> str:
        """A little before the newest ``updated_at`` seen: timestamps can tie (ms resolution, pinned clocks)."""
        if not self._last_seen:
            return ""
        try:
            moment = datetime.fromisoformat(self._last_seen.replace("Z", "+00:00")) - timedelta(seconds=1)
        except ValueError:
            return ""
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    # -- rendering ---------------------------------------------------------

    def _row_text(self, run: Run, width: int) -> Text:
        status = effective_status(run)
        status_style = self.get_component_rich_style(f"run-table--{status}", partial=True)
        dim = self.get_component_rich_style("run-table--dim", partial=True)
        note = run.error if run.error and run.status != "done" else run.user_msg
        return _cells([
            (one_line(run.id, 40), ""),
            (formatting.status_label(status), status_style),
            (formatting.started(run.created_at)[5:16], dim),
            (str(run.step_count), ""),
            (f"{formatting.tokens(run.input_tokens)}/{formatting.tokens(run.output_tokens)}", ""),
            (format_usd(self.costs.get(run.id, NO_CALLS).total, unknown="unknown"), ""),
            (one_line(run.model, 40), dim),
            (formatting.ago(run.updated_at), dim),
            (one_line(note or "", 200), dim if run.status == "done" else status_style),
        ], width)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        run = self.row(index)
        if run is None:
            return Strip.blank(width, base)
        text = self._row_text(run, max(width, 1))
        strip = Strip(list(text.render(self.app.console))).crop_extend(scroll_x, scroll_x + width, None)
        if index == self.cursor:
            cursor_style = "run-table--cursor" if self.has_focus else "run-table--cursor-blurred"
            strip = strip.apply_style(self.get_component_rich_style(cursor_style, partial=True))
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

    def action_first(self) -> None:
        self._move_to(0)

    def action_last(self) -> None:
        self._move_to(self.total - 1)

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
