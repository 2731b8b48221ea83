"""Rich rendering of a transcript for ``dayflow show``.

Content is wrapped in ``rich.text.Text`` (never parsed as markup) after
``safe_text.printable`` has neutralised terminal control characters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

from rich.console import Console, Group
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from .money.cost import RunCost, budget_text, cache_text, format_usd
from .safe_text import printable
from .agent.registry import options_text, recorded_options
from .agent.transcript import attach_decisions, build_steps


@dataclass(frozen=True)
class TreeWords:
    """The subagent tree of a run, in words (``views.run_tree``): what ``print_transcript`` writes of it."""

    rollup: str  # the whole tree summed: runs, steps, dollars, the worst status
    lines: tuple  # (depth, words) per run of the tree, the run itself first; () for a run without children
    calls: dict  # the words of the child each call started, by the call's id
    parent: str | None = None  # for a subagent's run: which run's call started it


def transcript_console(**options) -> Console:
    """A Console for a long transcript: what it asks of the environment and the terminal, asked once.

    Rich reads the terminal's size and several environment variables on every ``print``: a quarter of a
    5,000-step transcript's time. A copy of the environment (a plain dict) and the size found at the start
    give the same output.
    """
    console = Console(highlight=False, soft_wrap=False, _environ=dict(os.environ), **options)
    console.size = console.size
    return console


def _safe(text: object, style: str = "") -> Text:
    return Text(printable(text), style=style)


def _count(n: object) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)  # (text in a damaged SQLite row: shown, not a crash)


def print_transcript(run, steps: list | None = None, *, raw: bool = False, console: Console | None = None,
                     run_cost: RunCost | None = None, resumes: list | None = None,
                     approvals: list | None = None, status: str | None = None,
                     title: str | None = None, pages: Iterable[list] | None = None,
                     tree: TreeWords | None = None) -> None:
    """``status``: the word shown (``effective_status``: a running run whose owner died is interrupted);
    the stored one when not given. ``tree``: the subagent runs under it and the call that started each.
    ``resumes`` (``store.run_resumes``): where each resume began, marked with what it did not pay again.

    ``pages``: the steps a page at a time, read as they are needed (instead of ``steps``): each page is
    written and flushed before the next is read, so a long run's first screen comes at once.
    """
    console = console or transcript_console()
    # Every value is what a row holds, damaged or not: shown as text.
    header = Text.assemble(("run ", "bold"), (printable(run.id), "bold cyan"), f"  {printable(status or run.status)}  model=",
                           printable(run.model), printable(f"  tokens={run.input_tokens}/{run.output_tokens}"))
    if run_cost is not None:
        header.append(f"  cost={format_usd(run_cost.total)}  cache={cache_text(run_cost)}")
        budget = budget_text(getattr(run, "budget_usd", None), run_cost.total)
        if budget:
            header.append(f"  budget={budget.replace(' ', '')}")
    if getattr(run, "priority", 0):
        header.append(printable(f"  priority={run.priority}"))
    console.print(header)
    if title:  # views.titles: given to the run, or made from its task and answer (one printable line)
        console.print(Text.assemble(("title ", "bold"), printable(title)))
    if getattr(run, "cancel_at", None) and run.status != "cancelled":
        # Asked of the process that drives it: it ends the run at its next commit or heartbeat.
        console.print(_safe(f"cancel asked {run.cancel_at[:19].replace('T', ' ')} by {run.cancelled_by}"
                            + (f": {run.cancel_reason}" if run.cancel_reason else ""), "bold yellow"))
    options = recorded_options(run)
    if options:
        console.print(_safe(f"agent {getattr(run, 'agent', None) or 'brief'}: {options_text(options)}", "dim"))
    if getattr(run, "source", None) == "otel":
        console.print(_safe(f"received by `dayflow collect`: OpenTelemetry trace/span {run.external_id} "
                            f"(agent {run.agent}): read-only", "dim"))
    elif (getattr(run, "source", None) or "dayflow") != "dayflow":
        where = f" in {run.external_dir}" if run.external_dir else ""
        branch = f" (branch {run.external_branch})" if run.external_branch else ""
        child = f"; a subagent of run {run.parent_id}" if run.parent_id else ""
        console.print(_safe(f"imported {run.source} session {run.external_id}{where}{branch}{child}: read-only; "
                            f"continue it with `claude --resume {run.external_id}`", "dim"))
    elif tree is not None and tree.parent:
        console.print(_safe(tree.parent, "dim"))
    elif getattr(run, "parent_id", None):
        console.print(_safe(f"fork of run {run.parent_id} at step {run.forked_at}: steps 1..{run.forked_at} are "
                            "its copies (paid once, by the parent)", "dim"))
    if tree is not None and tree.lines:
        # The whole tree at the top: a parent done while a child failed (or waits) says so before the steps.
        console.print(Text.assemble(("tree ", "bold"), printable(tree.rollup)))
        for depth, words in tree.lines:
            console.print(_safe(("  " + "   " * (depth - 1) + "└─ " if depth else "  ") + words))
    console.print(Panel(_safe(run.user_msg), title="task", title_align="left", border_style="blue"))
    _flush(console)
    resumed_after = {resume.after_step: resume for resume in resumes or []}
    previous = None
    for page in ([steps or []] if pages is None else pages):
        views = build_steps(page, run.model, after=previous)
        attach_decisions(views, approvals or [])
        for view in views:
            _print_step(console, view, previous, resumed_after, raw, tree.calls if tree is not None else {})
            previous = view
        _flush(console)
    if run.final_text:
        from rich.markdown import Markdown  # markdown-it and its plugins: only a finished run's brief needs them

        console.print(Rule("brief", style="green"))
        # Markdown from the model is rendered as Markdown, but Rich markup in it is not interpreted.
        console.print(Markdown(printable(run.final_text)))
    elif run.error:
        word = "cancelled" if run.status == "cancelled" else "stopped"
        console.print(Group(Rule(word, style="red"), _safe(run.error, "red")))


def _flush(console: Console) -> None:
    flush = getattr(console.file, "flush", None)
    if flush is not None:
        flush()


def _print_step(console: Console, view, previous, resumed_after: dict, raw: bool, children: dict) -> None:
    """One step: its rule (tokens, cost, the run so far), its text, its calls and their outcomes."""
    resume = resumed_after.get(view.n - 1)
    if resume is not None and view.n > 1:
        saved = previous.cum_cost if previous is not None and previous.n == view.n - 1 else None
        console.print(_safe(f"resumed {resume.at[:19].replace('T', ' ')} (was {resume.previous_status}): the "
                            f"{resume.after_step} committed step(s) ({format_usd(saved)}) were not paid again",
                            "bold green"))
    gap = f"  +{view.seconds_since_previous:.1f}s" if view.seconds_since_previous is not None else ""
    # Short enough for 80 columns: a rule is cut at the terminal's width, and the dollars come last.
    console.print(Rule(Text(printable(
                           f"step {view.n} · {view.stop_reason} · {view.input_tokens}/{view.output_tokens} "
                           f"tokens · {format_usd(view.cost)} · run {view.cum_input}/{view.cum_output}, "
                           f"{format_usd(view.cum_cost)}{gap}")),
                       align="left", style="dim"))
    if view.compacted_est_tokens is not None:
        # The history is stored in full; this step's call was sent a compacted view of it.
        console.print(_safe(f"request compacted: ~{_count(view.request_est_tokens)} -> "
                            f"~{_count(view.compacted_est_tokens)} estimated tokens", "dim"))
    if raw:
        console.print(_safe(view.raw_assistant))
        if view.raw_tool_results is not None:
            console.print(_safe(view.raw_tool_results, "dim"))
        return
    if view.problem:
        console.print(_safe(view.problem, "bold red"))
        return
    for text in view.texts:
        console.print(_safe(text))
    for block in view.other_blocks:
        console.print(_safe(f"[{block.get('type')} block]", "dim italic"))
    for call in view.calls:
        console.print(Text.assemble("  -> ", (printable(call.name), "bold"), "(",
                                    printable(call.compact_input()), ")"))
        count = f", {call.item_count} item(s)" if call.item_count is not None else ""
        style = "red" if call.is_error else "green"
        if call.decision:
            decided = "yellow" if call.decision.startswith("waiting") else "cyan"
            console.print(Text.assemble("     ", ("⏸ " if decided == "yellow" else "✋ ", decided),
                                        (printable(call.decision), decided)))
        console.print(Text.assemble("     <- ", (call.outcome, style), count))
        child = children.get(call.id)
        if child is not None:  # the subagent run this call started: `dayflow show` it for its own steps
            console.print(Text.assemble("     ↳ ", ("subagent run ", "bold"), printable(child)))
