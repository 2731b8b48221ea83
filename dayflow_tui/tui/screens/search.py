"""Search in the dashboard: every run as you type, then the transcript at the match.

``/`` on the run list opens ``SearchScreen``: it searches as you type
(debounced, on a thread worker; the UI thread never touches the database)
and replaces the list with one entry per run: its hit count and its best
snippet. Enter opens ``SearchableTranscript`` at the matching step with the
match highlighted; ``n``/``N`` go from match to match; Escape goes back to
the results, and again to the run list exactly where it was (the list
screen is underneath, untouched). Every transcript is a
``SearchableTranscript``: ``/`` there searches the run it shows.

Snippets and highlights are built from plain strings through
``safe_text.printable`` into ``Content``; nothing is parsed as markup.
"""

from __future__ import annotations

import time
import weakref
from typing import Callable

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Collapsible, Input, OptionList, Static
from textual.widgets.option_list import Option, OptionDoesNotExist
from textual.worker import get_current_worker

from ...redaction import redacted_line
from ...safe_text import one_line, printable
from ...config.errors import QueryError
from ...search.query import Query
from ...search.text import COLUMNS, highlight_spans
from ...store.search import Hit
from ...views.search import RunHits, search_typed
from .. import bindings, formatting
from ..widgets.fitting_footer import FittingFooter
from ..widgets.header import DayflowHeader
from .transcript import BRIEF, TranscriptScreen

# How many hits one search reads (grouped by run on screen); the status line says when there are more.
HIT_LIMIT = 500
# Matches of one run a transcript can step through.
RUN_MATCH_LIMIT = 2000
# Wait this long after the last key before searching: typing a word costs one search, not one per letter.
DEBOUNCE_S = 0.25
MATCH_STYLE = "bold $background on $warning"
# How long a shown step's widgets may take to mount before painting stops looking for more.
PAINT_WAIT_S = 5.0


def snippet_content(hit: Hit) -> Content:
    """The hit's snippet, printable, its matches styled."""
    parts: list[tuple[str, str] | str] = []
    for text, match in hit.snippet.segments:
        safe = printable(text)
        parts.append((safe, MATCH_STYLE) if match else safe)
    return Content.assemble(*parts)


def where_content(hit: Hit) -> Content:
    parts = ([f"step {hit.step}"] if hit.step else []) + [hit.label] + ([one_line(hit.tool, 32)] if hit.tool else [])
    return Content.styled(" · ".join(parts), "$text-muted")


def result_prompt(run: RunHits, more: bool) -> Content:
    count = len(run.hits)
    hits = f"{count}{'+' if more and count > 1 else ''} hit{'s' if count != 1 else ''}"
    status_style = f"bold {formatting.STATUS_STYLES.get(run.status, '')}"
    first = Content.assemble((printable(run.run_id), "bold"), "  ",
                             (formatting.status_label(run.status), status_style), "  ", (hits, ""), "  ",
                             where_content(run.best),
                             *((("  ·  ", "$text-muted"), (one_line(run.title, 80), "bold")) if run.title else ()))
    return Content.assemble(first, "\n    ", snippet_content(run.best))


def paint(content: Content, query: Query | None) -> Content:
    """``content`` with every match of ``query`` styled (the same words search matched)."""
    if query is None:
        return content
    for start, end in highlight_spans(content.plain, query.positive):
        content = content.stylize(MATCH_STYLE, start, end)
    return content


class SearchDone(Message):
    def __init__(self, generation: int, query: Query, runs: tuple[RunHits, ...], hits: int, more: bool,
                 note: str | None, by_id: int = 0) -> None:
        super().__init__()
        self.generation, self.query, self.runs, self.hits = generation, query, runs, hits
        self.more, self.note, self.by_id = more, note, by_id


class SearchFailed(Message):
    def __init__(self, generation: int, error: str) -> None:
        super().__init__()
        self.generation, self.error = generation, error


class MatchesFound(Message):
    def __init__(self, generation: int, query: Query, hits: tuple[Hit, ...], more: bool) -> None:
        super().__init__()
        self.generation, self.query, self.hits, self.more = generation, query, hits, more


