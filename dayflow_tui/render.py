"""Rich rendering of a transcript for ``dayflow show``.

Content is wrapped in ``rich.text.Text`` (never parsed as markup) after
``safe_text.printable`` has neutralised terminal control characters.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.markdown import Markdown
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from .money.cost import RunCost, budget_text, cache_text, format_usd
from .safe_text import printable
from .agent.registry import options_text, recorded_options
from .agent.transcript import attach_decisions, build_steps


def _safe(text: object, style: str = "") -> Text:
    return Text(printable(text), style=style)


def _count(n: object) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)  # (text in a damaged SQLite row: shown, not a crash)


def print_transcript(run, steps: list, *, raw: bool = False, console: Console | None = None,
                     run_cost: RunCost | None = None, resumes: list | None = None,
                     approvals: list | None = None, status: str | None = None) -> None:
    """``status``: the word shown (``effective_status``: a running run whose owner died is interrupted);
    the stored one when not given. ``resumes`` (``store.run_resumes``): where each resume began, marked with what it did not pay again."""
    console = console or Console(highlight=False, soft_wrap=False)
    # Every value is what a row holds, damaged or not: shown as text.
    header = Text.assemble(("run ", "bold"), (printable(run.id), "bold cyan"), f"  {printable(status or run.status)}  model=",
                           printable(run.model), printable(f"  tokens={run.input_tokens}/{run.output_tokens}"))
    if run_cost is not None:
        header.append(f"  cost={format_usd(run_cost.total)}  cache={cache_text(run_cost)}")
        budget = budget_text(getattr(run, "budget_usd", None), run_cost.total)
        if budget:
            header.append(f"  budget={budget.replace(' ', '')}")
    console.print(header)
    options = recorded_options(run)
    if options:
        console.print(_safe(f"agent {getattr(run, 'agent', None) or 'brief'}: {options_text(options)}", "dim"))
    if getattr(run, "parent_id", None):
        console.print(_safe(f"fork of run {run.parent_id} at step {run.forked_at}: steps 1..{run.forked_at} are "
                            "its copies (paid once, by the parent)", "dim"))
    console.print(Panel(_safe(run.user_msg), title="task", title_align="left", border_style="blue"))
    views = build_steps(steps, run.model)
    attach_decisions(views, approvals or [])
    resumed_after = {resume.after_step: resume for resume in resumes or []}
    for view in views:
        resume = resumed_after.get(view.n - 1)
        if resume is not None and view.n > 1:
            saved = views[view.n - 2].cum_cost if len(views) >= view.n - 1 else None
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
            continue
        if view.problem:
            console.print(_safe(view.problem, "bold red"))
            continue
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
    if run.final_text:
        console.print(Rule("brief", style="green"))
        # Markdown from the model is rendered as Markdown, but Rich markup in it is not interpreted.
        console.print(Markdown(printable(run.final_text)))
    elif run.error:
        console.print(Group(Rule("stopped", style="red"), _safe(run.error, "red")))
