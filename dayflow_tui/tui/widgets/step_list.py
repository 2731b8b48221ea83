"""The transcript's step list: an ``OptionList`` that a live run can grow one step at a time.

Textual's own ways to change an option (replace a prompt, remove one) clear the list's line map,
and rebuilding it measures every option again: 60 ms a commit on a 5,000-step run, on the UI
thread. A step's prompt is always one line, so a new prompt for one step leaves every line where
it was and only the drawn options need drawing again.
"""

from __future__ import annotations

from textual.widgets import OptionList
from textual.visual import VisualType


class StepList(OptionList):
    def set_prompt_at(self, index: int, prompt: VisualType) -> None:
        """Give option ``index`` a new one-line prompt without measuring every option again."""
        # Private parts of OptionList (textual is pinned exactly): the prompt, and the cache of drawn
        # options; the line map (``_line_cache``) stays, since the option is one line before and after.
        self.get_option_at_index(index)._set_prompt(prompt)
        self._option_render_cache.clear()
        self.refresh()