class Debounced:
    """Calls ``action(generation, text)`` once typing pauses; a newer call makes older ones void."""

    def __init__(self, owner: Screen, action: Callable[[int, str], None]) -> None:
        self.owner = owner
        self.action = action
        self.generation = 0
        self._timer: Timer | None = None

    def __call__(self, text: str, delay: float | None = None) -> None:
        # The pause is read at call time, so a slow terminal (or a loaded test machine) can lengthen it.
        delay = DEBOUNCE_S if delay is None else delay
        self.generation += 1
        if self._timer is not None:
            self._timer.stop()
        generation = self.generation
        self._timer = self.owner.set_timer(delay, lambda: self.action(generation, text))

    def current(self, generation: int) -> bool:
        return generation == self.generation


def _search_worker_body(screen: Screen, generation: int, text: str, *, run_id: str | None, limit: int) -> None:
    """Search (``views.search``) and post the answer (on a worker thread: no widget is touched here)."""
    store = screen.app.store
    worker = get_current_worker()
    try:
        found = search_typed(store, text, limit=limit, run_id=run_id)
        if worker.is_cancelled:
            return
        if run_id is None:
            screen.post_message(SearchDone(generation, found.query, found.runs, len(found.hits), found.more,
                                           found.note, found.by_id))
        else:
            screen.post_message(MatchesFound(generation, found.query, found.hits, found.more))
    except QueryError as exc:
        screen.post_message(SearchFailed(generation, str(exc)))
    except Exception as exc:  # a database error (or a bug): one line, the screen stays usable
        screen.post_message(SearchFailed(generation, redacted_line(exc, 300)))
    finally:
        store.close_thread_connection()


