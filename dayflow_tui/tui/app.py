"""``dayflow-tui``: watch, inspect and resume runs.

The app owns the store and the one drive worker; screens ask it to open,
resume or start runs. The worker drives runs (``agent.runs``) on a thread and
reports through messages (``messages.py``); the agent knows nothing of this UI.
The drives are watched by the live trace export (``otel.live``, registered
here) when the ``otel_endpoint`` setting names a receiver.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from pathlib import Path
from decimal import Decimal
from typing import Any, Callable, Iterable

from textual import on, work
from textual.app import App, SystemCommand
from textual.color import Color, ColorParseError
from textual.worker import Worker, WorkerState, get_current_worker

from ..agent import runs
from ..config import settings
from ..config.settings import OFFLINE_MODEL
from ..otel.live import watch_drives
from ..store.models import Run
from ..redaction import redact, redacted_line
from ..money.cost import format_usd
from ..safe_text import one_line, printable
from ..store import Store, effective_status, holder, is_connection_error, is_imported, owner_alive
from . import bindings, ui_state
from .colours import STATUS_VARIABLES, readable
from .commands import DayflowCommands
from .cost_view import ResumeDialog, ResumePriced, needs_confirm
from .forming import FormingReply, ReplyPieces
from .messages import ChangesPushed, ReplyForming, RunFailed, RunFinished, RunStarted, StepCommitted
from ..views.reader import Reader
from .widgets.header import DayflowHeader, HeaderFacts
from .screens.time_travel import Forked
from .screens.help import HelpScreen
from .screens.run_list import RunListScreen
from .screens.search import SearchableTranscript
from .step_buffer import StepBuffer

STYLE_FILES = ("app.tcss", "run_list.tcss", "transcript.tcss", "help.tcss", "search.tcss", "cost.tcss", "tasks.tcss")
# The offline model's pace in the dashboard when DAYFLOW_OFFLINE_DELAY is unset: slow enough to watch.
WATCHABLE_DELAY_S = "0.7"

ClientFactory = Callable[[str], Any]
MUTED_SHARE = 0.75  # muted text: the foreground at this share over the background


def styles_dir() -> Path:
    """The .tcss folder: inside the installed package (wheel), else the checkout's top-level ``styles/``."""
    package = Path(__file__).resolve().parent.parent / "styles"
    if (package / STYLE_FILES[0]).is_file():
        return package
    return Path(__file__).resolve().parent.parent.parent / "styles"


def renewed_limits(run: Run) -> dict[str, int]:
    """A budget-stopped run resumes with another allowance the size of the one it used up.

    Without it ``r`` would stop the run again at once (the CLI asks with
    ``--budget``/``--max-steps``; the dashboard grants the same again).
    """
    limits: dict[str, int] = {}
    if run.status != "budget":
        return limits
    if run.step_count >= run.max_steps:
        limits["max_steps"] = run.step_count + run.max_steps
    spent = run.input_tokens + run.output_tokens
    if run.budget_tokens is not None and spent >= run.budget_tokens:
        limits["budget_tokens"] = spent + run.budget_tokens
    return limits


def renewed_budget_usd(run: Run, spent: Decimal | None) -> Decimal | None:
    """A run stopped by its dollar budget resumes with another allowance of the same size (None: no change)."""
    if run.status != "budget" or run.budget_usd is None or spent is None:
        return None
    if not (run.error or "").startswith("dollar budget"):
        return None
    return spent + run.budget_usd


FOLLOW_EVERY_S = 1.0  # --follow-claude-code: how often the session files are read again


# While the database pushes commits, a screen's poll of the change marker is a safety net this often.
LIVE_SAFETY_POLL_S = 5.0

class _NoFeed:
    """The change feed before the real one is made: never live, nothing to stop."""

    live = False

    def start(self) -> "_NoFeed":
        return self

    def stop(self) -> None:
        pass


_NO_FEED_YET = _NoFeed()


