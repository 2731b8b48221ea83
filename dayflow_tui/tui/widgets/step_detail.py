"""One step of a transcript, in full: only the selected step is ever built.

Everything shown here came from the model or a tool: it is wrapped in
``Content`` from plain strings after ``safe_text.printable`` (no markup
parsing, no terminal escapes), except the final brief, which is Markdown.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Collapsible, Markdown, Rule, Static

from ...money.cost import format_usd
from ...store.models import Run
from ...safe_text import printable
from ...agent.transcript import StepView, ToolCall
from ...views.costs import cost_text
from .. import formatting


def _text(value: object, style: str = "") -> Content:
    return Content.styled(printable(value), style) if style else Content(printable(value))


def step_heading(view: StepView) -> Content:
    stop_style = "bold $text-success" if view.stop_reason == "end_turn" else "bold"
    parts: list = [(f"Step {view.n}", "bold"), "  stop ", (printable(view.stop_reason or "—"), stop_style),
                   f"  ·  {formatting.tokens(view.input_tokens)} in / {formatting.tokens(view.output_tokens)} out",
                   f"  ·  cumulative {formatting.tokens(view.cum_input)} / {formatting.tokens(view.cum_output)}",
                   f"  ·  {format_usd(view.cost)}, run {format_usd(view.cum_cost)}"]
    parts.append(f"  ·  +{formatting.seconds(view.seconds_since_previous)} after previous"
                 if view.seconds_since_previous is not None else "  ·  first step")
    return Content.assemble(*parts)


def step_facts(view: StepView) -> Content:
    facts = []
    if view.duration_ms is not None:
        facts.append(f"model call {formatting.tokens(view.duration_ms)} ms")
    if view.cache_read_tokens or view.cache_write_tokens:
        facts.append(f"cache read {formatting.tokens(view.cache_read_tokens)}, "
                     f"write {formatting.tokens(view.cache_write_tokens)}")
    if view.request_est_tokens is not None:
        sent = (f", compacted to ~{formatting.tokens(view.compacted_est_tokens)}"
                if view.compacted_est_tokens is not None else "")
        facts.append(f"request ~{formatting.tokens(view.request_est_tokens)} tokens{sent}")
    facts.append(f"committed {formatting.started(view.created_at)}")
    return Content.styled("  ·  ".join(facts), "$text-muted")


def call_heading(call: ToolCall) -> Content:
    outcome_style = "bold $text-error" if call.is_error else ("bold $text-success" if call.result is not None else "$text-warning")
    count = f"  ·  {call.item_count} item{'s' if call.item_count != 1 else ''}" if call.item_count is not None else ""
    decided = ""
    if call.decision and not call.decision.startswith("waiting"):
        decided = f"  ·  {call.decision}"  # who approved or denied it, where and when
    server = f"  ·  MCP server {call.server}" if call.server else ""
    return Content.assemble("→ ", (printable(call.name), "bold"), "  ", (printable(call.outcome), outcome_style),
                            count, (printable(server), "$text-accent"), (printable(decided), "italic dim"))


class PayloadFold(Collapsible):
    """A result payload's fold. Textual scrolls a collapsible into view when it opens; ``e`` opens them all at
    once, and the last one's scroll took the reader into the fourth tool's payload. ``StepDetail.set_payloads``
    asks it to stay put (a click on one title still brings that one into view)."""

    keep_place = False

    def scroll_visible(self, *args, **kwargs) -> None:
        if self.keep_place:
            self.keep_place = False
            return
        super().scroll_visible(*args, **kwargs)


def child_line(child) -> Content:
    """The subagent run a call started (a ``views.run_tree.TreeNode``): id, agent, status, steps, dollars."""
    run = child.run
    steps = run.step_count
    return Content.assemble(("↳ subagent run ", "bold $accent"), (printable(run.id), "bold"), "  ",
                            printable(run.agent or "brief"), "  ",
                            (formatting.status_label(child.status), f"bold {formatting.STATUS_STYLES.get(child.status, '')}"),
                            printable(f"  ·  {steps} step{'' if steps == 1 else 's'}  ·  {cost_text(child.cost.total)}"),
                            ("  ·  Enter opens it", "$text-muted"))


class ToolCallView(Vertical):
    """A tool call: name, readable arguments, outcome; the result payload folded until asked for; the
    subagent run it started, if it did."""

    def __init__(self, call: ToolCall, child=None) -> None:
        super().__init__(classes="tool-call" + (" tool-error" if call.is_error else ""))
        self.call = call
        self.child = child

    def compose(self) -> ComposeResult:
        yield Static(call_heading(self.call), classes="tool-call-title")
        if self.child is not None:
            yield Static(child_line(self.child), classes="subagent-run")
        if self.call.hints:  # what the MCP server said of the tool, and what that let a crash or a person do
            yield Static(_text(self.call.hints, "italic $text-muted"), classes="tool-hints")
        yield Static(_text(self.call.pretty_input()), classes="tool-args")
        if self.call.result is not None:
            payload = self.call.pretty_result()
            with PayloadFold(title=f"result payload · {len(payload):,} chars", collapsed=True,
                             classes="payload"):
                yield Static(_text(payload), classes="payload-text")


class StepDetail(VerticalScroll):
    """Shows one step (or the run's brief); rebuilt when the selection changes."""

    def show_step(self, view: StepView, run: Run, *, last: bool, children=None) -> None:
        """``children``: the subagent run each call started, by the call's id (``views.run_tree.TreeNode``)."""
        children = children or {}
        widgets: list = [Static(step_heading(view), classes="step-heading"),
                         Static(step_facts(view), classes="step-facts")]
        if view.problem:
            widgets.append(Static(_text(view.problem, "bold $text-error"), classes="step-problem"))
        for text in view.texts:
            widgets.append(Static(_text(text), classes="assistant-text"))
        for block in view.other_blocks:
            widgets.append(Static(_text(f"[{block.get('type')} block]", "italic $text-muted"), classes="other-block"))
        widgets.extend(ToolCallView(call, children.get(call.id)) for call in view.calls)
        if last and run.error and run.status != "done":
            widgets.append(Static(_text(f"stopped: {run.error}", "bold $text-error"), classes="run-error"))
        self._replace(widgets)

    def show_brief(self, run: Run) -> None:
        widgets: list = []
        if run.final_text:
            widgets += [Static(Content.styled("Daily brief", "bold"), classes="step-heading"),
                        Rule(line_style="heavy"),
                        # Markdown from the model renders as Markdown; control characters are shown as escapes.
                        Markdown(printable(run.final_text), classes="brief")]
        if run.error and run.status != "done":
            widgets.append(Static(_text(f"stopped: {run.error}", "bold $text-error"), classes="run-error"))
        self._replace(widgets)

    def show_message(self, text: str) -> None:
        self._replace([Static(Content(text), classes="step-placeholder")])

    def _replace(self, widgets: list) -> None:
        with self.app.batch_update():
            self.remove_children()
            self.mount_all(widgets)
        self.scroll_home(animate=False)

    def set_payloads(self, expanded: bool) -> None:
        """Fold or unfold every payload, keeping the part being read where it is on screen.

        Payloads above the view grow or shrink when toggled; without an anchor
        the text being read would jump by their height.
        """
        anchor, offset = None, 0
        top = self.scroll_y
        for child in self.children:
            region = child.virtual_region
            if region.y + region.height > top:
                anchor, offset = child, region.y - top
                break
        for collapsible in self.query(Collapsible):
            if collapsible.collapsed == expanded:  # it will change: it must not scroll itself into view
                if isinstance(collapsible, PayloadFold):
                    collapsible.keep_place = True
                collapsible.collapsed = not expanded
        if anchor is not None and top > 0:
            def keep_in_place() -> None:
                self.scroll_to(y=max(anchor.virtual_region.y - offset, 0), animate=False)

            self.call_after_refresh(keep_in_place)