class SearchScreen(Screen):
    """Every run, searched as you type; one entry per run with its hit count and best snippet."""

    BINDINGS = bindings.SEARCH

    def __init__(self, text: str = "") -> None:
        super().__init__(id="search-screen")
        self.initial = text
        self.results: tuple[RunHits, ...] = ()
        self.search_query: Query | None = None
        self.searching = Debounced(self, self._start)

    def compose(self) -> ComposeResult:
        yield DayflowHeader()
        with Horizontal(id="search-bar"):
            yield Static(Content.styled("Search", "bold"), id="search-label")
            yield Input(placeholder='words, "a phrase", -word, prefix*, status: tool: run: in:result|args|text|'
                        "final|error|task", id="search-query")
        yield Static(id="search-status")
        yield OptionList(id="search-results")
        yield FittingFooter()

    def on_mount(self) -> None:
        field = self.query_one("#search-query", Input)
        field.value = self.initial
        field.focus()
        self._status(Content.styled("Type to search every run: the task, the model's text, tool calls, "
                                    "tool results, final texts and errors.", "$text-muted"))

    # -- searching -------------------------------------------------------------

    @on(Input.Changed, "#search-query")
    def _typed(self, event: Input.Changed) -> None:
        self.searching(event.value)

    def _start(self, generation: int, text: str) -> None:
        if not self.searching.current(generation) or not self.is_mounted:
            return
        if not text.strip():
            self._show((), None)
            self._status(Content.styled("Type to search every run.", "$text-muted"))
            return
        self._status(Content.styled("searching…", "$text-muted"))
        self._search(generation, text)

    @work(thread=True, exclusive=True, exit_on_error=False, group="search")
    def _search(self, generation: int, text: str) -> None:
        _search_worker_body(self, generation, text, run_id=None, limit=HIT_LIMIT)

    @on(SearchDone)
    def _done(self, message: SearchDone) -> None:
        if not self.searching.current(message.generation):
            return
        self.search_query = message.query
        self._show(message.runs, message.query, more=message.more)
        runs = len(message.runs) - message.by_id
        hits = f"{message.hits:,}{'+' if message.more else ''} hit{'s' if message.hits != 1 else ''}"
        line = f"{hits} in {runs:,} run{'s' if runs != 1 else ''}, newest first" if message.hits else "No matches"
        if message.by_id:
            line += f" · {message.by_id} run{'s' if message.by_id != 1 else ''} by id, listed first"
        elif not message.hits and message.query.listing:  # status:S alone: the runs in that status
            line = f"No {' or '.join(s.value for s in message.query.statuses)} runs."
        elif not message.hits:
            # What was looked for, and what widens it (an empty list alone says nothing).
            line = (f"No matches for {printable(one_line(message.query.source.strip(), 60))!r}: try fewer words, "
                    "a prefix with *, or drop a status:/tool:/in: filter. Esc goes back.")
        if message.more:
            line += f" · showing the newest {HIT_LIMIT:,} hits: narrow the query to see older ones"
        if message.note:
            line += f" · {printable(message.note)}"
        self._status(Content(line))

    @on(SearchFailed)
    def _failed(self, message: SearchFailed) -> None:
        if self.searching.current(message.generation):
            self._status(Content.styled(printable(one_line(message.error, 300)), "$text-error"))

    def _status(self, content: Content) -> None:
        self.query_one("#search-status", Static).update(content)

    def _show(self, runs: tuple[RunHits, ...], query: Query | None, *, more: bool = False) -> None:
        results = self.query_one("#search-results", OptionList)
        kept = self._highlighted_run()
        self.results = runs
        with self.app.batch_update():
            results.clear_options()
            results.add_options([Option(result_prompt(run, more and i == len(runs) - 1), id=f"hit-{i}")
                                 for i, run in enumerate(runs)])
            if runs:
                ids = [run.run_id for run in runs]
                results.highlighted = ids.index(kept) if kept in ids else 0

    def _highlighted_run(self) -> str | None:
        index = self.query_one("#search-results", OptionList).highlighted
        return self.results[index].run_id if index is not None and index < len(self.results) else None

    def run_changed(self, run_id: str) -> None:
        """A run driven here committed: search again, the results may have moved."""
        text = self.query_one("#search-query", Input).value
        if text.strip():
            self.searching(text, delay=1.0)

    # -- actions -------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        results = self.query_one("#search-results", OptionList)
        if results.option_count:
            current = results.highlighted if results.highlighted is not None else -1
            results.highlighted = max(0, min(current + delta, results.option_count - 1))

    def action_close(self) -> None:
        self.dismiss()

    @on(Input.Submitted, "#search-query")
    def _submitted(self) -> None:
        self._open(self.query_one("#search-results", OptionList).highlighted)

    @on(OptionList.OptionSelected, "#search-results")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self._open(event.option_index)

    def _open(self, index: int | None) -> None:
        if index is None or index >= len(self.results):
            return
        run = self.results[index]
        self.app.push_screen(SearchableTranscript(run.run_id, search_query=self.search_query, at=run.best,
                                                  from_search=True))


