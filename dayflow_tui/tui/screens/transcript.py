"""A run step by step: a list of steps on the left, the selected one in full on the right.

Opening a run builds the cheap step index (one line per step) and renders
one step, so a 500-step run opens as fast as a 3-step one. New steps (from
our worker or another process) are appended as they commit.
"""

from __future__ import annotations

import time

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, OptionList, Sparkline, Static
from textual.widgets.option_list import Option

from ...agent.transcript import StepView
from ...config.errors import DayflowError
from ...money.cost import Cost, budget_text, format_usd
from ...safe_text import printable
from ...store import effective_status, is_connection_error
from ...store.models import Run
from ...views.costs import cost_text
from ...views.titles import is_given, run_title
from ...views.transcript import TranscriptRead, read_transcript
from .. import bindings, formatting
from ..clipboard import copy_run
from ..cost_view import ResumePriced
from ..widgets.json_view import JsonView
from ..widgets.pending_calls import PendingCalls
from ..widgets.step_detail import StepDetail
from ..widgets.step_list import StepList, step_prompt
from ..widgets.fitting_footer import FittingFooter
from ..widgets.header import DayflowHeader
from .cancel import CancelsRuns
from .time_travel import ForkDialog, fork_in_worker
from .transcript_decisions import DecidesWaitingCalls
from .transcript_panes import StepPanes
from .transcript_resume import ResumeControls

POLL_EVERY_S = 0.5


class TranscriptLoaded(Message):
    def __init__(self, key: str, read: TranscriptRead | None, error: BaseException | None) -> None:
        super().__init__()
        self.key = key
        self.read = read
        self.error = error


BRIEF = "brief"
# A transcript this long settles the heap once it is read (see DayflowApp.settle_heap), and again when closed.
LONG_RUN_STEPS = 500
MODES = ("detail", "raw", "request")


