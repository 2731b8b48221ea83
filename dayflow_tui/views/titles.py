"""A run's title as every front end shows it: the one it was given, else one made from its task and answer.

A title is given by the run's agent (``Agent(title=...)``) or by its model through the
``set_title`` tool, and kept in the run row. A run without one is titled here, the same
way each time, from what the row holds: the first line of the task, and once the run is
done, the first line of its answer after an arrow. Nothing is stored for it.

Every title is untrusted text (a task, a model's words): what this returns is one
printable line, with control characters shown as escapes; a front end still draws it
as text, never as markup.
"""

from __future__ import annotations

from ..safe_text import one_line
from ..store.models import Run

WIDTH = 200  # characters at most: a column cuts it further to the room it has
TASK_WITH_ANSWER = 24  # characters of the task a made title keeps before the answer
ARROW = " → "


def first_line(text: str | None) -> str:
    """The first line of ``text`` that holds something, trimmed ("" for none)."""
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def answer_head(answer: str | None) -> str:
    """An answer's first line; a heading ("## Today") with the line after it ("Today: 09:30 Standup")."""
    lines = [line.strip() for line in (answer or "").splitlines() if line.strip()]
    if not lines:
        return ""
    head = lines[0].lstrip("#*- ").strip()
    if lines[0].startswith("#") and len(lines) > 1:
        return f"{head}: {lines[1].lstrip('#*- ').strip()}"
    return head


def made_title(task: str | None, answer: str | None = None, width: int = WIDTH) -> str:
    """The title of a run given none: its task's first line, then its answer's (when done).

    With an answer the task gives up all but ``TASK_WITH_ANSWER`` characters: runs of one task
    are told apart by what they answered, and a column cuts a title from the right.
    """
    task_line, answer_line = first_line(task), answer_head(answer)
    if not answer_line:
        return one_line(task_line or "(no task)", width)
    task_part = one_line(task_line or "(no task)", min(TASK_WITH_ANSWER, max(width // 2, 8)))
    return task_part + ARROW + one_line(answer_line, max(width - len(task_part) - len(ARROW), 1))


def run_title(run: Run, width: int = WIDTH) -> str:
    """What ``run`` is called in the run list, ``dayflow runs``, ``show`` and search results."""
    given = getattr(run, "title", None)
    if given and given.strip():
        return one_line(" ".join(given.split()), width)
    # A listed run carries the head of its answer only (store list_runs: ``final_head``).
    answer = (getattr(run, "final_text", None) or getattr(run, "final_head", None)) if run.status == "done" else None
    return made_title(run.user_msg, answer, width)


def is_given(run: Run) -> bool:
    """Whether the title was given (by the agent or its model) rather than made here."""
    return bool((getattr(run, "title", None) or "").strip())


def titles_of(store, run_ids, limit: int = 200) -> dict[str, str]:
    """The titles of these runs (search results name each run by it); a run gone since is left out."""
    from ..config.errors import RunNotFound

    titles: dict[str, str] = {}
    for run_id in dict.fromkeys(run_ids):
        if len(titles) >= limit:
            break
        try:
            titles[run_id] = run_title(store.get_run(run_id))
        except RunNotFound:
            continue
    return titles