class SearchableTranscript(TranscriptScreen):
    """A transcript that can show the matches of a search: highlighted, and ``n``/``N`` between them."""

    BINDINGS = bindings.TRANSCRIPT_SEARCH
    DYNAMIC_ACTIONS = TranscriptScreen.DYNAMIC_ACTIONS + ("next_match",)

    def __init__(self, run_id: str, *, search_query: Query | None = None, at: Hit | None = None,
                 from_search: bool = False, at_step: int | None = None) -> None:
        super().__init__(run_id, at_step=at_step)
        self.search_query = search_query
        self.from_search = from_search  # opened from the search screen: Escape goes back there
        self.matches: tuple[Hit, ...] = ()
        self.match_index: int | None = None
        self._wanted = at  # the hit to show once the matches are known
        self._pending_match: int | None = None  # a match found before the run was read
        self._painted: weakref.WeakSet[Static] = weakref.WeakSet()  # texts of the shown step already painted
        self._scroll_to: tuple[int, weakref.ref] | None = None  # the painted text holding the most words
        self._painting = 0  # which build of the step the painting belongs to
        self.finding = Debounced(self, self._start_find)

    def on_mount(self) -> None:
        # TranscriptScreen.on_mount (run after this one) loads the run; the search widgets join it here.
        body = self.query_one("#body")
        self.mount(Static(id="match-bar"), before=body)
        self.mount(Input(placeholder="search this run", id="find-in-run"), after=body)
        self.query_one("#match-bar", Static).display = False
        self.query_one("#find-in-run", Input).display = False
        if self.search_query is not None:
            self.finding.generation += 1
            self._find(self.finding.generation, self.search_query.source)

    # -- finding -------------------------------------------------------------

    def _start_find(self, generation: int, text: str) -> None:
        if not self.finding.current(generation) or not self.is_mounted:
            return
        if not text.strip():
            self._set_matches(None, ())
            return
        self._find(generation, text)

    @work(thread=True, exclusive=True, exit_on_error=False, group="find")
    def _find(self, generation: int, text: str) -> None:
        _search_worker_body(self, generation, text, run_id=self.run_id, limit=RUN_MATCH_LIMIT)

    @on(MatchesFound)
    def _found(self, message: MatchesFound) -> None:
        if not self.finding.current(message.generation):
            return
        order = {column: i for i, column in enumerate(COLUMNS)}
        hits = tuple(sorted(message.hits, key=lambda hit: (hit.step, order[hit.column], hit.doc_id)))
        self._set_matches(message.query, hits)

    @on(SearchFailed)
    def _find_failed(self, message: SearchFailed) -> None:
        if self.finding.current(message.generation):
            self._bar(Content.styled(printable(one_line(message.error, 300)), "$text-error"))

    @on(Input.Changed, "#find-in-run")
    def _typed(self, event: Input.Changed) -> None:
        self.finding(event.value)

    @on(Input.Submitted, "#find-in-run")
    def _submitted(self) -> None:
        self.query_one("#find-in-run", Input).display = False
        self.query_one("#steps", OptionList).focus()

    def _set_matches(self, query: Query | None, hits: tuple[Hit, ...]) -> None:
        self.search_query = query
        self.matches = hits
        self._detail_shown = None  # repaint the step with the new words
        wanted, self._wanted = self._wanted, None
        if not hits:
            self.match_index = None
            self._show_selected()
            if query is None:
                self.query_one("#match-bar", Static).display = False
            else:
                self._bar(Content.styled(f"No matches in this run for {printable(one_line(query.source, 80))}.",
                                         "$text-muted"))
        else:
            self._go_to_match(self._index_of(wanted, hits))
        self.refresh_bindings()

    def _index_of(self, wanted: Hit | None, hits: tuple[Hit, ...]) -> int:
        """The match to start at: the hit picked on the search screen, else the first at or after the cursor."""
        if wanted is not None:
            for i, hit in enumerate(hits):
                if (hit.step, hit.column, hit.tool, hit.doc_id) == (wanted.step, wanted.column, wanted.tool,
                                                                    wanted.doc_id):
                    return i
        current = self._selected()
        if current is None or wanted is not None:
            return 0
        step = self.views[current].n if current < len(self.views) else 1 << 30
        return next((i for i, hit in enumerate(hits) if hit.step >= step), 0)

    # -- showing -------------------------------------------------------------

    def _go_to_match(self, index: int) -> None:
        self.match_index = index % len(self.matches)
        hit = self.matches[self.match_index]
        steps = self.query_one("#steps", OptionList)
        if self.run is None:
            self._pending_match = self.match_index  # the run is still being read: go there once it is shown
            return
        self._pending_match = None
        target: int | None = None
        if hit.step:
            try:
                target = steps.get_option_index(f"step-{hit.step}")
            except OptionDoesNotExist:
                target = None
        if target is None and hit.column in ("final", "error"):
            try:
                target = steps.get_option_index(BRIEF)
            except OptionDoesNotExist:
                target = None
        if target is None and steps.option_count:
            target = 0  # the task: shown above the first step
        self._detail_shown = None
        if target is not None and steps.highlighted != target:
            steps.highlighted = target  # redraws the step (and paints it)
        else:
            self._show_selected()
        self._bar(Content.assemble(
            (f"match {self.match_index + 1} of {len(self.matches)}", "bold"), "  ", where_content(hit), "  ",
            snippet_content(hit), ("  (n / N)", "$text-muted")))

    def _bar(self, content: Content) -> None:
        bar = self.query_one("#match-bar", Static)
        bar.update(content)
        bar.display = True

    def _show_selected(self) -> None:
        before = self._detail_shown
        try:
            leaving = list(self.query_one("#detail").walk_children())
        except NoMatches:
            leaving = []
        super()._show_selected()
        if before is None or self._detail_shown != before:  # the step was built afresh: paint it afresh
            self._painting += 1
            # The widgets of the step shown before are removed after this returns: never paint them.
            self._painted = weakref.WeakSet(leaving)
            self._scroll_to = None
        self._paint_detail(self._painting)

    def _redraw(self, *, steps_changed: bool) -> None:
        super()._redraw(steps_changed=steps_changed)
        if self._pending_match is not None and self.matches:
            self._go_to_match(self._pending_match)
        task = self.query_one("#task", Static)
        if isinstance(task.content, Content):
            task.update(paint(task.content, self.search_query))

    def _paint_detail(self, painting: int, deadline: float | None = None) -> None:
        """Highlight the matches in every text of the step on show, unfold a payload that holds one, and
        scroll to the text that holds the most of the query.

        The step's widgets compose their own parts as they mount, after the
        step was shown: this looks again every few milliseconds until all are
        in (for a few seconds at most: a busy machine mounts slowly).
        """
        deadline = time.monotonic() + PAINT_WAIT_S if deadline is None else deadline
        if painting != self._painting or self.search_query is None or not self.search_query.positive:
            return  # a newer step is on show, or nothing to paint
        try:
            detail = self.query_one("#detail")
        except NoMatches:
            return
        for static in detail.query(Static):
            if static in self._painted:
                continue
            self._painted.add(static)
            content = static.content
            if not isinstance(content, Content):
                continue
            painted = paint(content, self.search_query)
            if painted is content:
                continue
            static.update(painted)
            held = sum(1 for term in self.search_query.positive if highlight_spans(content.plain, (term,)))
            if self._scroll_to is None or held > self._scroll_to[0]:
                self._scroll_to = (held, weakref.ref(static))
            for ancestor in static.ancestors:
                if isinstance(ancestor, Collapsible):
                    ancestor.collapsed = False
        if not all(widget.is_mounted for widget in detail.walk_children()) and time.monotonic() < deadline:
            self.set_timer(0.02, lambda: self._paint_detail(painting, deadline))
        elif self._scroll_to is not None:
            # After the next refresh has laid out the payloads just unfolded.
            self.call_after_refresh(self.call_after_refresh, self._scroll_to_best, painting)

    def _scroll_to_best(self, painting: int) -> None:
        target = self._scroll_to[1]() if self._scroll_to is not None else None
        if painting == self._painting and target is not None and target.is_attached:
            self.query_one("#detail").scroll_to_widget(target, animate=False, top=True)

    # -- actions -------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("next_match", "prev_match"):
            # Without matches ``n`` is the app's "new run" again.
            return True if self.matches else False
        return super().check_action(action, parameters)

    def action_next_match(self) -> None:
        if self.matches:
            self._go_to_match((self.match_index if self.match_index is not None else -1) + 1)

    def action_prev_match(self) -> None:
        if self.matches:
            self._go_to_match((self.match_index if self.match_index is not None else 0) - 1)

    def action_find(self) -> None:
        field = self.query_one("#find-in-run", Input)
        field.display = True
        if self.search_query is not None and not field.value:
            field.value = self.search_query.source
        field.focus()

    def action_back(self) -> None:
        field = self.query_one("#find-in-run", Input)
        if field.display:
            field.display = False
            self.query_one("#steps", OptionList).focus()
            return
        if self.search_query is not None and not self.from_search:
            field.value = ""
            self.finding.generation += 1
            self._set_matches(None, ())
            return
        super().action_back()
