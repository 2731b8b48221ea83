"""The run list's preview pane: the highlighted run at a glance, read off the UI thread.

What a person checks before opening a run (k9s' describe, lazygit's side
panel): its status, agent and model, steps, tokens and dollars, who holds
it (and how fresh its heartbeat is), its parent when it is a fork, the
tasks it created, and the first lines of its answer or its error. The
reader thread reads it (``PreviewRead``); the pane folds away on terminals
narrower than ``MIN_WIDTH``.
"""

from __future__ import annotations

import os

from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from ...agent.registry import options_text, recorded_options
from ...money.cost import format_usd
from ...safe_text import one_line, printable
from ...store import effective_status, holder, owner_alive, this_host
from ...views.mcp_tools import mcp_hints_text, recorded_mcp_servers, recorded_mcp_tools
from ...views.titles import made_title, run_title
from ...views.runs import PREVIEW_TASKS, Preview, read_preview
from .. import formatting

MIN_WIDTH = 100  # the terminal's columns below which the pane folds away
ANSWER_LINES = 12
TASK_LINES = PREVIEW_TASKS
MCP_TOOL_LINES = 8  # per server; more are counted


class PreviewRead(Message):
    def __init__(self, run_id: str, preview: Preview | None, error: BaseException | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.preview = preview
        self.error = error


def preview_content(preview: Preview) -> Content:
    run = preview.run
    status = effective_status(run)
    title = run_title(run, 120)
    # The title on top when it says more than the task below (given, or made with the answer).
    parts: list = [(title, "bold"), "\n"] if title != made_title(run.user_msg, None, 120) else []
    parts += [(printable(run.id), "bold"), "\n",
              (formatting.status_label(status), f"bold {formatting.STATUS_STYLES.get(status, '')}"),
              f"  ·  {printable(getattr(run, 'agent', None) or 'brief')}  ·  {printable(one_line(run.model, 40))}",
              "\n"]
    options = recorded_options(run)
    if options:
        parts += [(printable(one_line(options_text(options), 200)), "$text-muted"), "\n"]
    parts += mcp_parts(run)
    parts += [f"{run.step_count} step{'s' if run.step_count != 1 else ''}  ·  "
              f"{formatting.tokens(run.input_tokens)} in / {formatting.tokens(run.output_tokens)} out  ·  "
              f"{format_usd(preview.cost, unknown='price unknown')}", "\n"]
    if run.owner_pid is not None:
        if run.owner_pid == os.getpid() and run.owner_host == this_host():
            who = "held by this dashboard"
        else:
            who = f"held by {holder(run)} ({'alive' if owner_alive(run) else 'gone'})"
        parts += [(f"{who}, heartbeat {formatting.ago(run.heartbeat_at)}", "$text-muted"), "\n"]
    if getattr(run, "priority", 0):
        parts += [(f"priority {printable(run.priority)} (workers take higher first)", "$text-muted"), "\n"]
    if getattr(run, "cancel_at", None) and run.status != "cancelled":
        asked = f"cancel asked by {run.cancelled_by}" + (f": {one_line(run.cancel_reason, 200)}" if run.cancel_reason else "")
        parts += [(printable(asked), "bold $text-warning"), "\n"]
    if getattr(run, "parent_id", None):
        parts += [(f"⑂ fork of {printable(run.parent_id)} at step {run.forked_at}", "$text-muted"), "\n"]
    parts += [("started ", "$text-muted"), formatting.started(run.created_at), ("  ·  last activity ", "$text-muted"),
              formatting.ago(run.updated_at), "\n\n"]
    tasks = preview.tasks
    if tasks:
        parts += [(f"tasks created ({len(tasks) if len(tasks) <= TASK_LINES else f'{TASK_LINES}+'})", "bold"), "\n"]
        for task in tasks[:TASK_LINES]:
            mark = "✔" if task.done else "•"
            parts += [f" {mark} {one_line(task.title, 60)}", (f"  {one_line(task.due, 40)}" if task.due else "", "$text-muted"), "\n"]
        parts.append("\n")
    if run.error and run.status != "done":
        parts += [("error", "bold $text-error"), "\n", (printable(one_line(run.error, 400)), "$text-error"), "\n"]
    elif run.final_text:
        parts += [("answer", "bold"), "\n"]
        lines = printable(run.final_text).splitlines()
        parts += ["\n".join(line[:120] for line in lines[:ANSWER_LINES])]
        if len(lines) > ANSWER_LINES:
            parts += ["\n", (f"… {len(lines) - ANSWER_LINES} more line(s): Enter opens the run", "$text-muted")]
    else:
        parts += [("task", "bold"), "\n", printable(one_line(run.user_msg, 400))]
    return Content.assemble(*parts)


def mcp_parts(run) -> list:
    """The run's MCP servers (where each is) and, per tool, its recorded annotations and what they made of it."""
    servers = recorded_mcp_servers(run)
    if not servers:
        return []
    tools = recorded_mcp_tools(run)
    parts: list = []
    for name, where in servers.items():
        parts += [(f"MCP {one_line(name, 40)}", "bold"), (f"  {one_line(where, 100)}", "$text-muted"), "\n"]
        mine = [(tool, facts) for tool, facts in tools.items() if facts["server"] == name]
        for tool, facts in mine[:MCP_TOOL_LINES]:
            short = tool.split("__", 1)[1] if "__" in tool else tool
            parts += [f"  {one_line(short, 40)}  ", (one_line(mcp_hints_text(facts), 100), "$text-muted"), "\n"]
        if len(mine) > MCP_TOOL_LINES:
            parts += [(f"  … {len(mine) - MCP_TOOL_LINES} more tool(s)", "$text-muted"), "\n"]
    return parts


class RunPreview(VerticalScroll):
    """The pane; ``show(run_id)`` asks the reader, ``PreviewRead`` fills it."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.run_id: str | None = None
        self.shown_id: str | None = None  # the run whose read is on show
        self._timer = None

    @property
    def settled(self) -> bool:
        """Showing the highlighted run (tests wait for this before they look)."""
        return self.run_id == self.shown_id

    def compose(self):
        yield Static(Content.styled("No run highlighted.", "$text-muted"), id="preview-text")

    def show(self, run_id: str | None) -> None:
        """Read ``run_id`` (a little after the cursor stops: holding j reads only where it lands)."""
        self.run_id = run_id
        if self._timer is not None:
            self._timer.stop()
        if run_id is None:
            self.shown_id = None
            self.query_one("#preview-text", Static).update(Content.styled("No run highlighted.", "$text-muted"))
            return
        self._timer = self.set_timer(0.12, lambda: self._read(run_id))

    def refresh_run(self) -> None:
        """Read the shown run again (the run list saw a commit)."""
        if self.run_id is not None:
            self._read(self.run_id)

    def _read(self, run_id: str) -> None:
        store = self.app.store

        def done(preview, error) -> None:
            self.post_message(PreviewRead(run_id, preview, error))

        self.app.reader.submit("preview", lambda: read_preview(store, run_id, tasks=TASK_LINES), done)

    def on_preview_read(self, message: PreviewRead) -> None:
        message.stop()
        if message.run_id != self.run_id:
            return
        text = self.query_one("#preview-text", Static)
        self.shown_id = message.run_id
        if message.error is not None:
            text.update(Content.styled(f"cannot be read: {one_line(message.error, 200)}", "$text-muted"))
            return
        text.update(preview_content(message.preview))
