"""The transcript's step list: an ``OptionList`` that a live run can grow one step at a time.

Textual's own ways to change an option (replace a prompt, remove one) clear the list's line map,
and rebuilding it measures every option again: 60 ms a commit on a 5,000-step run, on the UI
thread. A step's prompt is always one line, so a new prompt for one step leaves every line where
it was and only the drawn options need drawing again.
"""

from __future__ import annotations

from textual.content import Content
from textual.widgets import OptionList
from textual.visual import VisualType

from ...agent.transcript import StepView
from ...money.cost import format_usd
from ...safe_text import printable
from .. import bindings, formatting


def step_prompt(view: StepView, *, dollars: bool = False, subagents: bool = False) -> Content:
    """One line of the step list: tokens of the step, or its dollars (the sparkline's unit, ``$``);
    ``subagents``: a call of it started a subagent run (↳: Enter opens it)."""
    calls = len(view.calls)
    errors = sum(1 for call in view.calls if call.is_error)
    tools = f"{calls} tool{'s' if calls != 1 else ''}" if calls else ""
    size = format_usd(view.cost, unknown="?") if dollars else formatting.tokens(view.input_tokens + view.output_tokens)
    # 30 columns at most, so the narrow sidebar (80-column terminals) holds a step on one line.
    return Content.assemble(
        (f"{view.n:>3} ", "bold"),
        (printable(view.stop_reason or "—")[:8].ljust(9), "$text-success" if view.stop_reason == "end_turn" else ""),
        f"{size:>7}",
        ("↳", "bold $accent") if subagents else " ",  # in the gap before the tools: still 30 columns
        (tools.ljust(7), ""),
        (" ✖" if errors or view.problem else "", "bold $text-error"),
    )


class StepList(OptionList):
    BINDINGS = bindings.STEP_LIST

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "select":  # Enter opens a subagent: offered only where the screen has one to open
            can_open = getattr(self.screen, "check_action", None)
            return bool(can_open and can_open("open_subagent", ()))
        return super().check_action(action, parameters)

    def set_prompt_at(self, index: int, prompt: VisualType) -> None:
        """Give option ``index`` a new one-line prompt without measuring every option again."""
        # Private parts of OptionList (textual is pinned exactly): the prompt, and the cache of drawn
        # options; the line map (``_line_cache``) stays, since the option is one line before and after.
        self.get_option_at_index(index)._set_prompt(prompt)
        self._option_render_cache.clear()
        self.refresh()