class TranscriptScreen(bindings.SyncedBindings, ResumeControls, StepPanes, DecidesWaitingCalls, CancelsRuns, Screen):
    BINDINGS = bindings.TRANSCRIPT
    # On a narrow terminal these keys leave the footer first (after the everywhere-keys): on a waiting
    # run, a A d E are what the reader came for (j still moves between steps).
    FOOTER_LEAVE_OUT = ("next_request", "raw", "expand", "step(1)")
    DYNAMIC_ACTIONS = ("resume", "resume_with_budget", "approve", "approve_all", "deny", "edit_call", "cancel_run",
                       "open_subagent")

    def __init__(self, run_id: str, *, at_step: int | None = None) -> None:
        super().__init__(classes="transcript")
        self.run_id = run_id
        self.open_at_step = at_step  # the step to show first (a task's creating step), once read
        self.run: Run | None = None
        # (n, has its tool results) per step read: what the next read goes on from. Not the rows: on a
        # 5,000-step run their ~20,000 objects made every full garbage collection ~20 ms longer.
        self.steps: tuple[tuple[int, bool], ...] = ()
        self.views: list[StepView] = []
        self.mode = "detail"
        self.payloads_open = False
        self._marker: tuple | None = None
        self._shown: tuple | None = None
        self._detail_shown: tuple | None = None
        self.chart_dollars = False  # the sparkline: tokens per step, or dollars per step ($)
        self._listed: tuple | None = None  # (views listed, in dollars, with an end entry): what the step list shows
        self.priced: ResumePriced | None = None  # the last price of the next call
        self._priced_for: tuple | None = None
        # The subagent run each call started (views.run_tree.TreeNode by call id) and the tree's roll-up.
        self.subagents: dict = {}
        self.subagent_tree = None

    @property
    def store(self):
        return self.app.store

    def compose(self) -> ComposeResult:
        yield DayflowHeader()
        with Horizontal(id="run-bar"):
            yield Static(id="run-summary")
            yield Button("Resume", id="resume-button", variant="primary", compact=True)
        yield Static(id="resume-estimate")
        yield Static(id="saved")
        yield Static(id="task")
        yield Static(id="live")
        yield PendingCalls(id="pending")
        with Horizontal(id="body"):
            with Vertical(id="sidebar"):
                yield Static(Content.styled("tokens per step", "$text-muted"), id="chart-title")
                yield Sparkline([], id="token-chart")
                yield StepList(id="steps")
            with Vertical(id="main"):
                yield StepDetail(id="detail")
                with Vertical(id="raw-pane", classes="pane"):
                    yield Static(id="raw-title", classes="pane-title")
                    yield JsonView(id="raw")
                with Vertical(id="request-pane", classes="pane"):
                    yield Static(id="request-title", classes="pane-title")
                    yield JsonView(id="request")
        yield FittingFooter()

    def on_mount(self) -> None:
        self.query_one("#run-summary", Static).update(Content.styled(f"Reading run {printable(self.run_id)}…", "$text-muted"))
        self._load()
        self.query_one("#steps", OptionList).focus()
        self.set_interval(POLL_EVERY_S, self._poll_tick)

    # -- data (read on the app's reader thread, applied here) ---------------

    @property
    def _read_key(self) -> str:
        return f"transcript:{id(self)}"

    def _load(self, *, if_changed: bool = False) -> None:
        """Ask the reader for the run and the steps that changed since last time (``TranscriptRead`` answers)."""
        store, run_id, known, marker = self.store, self.run_id, self.steps, self._marker
        known_views = tuple(self.views)

        def job() -> TranscriptRead | None:
            return read_transcript(store, run_id, known=known, known_views=known_views, marker=marker,
                                   if_changed=if_changed)

        def done(result, error) -> None:
            self.post_message(TranscriptLoaded(self._read_key, result, error))

        self.app.reader.submit(self._read_key, job, done)

    @on(TranscriptLoaded)
    def _loaded(self, message: TranscriptLoaded) -> None:
        if message.key != self._read_key:
            return
        message.stop()
        first = self.run is None
        if message.error is not None:
            self.app.report_error(message.error)
            if first and not is_connection_error(message.error):
                self.dismiss()
            return
        self.app.connection_ok()
        read = message.read
        if read is None:  # nothing committed since: an owner may have died without a commit
            if self.run is not None:
                self._draw_summary()
                self._draw_resume_button()
                self._draw_live()
                self._draw_estimate()
            return
        self._marker = read.marker
        self.run = read.run
        self.run_id = read.run.id
        if read.steps_changed:
            self.steps = read.steps
            self.views = read.views or []
        children_changed = _child_facts(read.children) != _child_facts(self.subagents)
        self.subagents, self.subagent_tree = dict(read.children), read.tree
        if children_changed:  # a child appeared or moved: its step's marker and the call's line are drawn again
            self._listed = None
            self._detail_shown = None
        self._show_pending(read.pending)
        self._redraw(steps_changed=read.steps_changed or children_changed)
        if first:
            self._set_mode(self.mode)
            if len(self.views) >= LONG_RUN_STEPS:
                self.call_after_refresh(self.app.settle_heap)

    def _show_pending(self, pending: tuple) -> None:
        """The waiting calls, one row each; the list takes the focus when they first appear."""
        self.pending = pending if self.run is not None and self.run.status == "waiting" else ()
        calls = self.query_one(PendingCalls)
        appeared = bool(self.pending) and not calls.has_class("-shown")
        calls.show(self.pending)
        calls.set_class(bool(self.pending), "-shown")
        if appeared:
            self.call_after_refresh(calls.focus)  # once it is displayed (a hidden widget takes no focus)
        elif not self.pending and calls.has_focus:
            self.query_one("#steps", OptionList).focus()
        self.sync_bindings()

    def _redraw(self, *, steps_changed: bool) -> None:
        run = self.run
        assert run is not None
        self._draw_summary()
        # A title the run was given goes first; a made one is the task's first line, already there.
        given = [(run_title(run), "bold $text"), "  ·  "] if is_given(run) else []
        self.query_one("#task", Static).update(Content.assemble(*given, ("Task  ", "bold"), printable(run.user_msg)))
        self._draw_resume_button()
        self._draw_live()
        self._draw_saved()
        self._price_if_changed()
        if steps_changed or self._brief_changed():
            self._draw_step_list()

    def _draw_summary(self) -> None:
        run = self.run
        status = effective_status(run)
        summary = Content.assemble(
            (printable(run.id), "bold"), "  ",
            (formatting.status_label(status), f"bold {formatting.STATUS_STYLES.get(status, '')}"),
            f"  ·  {run.step_count} step{'s' if run.step_count != 1 else ''}",
            f"  ·  {formatting.tokens(run.input_tokens)} in / {formatting.tokens(run.output_tokens)} out",
            *self._money_parts(),
            *self._tree_parts(),
            "  ·  ", printable(run.model), f"  ·  {formatting.started(run.created_at)}",
        )
        self.query_one("#run-summary", Static).update(summary)

    def _tree_parts(self) -> list:
        """A parent: its whole tree's dollars and, when worse than its own, the tree's status; a child: whose."""
        run, tree = self.run, self.subagent_tree
        parts: list = []
        if getattr(run, "parent_call_id", None):
            parts.append((f"  ·  ↳ subagent of {printable(run.parent_id)}", "$text-muted"))
        if tree is not None:
            parts.append(f"  ·  tree {tree.runs} runs {cost_text(tree.total)}")
            if tree.differs:
                parts.append(("  " + formatting.status_label(tree.worst),
                              f"bold {formatting.STATUS_STYLES.get(tree.worst, '')}"))
        return parts

    def _money_parts(self) -> list:
        """The run's dollars (the sum of its steps), cache hit rate, and spent / budget."""
        run = self.run
        spent = self.views[-1].cum_cost if self.views else Cost()  # None: a step without a price
        parts: list = [("  ·  " + format_usd(spent), "bold")]
        if run.input_tokens and all(isinstance(n, int) for n in (run.input_tokens, run.cache_read_tokens)):
            parts.append(f"  ·  cache {run.cache_read_tokens / run.input_tokens:.0%}")  # (not from a damaged row)
        if run.budget_usd is not None:
            parts.append(f"  ·  budget {budget_text(run.budget_usd, spent.total if spent is not None else None)}")
        return parts

    def _brief_changed(self) -> bool:
        run = self.run
        shown = (run.status, bool(run.final_text), run.error) if run else None
        changed, self._shown = shown != self._shown, shown
        return changed

    def _entries(self) -> int:
        has_end = bool(self.run and (self.run.final_text or (self.run.error and self.run.status != "done")))
        return len(self.views) + (1 if has_end else 0)

    def _draw_step_list(self) -> None:
        option_list = self.query_one("#steps", OptionList)
        old_count = option_list.option_count
        # Follow new steps when the reader is at the end of a run that is moving; otherwise stay put.
        live = self.run is not None and effective_status(self.run) in ("running", "queued", "waiting")
        was_at_end = (live or old_count > 0) and (option_list.highlighted is None
                                                  or option_list.highlighted >= old_count - 1)
        run = self.run
        end = None
        if run is not None and run.final_text:
            # The built-in agent's answer is a brief; a user agent's is just its answer.
            word = "brief" if getattr(run, "agent", None) in (None, "", "brief") else "answer"
            end = Option(Content.styled(f"    {word}", "bold $text-success"), id=BRIEF)
        elif run is not None and run.error and run.status != "done":
            end = Option(Content.styled("    stopped", "bold $text-error"), id=BRIEF)
        highlighted = option_list.highlighted
        views, listed = self.views, self._listed
        # The views kept from the last read are the same objects: only the options from the first one
        # that is not are built again (a live 5,000-step run rebuilt 5,000 options per commit).
        same = 0
        if (listed is not None and listed[1] == self.chart_dollars and not listed[2]
                and old_count == len(listed[0]) <= len(views)):
            limit = min(len(listed[0]), len(views))
            while same < limit and listed[0][same] is views[same]:
                same += 1
            if any(listed[0][i].n != views[i].n for i in range(same, old_count)):
                same = 0  # not the same steps re-read: list them all again
        with self.app.batch_update():
            if same == 0:
                option_list.clear_options()
                kept = 0
            else:  # the listed steps read again (the last one, its results arrived): new prompts in place
                kept = old_count
                for index in range(same, old_count):
                    option_list.set_prompt_at(index, step_prompt(views[index], dollars=self.chart_dollars,
                                                                 subagents=bool(self._children_of(views[index]))))
            fresh = [Option(step_prompt(view, dollars=self.chart_dollars, subagents=bool(self._children_of(view))),
                            id=f"step-{view.n}")
                     for view in views[kept:]]
            option_list.add_options(fresh + ([end] if end is not None else []))
            self._listed = (tuple(views), self.chart_dollars, end is not None)
            options = option_list.options
            if options:
                target = len(options) - 1 if was_at_end else (highlighted or 0)
                if self.open_at_step is not None and old_count == 0:
                    wanted = f"step-{self.open_at_step}"
                    target = next((i for i, option in enumerate(options) if option.id == wanted), target)
                    self.open_at_step = None
                option_list.highlighted = min(target, len(options) - 1)
        self._brief_changed()
        self._draw_chart()
        self._show_selected()

    def _draw_chart(self) -> None:
        if self.chart_dollars:
            data = [float(v.cost.total) if v.cost is not None else 0.0 for v in self.views]
            title = "dollars per step ($: tokens)"
        else:
            data = [v.input_tokens + v.output_tokens for v in self.views]
            title = "tokens per step ($: dollars)"
        self.query_one("#chart-title", Static).update(Content.styled(title, "$text-muted"))
        self.query_one("#token-chart", Sparkline).data = data

    def action_chart_units(self) -> None:
        self.chart_dollars = not self.chart_dollars
        self._draw_step_list()

    _polled_at = 0.0

    def _poll_tick(self) -> None:
        due = getattr(self.app, "poll_due", None)  # while the database pushes commits, a rare safety net
        if due is None or due(self._polled_at):
            self.poll()

    def poll(self) -> None:
        """Live tick: another process (or our worker) may have committed steps (the reader checks)."""
        self._polled_at = time.monotonic()
        if self.run is not None and not self.app.reader.pending(self._read_key):
            self._load(if_changed=True)

    def run_changed(self, run_id: str) -> None:
        if run_id == self.run_id and self.is_mounted:
            try:
                self._load()
            except NoMatches:
                pass  # the screen is being composed or dismissed: its next mount reads the run afresh
            except DayflowError as exc:
                self.app.report_error(exc)

    # -- showing -------------------------------------------------------------

    def _selected(self) -> int | None:
        return self.query_one("#steps", OptionList).highlighted

    @on(OptionList.OptionHighlighted, "#steps")
    def _highlighted(self) -> None:
        self._show_selected()
        self.sync_bindings()  # Enter opens a subagent only on a step whose call started one

    def _show_selected(self) -> None:
        detail = self.query_one(StepDetail)
        index = self._selected()
        run = self.run
        if run is None:
            return
        # What the detail pane would show; rebuilding it for the same thing is wasted work (and flicker).
        if index is not None and index < len(self.views):
            view = self.views[index]
            shown = ("step", view.n, view.raw_tool_results is not None, index == len(self.views) - 1,
                     run.status, run.error)
        else:
            shown = ("end", index, len(self.views), run.status, bool(run.final_text), run.error)
        if shown == self._detail_shown:
            if self.mode == "raw":
                self._fill_raw()
            return
        self._detail_shown = shown
        if index is None or not self._entries():
            detail.show_message("No steps yet. " + ("Press r to run it." if run.status == "queued" else ""))
        elif index >= len(self.views):
            detail.show_brief(run)
        else:
            detail.show_step(self.views[index], run, last=index == len(self.views) - 1, children=self.subagents)
            if self.payloads_open:
                self.call_after_refresh(detail.set_payloads, True)
        if self.mode == "raw":
            self._fill_raw()

    # -- actions -------------------------------------------------------------

    def on_key(self, event) -> None:
        self.explain_refused_resume(event, self.run)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("resume", "resume_with_budget"):  # left out of the footer where it does not apply
            return self.run is not None and self.app.resume_blocker(self.run) is None
        if action in ("approve", "approve_all", "deny", "edit_call"):
            return True if self._waiting_calls() else False  # shown only while the run waits for a person
        if action == "cancel_run":
            return self.can_cancel()  # not on a run that has ended
        if action == "open_subagent":
            return True if self._selected_children() else False  # only on a step whose call started a child
        return True

    # -- subagents -----------------------------------------------------------

    def _children_of(self, view: StepView) -> list:
        """The subagent runs the step's calls started, in the calls' order."""
        return [self.subagents[call.id] for call in view.calls if call.id in self.subagents]

    def _selected_children(self) -> list:
        index = self._selected()
        return self._children_of(self.views[index]) if index is not None and index < len(self.views) else []

    @on(OptionList.OptionSelected, "#steps")
    def _step_chosen(self) -> None:
        self.action_open_subagent()

    def action_open_subagent(self) -> None:
        """Open the child run the highlighted step's call started (a step with several: choose one); Esc in the
        child comes back here, at this step."""
        children = self._selected_children()
        if len(children) == 1:
            self.app.open_transcript(children[0].run.id)
        elif children:
            from .subagent_choice import SubagentChoice

            def chosen(run_id) -> None:
                if run_id:
                    self.app.open_transcript(run_id)

            self.app.push_screen(SubagentChoice(tuple(children)), chosen)

    def run_to_cancel(self) -> Run | None:
        return self.run

    def action_fork(self) -> None:
        """Fork at the highlighted step (the brief line: at the last step)."""
        index = self._selected()
        if self.run is not None and (getattr(self.run, "source", None) or "dayflow") != "dayflow":
            self.app.offer_claude_resume(self.run)  # an imported session is not forked here
            return
        if not self.views:
            self.app.notify("This run has no step to fork at.", severity="warning")
            return
        at = self.views[min(index if index is not None else len(self.views) - 1, len(self.views) - 1)].n

        def chosen(answer) -> None:
            if answer:
                fork_in_worker(self.app, self.run_id, at, answer[1])

        self.app.push_screen(ForkDialog(self.run_id, at), chosen)

    def action_copy_id(self) -> None:
        copy_run(self.app, self.run_id)

    def action_copy_resume(self) -> None:
        copy_run(self.app, self.run_id, command=True)

    def on_unmount(self) -> None:
        if len(self.views) >= LONG_RUN_STEPS:  # its views and widgets are garbage now: the next screen collects
            self.app.settle_when_gone(self)

    def action_back(self) -> None:
        if self.mode != "detail":
            self._set_mode("detail")
        else:
            self.dismiss()

    def _go(self, index: int) -> None:
        option_list = self.query_one("#steps", OptionList)
        if option_list.option_count:
            option_list.highlighted = max(0, min(index, option_list.option_count - 1))

    def action_step(self, delta: int) -> None:
        current = self._selected()
        self._go((current if current is not None else -1) + delta)

    def action_first_step(self) -> None:
        self._go(0)

    def action_last_step(self) -> None:
        self._go(self.query_one("#steps", OptionList).option_count - 1)


def _child_facts(children: dict) -> tuple:
    """What the screen draws of the children: a new read that differs in these redraws their lines."""
    return tuple(sorted((call_id, child.run.id, child.status, child.run.step_count, child.cost.total)
                        for call_id, child in children.items()))
