"""The dashboard's run list, as frozen snapshots built off the UI thread.

The screens never call the store themselves: the reader thread
(``views.reader``) asks the model here, which runs the queries and returns
an immutable snapshot; a message carries it to the UI thread, which swaps it
in and redraws. A stalled or locked database therefore delays what is shown,
never a key press. Nothing here imports Textual.

``RunListModel`` serialises its operations with a lock and builds each
snapshot from the newest one, so a poll, a page load and a reload that
overlap (three workers) apply in order and none undoes another; every
snapshot carries a version, and the widget ignores one older than what it
shows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Mapping

from ..money.cost import RunCost, run_costs
from ..store import Store, effective_status
from ..store.models import Run
from .forks import arrange, has_forks
from .run_tree import read_rollups

PAGE = 200
# Stored status that each shown status comes from ("interrupted" is a running run with a dead owner).
STORED_STATUS = {"interrupted": "running"}
# Runs with these shown statuses are few, so a filter on them loads them all and filters in Python.
LIVENESS_FILTERS = ("running", "interrupted")
LIVENESS_LIMIT = 10_000
PINNED_LIMIT = 500
WAITING = "waiting"
# A row further than this many pages from the loaded ones is read where it is (a jump: End/G, a drag of
# the scrollbar), not paged to: paging to the end of a million runs read them all (20 s, 1.4 GB).
JUMP_PAGES = 3


# The run list's orders (``s`` cycles them): the newest first, as stored, or one read whole and sorted here.
SORTS = ("started", "cost", "steps", "status", "agent")
SORT_LIMIT = 2_000  # runs read for a sort other than "started": the newest this many (the header says so)
# A status sort puts what needs a person first, what is finished last.
STATUS_RANK = {status: i for i, status in enumerate(
    ("waiting", "running", "interrupted", "failed", "budget", "queued", "forked", "done"))}


@dataclass(frozen=True)
class RunFilter:
    status: str | None = None  # a shown status (formatting.STATUS_ORDER) or None for all
    search: str | None = None
    sort: str = "started"  # one of SORTS
    ascending: bool = False  # the sort's direction (started: oldest first)

    @property
    def sorted(self) -> bool:
        """Ordered other than by the stored keyset: read whole (the newest ``SORT_LIMIT``), sorted here."""
        return self.sort != "started" or self.ascending

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
            haystack = [run.user_msg, getattr(run, "final_text", None), run.error, getattr(run, "title", None)]
            if not run.id.startswith(self.search) and not any(needle in (h or "").casefold() for h in haystack):
                return False
        return True


def run_key(run: Run) -> tuple[str, str]:
    return (run.created_at, run.id)


@dataclass(frozen=True)
class RunWindow:
    """The loaded part of the run list: one run of consecutive rows, in order, and how many there are in all.

    The rows are list rows ``offset`` to ``offset + len(rows) - 1``: the newest ones (offset 0) until
    a jump (End/G) reads the end of the list, or the middle, from where it is; paging then extends the
    rows up or down from there by keyset.

    ``rows`` are read-only by agreement (Peewee rows, never written back).
    ``keep``: the run a reload asked to stay on (its new position is in
    ``positions``); ``changed``: whether this snapshot differs from the last.
    """

    version: int = 0
    filter: RunFilter = RunFilter()
    rows: tuple[Run, ...] = ()
    positions: Mapping[str, int] = field(default_factory=dict)
    costs: Mapping[str, RunCost] = field(default_factory=dict)
    total: int = 0
    exhausted: bool = False
    marker: tuple | None = None
    last_seen: str = ""
    keep: str | None = None
    reloaded: bool = False
    changed: bool = False
    waiting: int = 0  # runs waiting for a person's decision (the title bar's count)
    counts: Mapping[str, int] = field(default_factory=dict)  # runs per shown status, all runs (the header)
    pinned: int = 0  # the first ``pinned`` rows are the waiting runs, shown on top (offset 0 only)
    pinned_rows: tuple[Run, ...] = ()  # those runs, kept while the rows are elsewhere in the list
    cursor: tuple[str, str] | None = None  # the keyset position of the last page read
    offset: int = 0  # the list row of ``rows[0]``
    newest: tuple[str, str] | None = None  # the newest run's key seen since the last reload (new runs sort above)
    # What the list shows: ``rows`` with each fork moved under its parent (when both are loaded) and the
    # forks of folded runs left out; ``depth`` of each fork in its tree, ``forks`` per parent (loaded).
    shown: tuple[Run, ...] = ()
    shown_positions: Mapping[str, int] = field(default_factory=dict)
    shown_total: int = 0
    depth: Mapping[str, int] = field(default_factory=dict)
    forks: Mapping[str, int] = field(default_factory=dict)
    folded: frozenset = frozenset()
    capped: bool = False  # a sorted list of the newest SORT_LIMIT runs only
    # The roll-up (views.run_tree.Rollup) of each loaded run that has subagent runs under it: what a folded
    # parent shows (the tree's dollars, its worst status), read with the rows (children loaded or not).
    trees: Mapping[str, object] = field(default_factory=dict)

    def row(self, index: int) -> Run | None:
        index -= self.offset
        return self.shown[index] if 0 <= index < len(self.shown) else None


class RunListModel:
    """Builds ``RunWindow`` snapshots; every method runs on a worker thread and may raise ``StoreError``."""

    def __init__(self, store: Store, *, page: int = PAGE) -> None:
        self.store = store
        self.page = page
        self._lock = threading.Lock()
        self._window = RunWindow()
        self._folded: set[str] = set()  # runs whose forks are folded away
        self._counted: tuple | None = None  # (change marker, counts) of the last header counts

    @property
    def window(self) -> RunWindow:
        return self._window

    def _commit(self, window: RunWindow, *, same_rows: bool = False) -> RunWindow:
        """``window`` arranged and numbered; its trees rolled up again unless its rows are the last ones'."""
        trees = self._window.trees if same_rows else read_rollups(self.store, window.rows)
        self._window = replace(_arranged(window, frozenset(self._folded)), trees=trees,
                               version=self._window.version + 1)
        return self._window

    def fold(self, run_id: str) -> RunWindow:
        """Fold a run's forks away, or unfold them."""
        with self._lock:
            self._folded.symmetric_difference_update({run_id})
            return self._commit(replace(self._window, keep=run_id, reloaded=False, changed=True), same_rows=True)

    def reload(self, run_filter: RunFilter, keep: str | None = None, *, until: int = 0) -> RunWindow:
        """Start over from the newest run (on open, on a new filter), loading at least ``until`` rows."""
        with self._lock:
            store = self.store
            marker = store.change_marker()
            header = self._header_counts(marker)
            if run_filter.sorted:
                window = self._sorted(run_filter, marker)
            elif run_filter.status in LIVENESS_FILTERS:
                candidates = store.list_runs(limit=LIVENESS_LIMIT, status=run_filter.stored(),
                                             search=run_filter.search)
                rows = [run for run in candidates if run_filter.matches(run)]
                window = RunWindow(filter=run_filter, rows=tuple(rows), total=len(rows), exhausted=True,
                                   marker=marker, costs=self._costs(rows, {}))
            else:
                counts = header["counts"]
                if run_filter.search or run_filter.status == "done":  # done is derived in the counts: exact here
                    total = store.count_runs(status=run_filter.stored(), search=run_filter.search)
                else:  # the header's counts, read at this same marker: no second COUNT over the runs
                    total = counts.get(run_filter.status, 0) if run_filter.status else sum(counts.values())
                pinned = self._pinned(run_filter)
                window = self._loaded(RunWindow(filter=run_filter, total=total, marker=marker, rows=pinned,
                                                pinned=len(pinned), pinned_rows=pinned,
                                                costs=self._costs(list(pinned), {})),
                                      max(self.page - 1, until))
            window = replace(window, positions=_positions(window.rows), keep=keep, reloaded=True, changed=True,
                             newest=max((run_key(run) for run in window.rows), default=None),
                             last_seen=max((run.updated_at for run in window.rows), default=""),
                             **header)
            return self._commit(window)

    def _sorted(self, run_filter: RunFilter, marker: tuple) -> RunWindow:
        """The newest ``SORT_LIMIT`` runs that match, with their costs, in the order asked for.

        A cost is no column (it is summed from the steps' tokens at their rates), so no index can
        page through runs by it: a sorted list is read whole, as k9s sorts what it has loaded.
        """
        candidates = self.store.list_runs(limit=SORT_LIMIT, status=run_filter.stored(), search=run_filter.search)
        rows = [run for run in candidates if run_filter.matches(run)]
        costs = self._costs(rows, {})
        rows.sort(key=run_key, reverse=True)  # the newest first among equals, whichever the direction
        rows.sort(key=lambda run: sort_key(run, run_filter.sort, costs), reverse=not run_filter.ascending)
        return RunWindow(filter=run_filter, rows=tuple(rows), total=len(rows), exhausted=True, marker=marker,
                         costs=costs, capped=len(candidates) >= SORT_LIMIT)

    def load_until(self, index: int) -> RunWindow | None:
        """Make list row ``index`` loaded: page down or up to it, or jump there when it is far (None: it
        was loaded already)."""
        with self._lock:
            window = self._window
            start, end = window.offset, window.offset + len(window.rows)
            far = JUMP_PAGES * self.page
            if start <= index < end or (index >= end and window.exhausted):
                return None
            if index >= end:
                loaded = self._jumped(window, index) if index - end > far else self._loaded(window, index - start)
            else:
                loaded = self._jumped(window, index) if start - index > far else self._loaded_above(window, index)
            return self._commit(replace(loaded, positions=_positions(loaded.rows), keep=None, reloaded=False,
                                        changed=True))

    def _pinned(self, run_filter: RunFilter) -> tuple[Run, ...]:
        """Runs waiting for a person come first in the unfiltered list: few, and somebody has to act on them."""
        return () if run_filter.active else tuple(self.store.list_runs(limit=PINNED_LIMIT, status=[WAITING]))

    def _query(self, window: RunWindow) -> dict:
        """The filter of ``window`` as ``list_runs`` arguments; the pinned waiting runs are read on their own."""
        every_waiting_run_pinned = 0 < len(window.pinned_rows) < PINNED_LIMIT
        return dict(status=window.filter.stored(), search=window.filter.search,
                    not_status=[WAITING] if every_waiting_run_pinned else None)

    def _jumped(self, window: RunWindow, index: int) -> RunWindow:
        """One page read where row ``index`` is: the end backwards (keyset, no scan), else by OFFSET."""
        pinned = len(window.pinned_rows)
        if index >= window.total - self.page:
            rows = self.store.list_runs(limit=self.page, oldest_first=True, **self._query(window))[::-1]
            offset, exhausted = max(window.total - len(rows), pinned), True
        else:
            skip = max(index - pinned - self.page // 2, 0)
            rows = self.store.list_runs(limit=self.page, skip=skip, **self._query(window))
            offset, exhausted = pinned + skip, len(rows) < self.page
        if offset <= pinned:  # the jump landed at the top after all: the newest rows, pinned ones first
            on_top = self._pinned(window.filter)
            return self._loaded(replace(window, rows=on_top, pinned=len(on_top), pinned_rows=on_top, offset=0,
                                        cursor=None, exhausted=False, costs=self._costs(list(on_top), {})), index)
        return replace(window, rows=tuple(rows), offset=offset, pinned=0, exhausted=exhausted,
                       cursor=run_key(rows[-1]) if rows else None, costs=self._costs(rows, {}),
                       last_seen=max([window.last_seen] + [run.updated_at for run in rows]))

    def _loaded_above(self, window: RunWindow, index: int) -> RunWindow:
        """Pages read upwards (keyset on the first loaded row) until row ``index`` is loaded."""
        rows, offset, costs = list(window.rows), window.offset, dict(window.costs)
        pinned = len(window.pinned_rows)
        last_seen = window.last_seen
        while offset > max(index, pinned):
            want = max(self.page, offset - index)
            batch = self.store.list_runs(limit=want, after=run_key(rows[0]) if rows else None, **self._query(window))
            rows[:0] = batch[::-1]
            offset -= len(batch)
            costs = self._costs(batch, costs)
            last_seen = max([last_seen] + [run.updated_at for run in batch])
            if len(batch) < want:
                offset = pinned  # the newest run is loaded
        if offset <= pinned:  # back at the top: the waiting runs as they are now, pinned first
            on_top = self._pinned(window.filter)
            rows[:0] = on_top
            costs = self._costs(list(on_top), costs)
            return replace(window, rows=tuple(rows), offset=0, pinned=len(on_top), pinned_rows=on_top, costs=costs,
                           last_seen=last_seen)
        return replace(window, rows=tuple(rows), offset=offset, costs=costs, last_seen=last_seen)

    def _loaded(self, window: RunWindow, index: int) -> RunWindow:
        """Fetch pages (keyset on the last loaded row) until row ``index`` is loaded."""
        rows, costs, exhausted, total = list(window.rows), dict(window.costs), window.exhausted, window.total
        last_seen = window.last_seen
        pinned = {run.id for run in rows[:window.pinned]}
        cursor = window.cursor
        while not exhausted and len(rows) <= index:
            want = max(self.page, index + 1 - len(rows))
            batch = self.store.list_runs(limit=want, before=cursor, **self._query(window))
            if batch:
                cursor = run_key(batch[-1])
            kept = [run for run in batch if run.id not in pinned]  # shown at the top already
            rows.extend(kept)
            costs = self._costs(kept, costs)
            last_seen = max([last_seen] + [run.updated_at for run in batch])
            if len(batch) < want:
                exhausted, total = True, len(rows)
        return replace(window, rows=tuple(rows), costs=costs, exhausted=exhausted, total=total, last_seen=last_seen,
                       cursor=cursor)

    def poll(self, keep: str | None) -> RunWindow | None:
        """One live-update tick: what other connections committed since the last one (None: nothing)."""
        with self._lock:
            window = self._window
            marker = self.store.change_marker()
            if marker == window.marker:
                # Nothing committed; an owner may still have died (running -> interrupted in the header).
                header = self._header_counts(marker)
                return None if header["counts"] == dict(window.counts) else self._commit(replace(
                    window, keep=None, reloaded=False, changed=False, **header))  # liveness: trees again
            # A sorted list: a commit may move any row, so it is read again (the cursor stays on its run).
            if not window.filter.sorted:
                changed = self.store.runs_updated_since(_since(window.last_seen))
                if window.offset:
                    return self._commit(self._merged_below(window, changed, marker))
                pinned = {run.id for run in window.pinned_rows}
                rebuild = self._runs_were_removed(window, changed) or (
                    window.filter.active and any(run.id not in window.positions for run in changed)) or (
                    not window.filter.active and any((run.status == WAITING) != (run.id in pinned) for run in changed))
                if not rebuild:
                    return self._commit(self._merged(window, changed, marker))
        # Runs went (pruned) or a filtered list gained one: start over, as far down as was loaded.
        return self.reload(window.filter, keep, until=max(len(window.rows) - 1, 0))

    def _merged(self, window: RunWindow, changed: list[Run], marker: tuple) -> RunWindow:
        rows = list(window.rows)
        positions = dict(window.positions)
        last_seen = window.last_seen
        inserted = 0
        newest = window.newest
        for run in changed:
            last_seen = max(last_seen, run.updated_at)
            position = positions.get(run.id)
            if position is not None:
                rows[position] = run
                continue
            # Not loaded. Every run newer than the last loaded row is loaded, so one that sorts there
            # is new: slot it in. An older one is not loaded yet (paging will fetch it as it is now).
            key = run_key(run)
            if window.exhausted or window.cursor is None or key > window.cursor:
                slot = next((i for i in range(window.pinned, len(rows)) if run_key(rows[i]) < key), len(rows))
                rows.insert(slot, run)
                positions = _positions(rows)
                inserted += 1
                newest = max(newest, key) if newest else key
        total = window.total
        if inserted:
            total = len(rows) if window.exhausted else self.store.count_runs(
                status=window.filter.stored(), search=window.filter.search)
        return replace(window, rows=tuple(rows), positions=positions, newest=newest, costs=self._costs(changed, window.costs),
                       total=total, marker=marker, last_seen=last_seen, keep=None, reloaded=False,
                       changed=bool(changed), **self._header_counts(marker))

    def _merged_below(self, window: RunWindow, changed: list[Run], marker: tuple) -> RunWindow:
        """A live-update tick while the rows are further down the list (after End/G or a jump).

        Loaded runs are redrawn. The rest cannot be placed without reading the rows above, and need
        not be: the total is counted again and the rows keep their place from the end (End stays at
        the end, a run created since moves everything down by one); a middle window moves down by the
        runs newer than any it has seen. Going back to the top reads the top again.
        """
        rows = list(window.rows)
        positions = window.positions
        newest = window.newest
        arrived = 0
        for run in changed:
            if run.id in positions:
                rows[positions[run.id]] = run
            elif newest is None or run_key(run) > newest:
                arrived += window.filter.matches(run)
                newest = run_key(run)
        total = self.store.count_runs(status=window.filter.stored(), search=window.filter.search)
        offset = max(total - len(rows), 0) if window.exhausted else window.offset + arrived
        return replace(window, rows=tuple(rows), total=total, offset=offset, newest=newest, marker=marker,
                       last_seen=max([window.last_seen] + [run.updated_at for run in changed]), keep=None,
                       reloaded=False, changed=bool(changed), costs=self._costs(
                           [run for run in changed if run.id in positions], window.costs),
                       **self._header_counts(marker))

    def _runs_were_removed(self, window: RunWindow, changed: list[Run]) -> bool:
        """Did another process remove runs (``dayflow prune``)? A deleted row is not among the changed ones.

        Fewer runs than shown plus the new ones that are about to slot in
        means some went. One ``COUNT`` per poll that saw a commit (an index
        scan: a few milliseconds at 100,000 runs).
        """
        if window.filter.status in LIVENESS_FILTERS:
            return False  # running and interrupted runs are never removed
        last = window.cursor
        arriving = sum(1 for run in changed if run.id not in window.positions
                       and (window.exhausted or last is None or run_key(run) > last))
        count = self.store.count_runs(status=window.filter.stored(), search=window.filter.search)
        return count < window.total + arriving

    def _costs(self, runs: list[Run], known: Mapping[str, RunCost]) -> dict[str, RunCost]:
        """The dollars of these rows (one aggregate query over their steps), added to ``known``."""
        costs = dict(known)
        if runs:
            costs.update(run_costs(self.store, [run.id for run in runs]))
        return costs

    def _header_counts(self, marker: tuple) -> dict:
        """The runs per status and the waiting ones among them (as ``RunWindow`` fields), read again only
        when something was committed since: a new filter (a reload) changes what is listed, not how many
        runs there are. Which running runs are interrupted is decided again every time (an owner dies
        without a commit)."""
        if self._counted is None or self._counted[0] != marker or marker is None:
            stored = self.store.count_by_status()
            running = (tuple(self.store.list_runs(limit=LIVENESS_LIMIT, status=["running"]))
                       if stored.get("running") else ())
            self._counted = (marker, stored, running)
        counts = dict(self._counted[1])
        dead = sum(1 for run in self._counted[2] if effective_status(run) == "interrupted")
        if dead:
            counts["running"] -= dead
            counts["interrupted"] = dead
        counts = {status: n for status, n in counts.items() if n}
        return {"waiting": counts.get(WAITING, 0), "counts": counts}


def sort_key(run: Run, sort: str, costs: Mapping[str, RunCost]):
    """What ``sort`` orders by (descending unless asked otherwise); an unknown cost sorts as the least."""
    if sort == "cost":
        cost = costs.get(run.id)
        total = cost.total if cost is not None else None
        return (total is not None, total if total is not None else 0)
    if sort == "steps":
        return run.step_count or 0
    if sort == "status":  # descending puts rank 0 (waiting) first
        return -STATUS_RANK.get(effective_status(run), len(STATUS_RANK))
    if sort == "agent":  # descending by a negated key is alphabetical: brief, mailer, triage
        return tuple(-ord(c) for c in (getattr(run, "agent", None) or "brief").casefold())
    return run_key(run)


def _positions(rows, offset: int = 0) -> dict[str, int]:
    return {run.id: offset + i for i, run in enumerate(rows)}


def _since(last_seen: str) -> str:
    """A little before the newest ``updated_at`` seen: timestamps can tie (ms resolution, pinned clocks)."""
    if not last_seen:
        return ""
    try:
        moment = datetime.fromisoformat(last_seen.replace("Z", "+00:00")) - timedelta(seconds=1)
    except ValueError:
        return ""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _arranged(window: RunWindow, folded: frozenset) -> RunWindow:
    """``window`` with what it shows: forks under their parents (both loaded), folded forks left out.

    Only without a filter: a filtered list shows its matches as they are. The
    waiting runs pinned on top stay on top. The tree is ``views.forks``, the
    same one ``dayflow runs`` prints.
    """
    rows = window.rows
    if window.filter.active or window.filter.sorted or not has_forks(rows):
        return replace(window, shown=tuple(rows), shown_positions=_positions(rows, window.offset),
                       shown_total=window.total, depth={}, forks={}, folded=folded)
    tree = arrange(rows, pinned=window.pinned, folded=folded)
    return replace(window, shown=tree.rows, shown_positions=_positions(tree.rows, window.offset),
                   shown_total=max(window.total - tree.hidden, len(tree.rows)), depth=tree.depth, forks=tree.forks,
                   folded=folded)