class DayflowApp(App):
    """The dashboard. ``client_factory(model)`` builds model clients (tests inject counting fakes)."""

    TITLE = "Dayflow"
    CSS_PATH = [styles_dir() / name for name in STYLE_FILES]
    BINDINGS = bindings.APP
    COMMANDS = App.COMMANDS | {DayflowCommands}
    # Screen classes the stylesheets use to fit small terminals (80x24 is the floor we design for).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]

    def __init__(self, store: Store, *, client_factory: ClientFactory | None = None,
                 follow_claude_code: Path | None = None) -> None:
        super().__init__()
        self.store = store
        # A directory of Claude Code sessions imported again every FOLLOW_EVERY_S on a thread (None: not followed).
        self.follow_claude_code = follow_claude_code
        self.follow_worker: Worker | None = None
        self.follow_said: set[str] = set()
        self.client_factory = client_factory
        self.driving: str | None = None  # the run our worker drives (None before its lease is taken)
        self.drive_worker: Worker | None = None
        store.retry_for = 0.5  # polls run on a timer: fail fast and try again next tick
        # Every read the screens show runs on this thread, never on the UI thread (views.reader).
        self.reader = Reader(store)
        self.sub_title = store.short_label
        self.waiting_runs = 0
        self.status_counts: dict[str, int] | None = None  # runs per shown status (None: not read yet)
        self.reconnecting = False
        self.pricing: str | None = None  # a run whose resume waits for its price (then maybe a confirm)
        self.resumed: dict[str, Any] = {}  # run id -> the RunResult of a resume driven here
        self.forming: dict[str, FormingReply] = {}  # run id -> its reply streaming in now (driven here)
        self._committed_n: dict[str, int] = {}  # run id -> its newest step committed while driven here
        self._resuming: set[str] = set()
        # Commits pushed by the database (PostgreSQL: LISTEN on the feed's own connection and thread); while it
        # is live the screens' poll timers only tick every LIVE_SAFETY_POLL_S, as a safety net.
        # Made on a thread at mount (``_open_change_feed``): the UI thread never calls the store, not even to build
        # the listener. Until then (and on SQLite) nothing pushes and the screens poll.
        self.change_feed: Any = _NO_FEED_YET
        self._push_queued = threading.Event()
        self._closing_feed = threading.Event()

    def _changes_pushed(self) -> None:
        """On the feed's thread: one ChangesPushed in the queue at a time (a burst of commits is one poll)."""
        if not self._push_queued.is_set():
            self._push_queued.set()
            self.post_message(ChangesPushed())

    @on(ChangesPushed)
    def _poll_pushed(self) -> None:
        self._push_queued.clear()
        poll = getattr(self.screen, "poll", None)
        if poll is not None:
            poll()

    def poll_due(self, last_poll: float) -> bool:
        """A screen's poll timer asks: every tick while nothing pushes (SQLite, a feed that is down), else only
        when the last poll is LIVE_SAFETY_POLL_S old."""
        return not self.change_feed.live or time.monotonic() - last_poll >= LIVE_SAFETY_POLL_S

    def on_mount(self) -> None:
        from ..config import settings

        self.ui_state, warning = ui_state.load()
        chosen = self.ui_state.theme or settings.current().theme
        if chosen and chosen in self.available_themes:
            self.theme = chosen
        elif chosen:
            warning = warning or f"theme {chosen!r} is not available here; using {self.theme}"
        if warning:
            self.notify(printable(warning), title="Dashboard state", severity="warning")
        self.theme_changed_signal.subscribe(self, self._theme_chosen)
        state = self.ui_state
        self.push_screen(RunListScreen(status=state.status_filter, sort=state.sort, ascending=state.ascending,
                                       hidden=state.hidden_columns))
        self.call_after_refresh(self.settle_heap)
        if self.change_feed is _NO_FEED_YET:
            self.run_worker(self._open_change_feed, thread=True, name="change-feed", group="change-feed",
                            exit_on_error=False)
        else:  # one given before the app ran (a test's, through a proxy): started as it is
            self.change_feed.start()
        self.set_interval(1.0, self._settle_if_asked)
        if self.follow_claude_code is not None:
            self._follow_tick()
            self.set_interval(FOLLOW_EVERY_S, self._follow_tick)

    def _follow_tick(self) -> None:
        """Import the followed Claude Code sessions again, unless the last import still runs."""
        if self.follow_worker is None or self.follow_worker.is_finished:
            self.follow_worker = self._follow_claude_code()

    @work(thread=True, exclusive=True, exit_on_error=False, group="follow-claude-code")
    def _follow_claude_code(self) -> None:
        """One import of the followed directory on this thread; the screens see the new steps through the
        database's change marker, as any other writer's. A problem is said once (a note, not an error)."""
        from ..claude_code.importer import import_claude_code

        lines: list[str] = []
        try:
            import_claude_code(self.store, self.follow_claude_code, say=lines.append)
        except Exception as exc:  # the database or the directory: said, and tried again next tick
            lines = [f"Following Claude Code sessions: {redacted_line(exc, 200)}"]
        finally:
            self.store.close_thread_connection()
        problems = [line for line in lines if " new step(s)  " not in line and line not in self.follow_said]
        if problems:
            self.follow_said.update(problems)
            self.call_from_thread(self.notify, printable(one_line(problems[0], 300))
                                  + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                                  title="Claude Code sessions", severity="warning")

    heap_to_settle = False
    # A closed long transcript, watched until the settle that frees it: Textual may still hold the screen for
    # a moment after unmount (its message pump's task), and a settle then would freeze it again, for good.
    _closed_screen: "weakref.ref[object] | None" = None
    _settle_tries = 0

    def settle_heap(self) -> None:
        """Collect the garbage now, then leave every live object out of later full collections.

        Python's full collection walks every tracked object: with start-up's ~110,000 and a 5,000-step
        transcript's views it held the UI thread ~100 ms, several times a minute while a live run's steps
        arrived (bench item 15). Called at moments a user already waits on (start-up, a long transcript
        opened, a transcript closed): the collection runs once there, and what was live is frozen. A
        frozen object is still freed when its last reference goes; one that dies in a cycle waits for the
        next settle, which unfreezes first, so nothing is kept for good.
        """
        self.heap_to_settle = False
        gc.unfreeze()
        gc.collect()
        gc.freeze()

    def settle_when_gone(self, screen: object) -> None:
        """Settle the heap once ``screen`` (a closed long transcript) is garbage, from the timer below."""
        self._closed_screen = weakref.ref(screen)
        self._settle_tries = 0
        self.heap_to_settle = True

    def _settle_if_asked(self) -> None:
        """A long transcript was closed: settle the heap from a timer (timers stop when the app shuts down).

        If the closed screen outlived the settle (still referenced while Textual finished closing it), it was
        frozen again: settle once more on the next tick, a few times at most.
        """
        if not self.heap_to_settle:
            return
        self.settle_heap()
        closed = self._closed_screen
        if closed is not None and closed() is not None and self._settle_tries < 10:
            self._settle_tries += 1
            self.heap_to_settle = True
        else:
            self._closed_screen = None

    def get_css_variables(self) -> dict[str, str]:
        """The theme's variables, with muted text that is muted and readable in every theme.

        Textual's ``$text-muted`` is "auto 60%": in solarized it reads brighter
        than the theme's own (low-contrast) foreground, and partial styles resolve
        it to white. The foreground at 75% over the background is below the
        foreground everywhere and at least 3:1 on every built-in theme
        (tests/tui/test_tui_themes.py measures it).
        """
        variables = super().get_css_variables()
        try:
            foreground, background = Color.parse(variables["foreground"]), Color.parse(variables["background"])
        except (KeyError, ColorParseError):
            return variables
        variables["text-muted"] = background.blend(foreground, MUTED_SHARE).hex
        for name in STATUS_VARIABLES:  # the status colours (the header's counts, the run list's status column)
            try:
                colour = Color.parse(variables[name])
            except (KeyError, ColorParseError):
                continue
            variables[name] = readable(colour, background, foreground).hex
        self.theme_variables = variables
        return variables

    @staticmethod
    def known_themes() -> set[str]:
        from textual.theme import BUILTIN_THEMES

        return set(BUILTIN_THEMES)

    def _theme_chosen(self, theme) -> None:
        self.remember(theme=theme.name)

    def notify(self, message: str, *, title: str = "", severity: str = "information", timeout: float | None = None,
               markup: bool = False) -> None:
        """A toast whose text is never markup unless a caller says so: the messages carry run ids, errors and
        names from the database, the model and the user, where ``[@click=app.quit]`` is only text."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)  # type: ignore[arg-type]
        # The toasts have their own strip (styles/app.tcss): once this one is in it, the screen makes room.
        self.set_timer(0.05, self._make_room_for_toasts)

    def _make_room_for_toasts(self) -> None:
        if self.screen_stack:  # (the app may be closing: no screen to lay out)
            self.screen.refresh(layout=True)

    def remember(self, **values) -> None:
        """Keep the theme or status filter for the next start (a failed save is said once, then ignored)."""
        state = ui_state.changed(self.ui_state, **values)
        if state == self.ui_state:
            return
        self.ui_state = state
        try:
            ui_state.save(state)
        except OSError as exc:
            if not getattr(self, "_state_unsaved", False):
                self._state_unsaved = True
                self.notify(f"Cannot remember the dashboard's theme, filter and columns: {printable(one_line(str(exc), 200))}",
                            severity="warning")

    def _open_change_feed(self) -> None:
        """On a thread: the database's change feed, started (PostgreSQL: LISTEN on a connection of its own)."""
        feed = self.store.change_feed(on_change=self._changes_pushed)
        feed.start()
        self.change_feed = feed
        if self._closing_feed.is_set():  # the app ended while it was being made
            feed.stop()

    def on_unmount(self) -> None:
        self._closing_feed.set()
        self.change_feed.stop()
        self.reader.close()

    # -- navigation --------------------------------------------------------

    def open_transcript(self, run_id: str, *, at_step: int | None = None) -> None:
        self.push_screen(SearchableTranscript(run_id, at_step=at_step))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen) -> Iterable[SystemCommand]:
        """Textual's palette commands, less "Keys" (``?`` Help lists every key) and with a screenshot that says
        where it went (Textual's saves to a downloads folder a server may not have, and fails silently)."""
        for command in super().get_system_commands(screen):
            if command.title == "Keys":
                continue
            if command.title == "Screenshot":
                command = SystemCommand("Screenshot", "Save an SVG of the screen in the current directory",
                                        self.action_save_screenshot)
            yield command

    def action_save_screenshot(self) -> None:
        from datetime import datetime

        name = f"dayflow_{datetime.now():%Y-%m-%dT%H_%M_%S_%f}.svg"
        try:
            path = Path.cwd() / name
            path.write_text(self.export_screenshot(), encoding="utf-8")
        except OSError as exc:
            self.notify(f"The screenshot could not be saved: {printable(one_line(str(exc), 200))}",
                        severity="error")
            return
        self.notify(f"Saved {printable(str(path))}", title="Screenshot")

    def report_error(self, exc: BaseException) -> None:
        if is_connection_error(exc):
            # One state while the database is unreachable, not a toast per poll; polls go on.
            if not self.reconnecting:
                self.reconnecting = True
                self._draw_sub_title()
            return
        self.notify(redacted_line(exc, 300), title="Error", severity="error")

    def connection_ok(self) -> None:
        """A poll reached the database: leave the reconnecting state (the poll has caught up)."""
        if self.reconnecting:
            self.reconnecting = False
            self._draw_sub_title()

    def show_waiting(self, count: int) -> None:
        """Runs waiting for a person's decision, counted in the title bar."""
        if count != self.waiting_runs:
            self.waiting_runs = count
            self._draw_sub_title()

    def show_counts(self, counts: dict[str, int]) -> None:
        """Runs per status, from the run list's last snapshot: the header's counts."""
        counts = dict(counts)
        if counts != self.status_counts:
            self.status_counts = counts
            self._refresh_headers()

    def header_facts(self) -> HeaderFacts:
        return HeaderFacts(self.store.short_label, self.store.dialect.title, self.status_counts or {},
                           self.status_counts is not None, self.reconnecting)

    def _refresh_headers(self) -> None:
        for screen in self.screen_stack:
            for header in screen.query(DayflowHeader):
                header.refresh()

    def _draw_sub_title(self) -> None:
        self._refresh_headers()
        label = self.store.short_label
        if self.reconnecting:
            label += " · reconnecting…"
        if self.waiting_runs:
            label += f" · ⏸ {self.waiting_runs} waiting"
        self.sub_title = label

    # -- driving runs --------------------------------------------------------

    def resume_blocker(self, run: Run) -> str | None:
        """Why ``run`` cannot be resumed from here, or None when it can."""
        if is_imported(run):
            if run.source == "otel":
                return "an OpenTelemetry trace received by dayflow collect: read-only here"
            return "an imported Claude Code session: read-only here"
        status = effective_status(run)
        if status == "waiting":
            return "it waits for a decision on a tool call (a approves, D denies)"
        if status == "done":
            return "done: nothing to resume"
        if status == "cancelled":
            return "cancelled: a fork (F in its transcript) goes on from its steps"
        if self.driving == run.id or (self.is_driving and self.driving is None):
            return "being driven here"
        if status == "running" and owner_alive(run):
            return f"held by {holder(run)}"
        if self.is_driving:
            return f"this dashboard is driving run {self.driving}"
        return None

    def offer_claude_resume(self, run: Run) -> None:
        """``r`` on an imported Claude Code session: nothing to pay here. The command that continues it, in its own
        directory, is put on the clipboard and named (a note, not an error)."""
        from ..views.runs import claude_resume_command

        if run.source == "otel":  # a trace received by dayflow collect: nothing here, or anywhere, goes on with it
            self.notify(f"Run {printable(run.id)} is an OpenTelemetry trace received by dayflow collect: read-only "
                        "here (nothing to pay); its agent runs in the program that sent it.",
                        title="Collected trace", timeout=8)
            return
        command = claude_resume_command(run)
        self.copy_to_clipboard(command)
        self.notify(f"Run {printable(run.id)} is an imported Claude Code session, read-only here (nothing to pay). "
                    f"Continue it with: {printable(one_line(command, 300))} (copied to the clipboard)",
                    title="Claude Code session", timeout=12)

    @property
    def is_driving(self) -> bool:
        return self.drive_worker is not None and not self.drive_worker.is_finished

    def resume_run(self, run_id: str, *, ask: bool = False, run: Run | None = None) -> None:
        """Resume ``run_id`` once its next call is priced: at once, or after a confirm step.

        The confirm step (``ResumeDialog``) comes when the next call likely costs
        more than the settings' ``resume_confirm_usd``, or when asked (``B``); it
        shows the price and sets the run's dollar budget. ``run``: the row the
        screen shows, checked at once; the worker reads it afresh with the price.
        """
        if run is not None and is_imported(run):
            self.offer_claude_resume(run)
            return
        blocker = self.resume_blocker(run) if run is not None else None
        if blocker is None and self.pricing is not None:
            blocker = f"the resume of run {self.pricing} is being priced"
        if blocker:
            self.notify(f"Run {run_id} cannot be resumed: {blocker}.", severity="warning")
            return
        self.pricing = run_id
        self._price_resume(run_id, ask)

    @work(thread=True, exclusive=True, exit_on_error=False, group="price-resume")
    def _price_resume(self, run_id: str, ask: bool) -> None:
        from ..views.costs import price_resume

        try:
            priced = price_resume(self.store, run_id)
            run, estimate, error = priced.run, priced.estimate, priced.error
        except Exception as exc:  # the run cannot be read: the line says why
            run, estimate, error = None, None, redacted_line(exc, 200)
        finally:
            self.store.close_thread_connection()
        self.post_message(ResumePriced(run_id, estimate, error, then_resume=True, ask=ask, run=run))

    @on(ResumePriced)
    def _resume_priced(self, message: ResumePriced) -> None:
        if not message.then_resume:
            return
        self.pricing = None
        run = message.run
        if run is None:
            self.notify(f"Run {message.run_id} cannot be resumed: {message.error}.", severity="error")
            return
        blocker = self.resume_blocker(run)
        if blocker:
            self.notify(f"Run {run.id} cannot be resumed: {blocker}.", severity="warning")
            return
        from ..config import settings

        threshold = settings.current().resume_confirm_usd
        if not (message.ask or needs_confirm(message.estimate, threshold)):
            self._start_resume(run, None)
            return
        likely = message.estimate.call.likely_cost if message.estimate is not None else None
        reason = ("Set the run's dollar budget, then resume." if message.ask else
                  f"The next call likely costs {format_usd(likely)}, above the "
                  f"{format_usd(threshold)} asked about in settings (resume_confirm_usd).")
        budget = message.estimate.budget_usd if message.estimate is not None else None

        def decided(answer: tuple[bool, Decimal | None] | None) -> None:
            if answer and answer[0]:
                blocked = self.resume_blocker(run)
                if blocked:
                    self.notify(f"Run {run.id} cannot be resumed: {blocked}.", severity="warning")
                    return
                self._start_resume(run, answer[1])

        self.push_screen(ResumeDialog(message.run_id, message.estimate, budget, reason=reason), decided)

    def _start_resume(self, run: Run, budget_usd: Decimal | None) -> None:
        limits = renewed_limits(run)
        if limits:
            granted = [f"{limits['max_steps'] - run.step_count} more steps" if "max_steps" in limits else "",
                       f"{run.budget_tokens:,} more tokens" if "budget_tokens" in limits else ""]
            self.notify(f"Run {run.id} continues with {' and '.join(g for g in granted if g)}.", title="Budget")
        self.driving = run.id
        self._resuming.add(run.id)
        self.drive_worker = self._drive(run.id, budget_usd)

    def action_new_run(self) -> None:
        if self.is_driving:
            self.notify(f"Already driving run {self.driving}; wait for it to finish.", severity="warning")
            return
        self.driving = None
        self.drive_worker = self._drive(None)

    @work(thread=True, exclusive=True, exit_on_error=False, group="drive", name="drive")
    def _drive(self, run_id: str | None, budget_usd: Decimal | None = None) -> None:
        """Drive a run on this thread; report through messages; never touch widgets."""
        watch_drives()  # its spans leave live when the otel_endpoint setting is set
        worker = get_current_worker()
        buffer = StepBuffer(self.post_message)
        pieces = ReplyPieces(lambda reply: self.post_message(ReplyForming(reply)))
        new = run_id is None
        started: list[str] = [run_id] if run_id else []

        def on_start(rid: str) -> None:
            started[:] = [rid]
            self.post_message(RunStarted(rid, new=new))

        client = None
        options: dict[str, Any] = dict(on_step=buffer.add, on_start=on_start, on_delta=pieces.add,
                                       should_stop=lambda: worker.is_cancelled)
        try:
            if new:
                model = runs.default_model()
                client = self.client_factory(model) if self.client_factory else _paced_client(model)
                result = runs.run_brief(self.store, model=model, client=client, **options)
            else:
                run = self.store.get_run(run_id)
                client = self.client_factory(run.model) if self.client_factory else _paced_client(run.model)
                if budget_usd is None:
                    from ..money.cost import run_cost

                    budget_usd = renewed_budget_usd(run, run_cost(self.store, run.id).total)
                    if budget_usd is not None:
                        self.call_from_thread(self.notify, f"Run {run.id} continues with another "
                                              f"{format_usd(run.budget_usd)}: budget {format_usd(budget_usd)}.",
                                              title="Budget")
                result = runs.resume(run.id, store=self.store, client=client, budget_usd=budget_usd,
                                     **renewed_limits(run), **options)
            buffer.flush()
            self.post_message(RunFinished(result))
        except Exception as exc:  # DayflowError (API, budget, busy) or a bug: either way the run stays resumable
            buffer.flush()
            self.post_message(RunFailed(started[0] if started else None, redact(str(exc))))
        finally:
            self.store.close_thread_connection()

    def _fan_out(self, run_id: str | None) -> None:
        for screen in self.screen_stack:
            hook = getattr(screen, "run_changed", None)
            if hook is not None and run_id is not None:
                hook(run_id)

    @on(Forked)
    def _forked(self, message: Forked) -> None:
        if message.error is not None or message.fork_id is None:
            self.notify(f"Run {message.parent_id} cannot be forked: {message.error}", severity="error")
            return
        self.notify(f"Run {message.fork_id} forked from {message.parent_id}; r resumes it.", title="Fork")
        self.open_transcript(message.fork_id)

    @on(RunStarted)
    def _run_started(self, message: RunStarted) -> None:
        self.driving = message.run_id
        self._fan_out(message.run_id)
        if message.new:
            self.notify(f"Started run {message.run_id}.", title="New run")
            if isinstance(self.screen, RunListScreen):
                self.screen.poll()
                self.screen.select_run(message.run_id)
                self.open_transcript(message.run_id)

    @on(ReplyForming)
    def _reply_forming(self, message: ReplyForming) -> None:
        if self.driving != message.run_id:
            return  # a late message of a drive that has ended
        if message.reply.n <= self._committed_n.get(message.run_id, 0):
            return  # a late piece of a step already committed (pieces are coalesced, so one can trail the commit)
        self.forming[message.run_id] = message.reply
        for screen in self.screen_stack:
            hook = getattr(screen, "reply_forming", None)
            if hook is not None:
                hook(message.run_id)

    @on(StepCommitted)
    def _step_committed(self, message: StepCommitted) -> None:
        if message.events:
            self._committed_n[message.run_id] = max(self._committed_n.get(message.run_id, 0),
                                                    *(e.n for e in message.events))
        forming = self.forming.get(message.run_id)
        if forming is not None and any(e.n >= forming.n for e in message.events):
            del self.forming[message.run_id]  # the committed step replaces what was drawn as it arrived
        self._fan_out(message.run_id)

    @on(RunFinished)
    def _run_finished(self, message: RunFinished) -> None:
        result = message.result
        self.driving = None
        self.forming.pop(result.run_id, None)
        saved = ""
        if result.run_id in self._resuming:
            self._resuming.discard(result.run_id)
            self.resumed[result.run_id] = result
            saved = f" This resume paid {format_usd(result.paid)}"
            if result.replayed_steps:
                saved += f"; the committed steps ({format_usd(result.replayed_cost)}) were not paid again"
            saved += "."
        if result.status == "done":
            self.notify(f"Run {result.run_id} is done after {result.steps} steps.{saved}", title="Done")
        elif result.status == "running":
            self.notify(f"Run {result.run_id} stopped between steps; resume it any time.", severity="warning")
        else:
            self.notify(f"Run {result.run_id} stopped ({result.status}): {printable(result.error or '')}",
                        severity="warning")
        self._fan_out(result.run_id)

    @on(RunFailed)
    def _run_failed(self, message: RunFailed) -> None:
        self.driving = None
        self.forming.pop(message.run_id, None)
        where = f"Run {message.run_id}" if message.run_id else "The run"
        self._resuming.discard(message.run_id)
        self.notify(f"{where} stopped: {printable(one_line(message.error, 300))}. It can be resumed.",
                    title="Run failed", severity="error", timeout=10)
        self._fan_out(message.run_id)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker outcomes land besides the messages: a crash the worker could not report."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.driving = None
            self.report_error(event.worker.error)
        if event.worker.is_finished:
            for screen in self.screen_stack:
                if isinstance(screen, bindings.SyncedBindings):
                    screen.sync_bindings()


def _paced_client(model: str) -> Any:
    """The offline model at the dashboard's pace (``offline_pace_s``, unless ``offline_delay_s`` is set), so its
    replies are seen arriving; None for a real model (the drive builds the SDK's client)."""
    if model != OFFLINE_MODEL:
        return None
    from ..agent.offline import OfflineClient

    current = settings.current()
    return OfflineClient(delay=current.offline_delay_s or current.offline_pace_s)
