"""``set_title``: the built-in tool an agent may offer its model to name the run it is in.

An agent opts in by listing it: ``Agent(..., tools=(read_inbox, set_title))``.
Its one side effect is the run row's ``title``. It is an *idempotent* tool keyed
by the title itself: the store writes a title only when it differs
(``store.set_title``), so a process killed after the write and before the call's
result was kept runs it again on resume and changes nothing; the run ends up
titled as if the call had run once. Two calls with different titles leave the
later one, as they would have without a crash.
"""

from __future__ import annotations

from typing import Annotated

from .define import Param, tool
from .tools import ToolContext


@tool(idempotent="title")
def set_title(ctx: ToolContext, title: Annotated[str, Param(min_length=1, max_length=200)]) -> dict:
    """Give this run a short title (a few words) that says what it is about, for the person who reads the list of runs.

    Args:
        title: The title, one line.
    """
    changed = ctx.store.set_title(ctx.run_id, title)
    return {"ok": True, "title": " ".join(title.split())[:200], "changed": changed}
