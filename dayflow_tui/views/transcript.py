"""A run's transcript, read: the run, its steps as views, what it cost; for the screen and ``dayflow show``.

The dashboard's transcript asks ``read_transcript`` on its reader thread at
every live tick, handing back what it already holds, so only the steps read
again are decoded (a 5,000-step run re-decoded every step on each commit);
``dayflow show`` reads the run with ``read_show`` and its steps a page at a time (``show_pages``), written as
each page is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

from ..agent.transcript import StepView, attach_decisions, build_steps
from .mcp_tools import mcp_hints_text, recorded_mcp_tools
from ..testhook import pause_point
from ..store.models import Run


@dataclass(frozen=True)
class TranscriptRead:
    """What the reader found: the run, its steps so far, and their views when they changed."""

    marker: tuple
    run: Run
    steps: tuple[tuple[int, bool], ...]  # (n, has its tool results) of every step read, in order
    views: list[StepView] | None
    steps_changed: bool
    pending: tuple = ()  # views.pending.PendingCall: the calls the run waits on a person for
    # The subagent runs its calls started (views.run_tree.TreeNode by the call's id) and its tree's roll-up
    # (None: no call of it started one). Read at every change: a child moves while its parent waits on it.
    children: Mapping[str, object] = field(default_factory=dict)
    tree: object = None


def read_transcript(store, run_id: str, *, known: tuple[tuple[int, bool], ...] = (),
                    known_views: Sequence[StepView] = (), marker: tuple | None = None,
                    if_changed: bool = False) -> TranscriptRead | None:
    """The run and the steps that changed since ``known`` (None: nothing committed since ``marker``).

    ``known`` holds (n, has its tool results) per step read before, and
    ``known_views`` their views: the last known step is read again (its tool
    results may have arrived), the ones before it are kept as they are.
    """
    now = store.change_marker()
    if if_changed and now == marker:
        return None
    run = store.get_run(run_id)
    from_n = known[-1][0] if known else None
    fresh = store.steps(run.id, from_n=from_n)
    kept = [key for key in known if from_n is None or key[0] < from_n]
    steps = tuple(kept) + tuple((row.n, row.tool_results is not None) for row in fresh)
    changed = steps != known
    views = None
    approvals = getattr(store, "approvals", None)
    decided = approvals(run.id) if approvals is not None else []
    if changed or decided:
        reusable = len(known_views) >= len(kept) and all(
            known_views[i].n == kept[i][0] for i in {0, len(kept) - 1} if kept)
        if reusable:
            base = list(known_views[:len(kept)])
            views = base + build_steps(fresh, run.model, after=base[-1] if base else None)
        else:  # the views do not match what was read (a fork, a damaged read): decode them all
            everything = store.steps(run.id)
            steps = tuple((row.n, row.tool_results is not None) for row in everything)
            views = build_steps(everything, run.model)
        attach_decisions(views, decided)
        attach_mcp(views, run)
    from .pending import pending_calls
    from .run_tree import read_subtrees, roll_up

    tree = read_subtrees(store, [run])[run.id]
    return TranscriptRead(now, run, steps, views, changed or bool(decided), pending_calls(run, decided),
                          tree.child_for_call(), roll_up(tree) if tree.children else None)


def attach_mcp(views: Sequence[StepView], run: Run) -> None:
    """Give each call of an MCP tool its server and its recorded hints (the run's ``agent_shape``)."""
    listed = recorded_mcp_tools(run)
    if not listed:
        return
    hints = {name: mcp_hints_text(facts) for name, facts in listed.items()}
    for view in views:
        for call in view.calls:
            facts = listed.get(call.name)
            if facts is not None:
                call.server, call.hints = facts["server"], hints[call.name]


@dataclass(frozen=True)
class ShownRun:
    """What ``dayflow show`` prints before the steps (``show_pages``): the run, its cost, resumes and decisions."""

    run: Run
    cost: object  # a RunCost
    resumes: tuple
    approvals: tuple
    status: str = ""  # the status shown, as `dayflow runs` and the dashboard word it (interrupted, not running)
    title: str = ""  # views.titles.run_title: given, or made from the task and the answer
    tree: object = None  # views.run_tree.TreeNode: the run and the subagent runs under it


def read_show(store, run_id: str) -> ShownRun:
    from ..store import effective_status
    from ..store.tables.resumes import run_resumes
    from .run_tree import read_tree
    from .titles import run_title

    tree = read_tree(store, run_id)
    run = tree.run
    return ShownRun(run, tree.cost, tuple(run_resumes(store, run.id)),
                    tuple(store.approvals(run.id)), effective_status(run), run_title(run), tree)


# The first page is small, so the first screen of a long run is written at once; later ones amortise the reads.
FIRST_PAGE, PAGE = 25, 500


def show_pages(store, run_id: str) -> Iterator[list]:
    """The run's steps, in order, a page at a time: each read only when the one before has been written."""
    size, from_n = FIRST_PAGE, 1
    while True:
        pause_point("show-page")  # a test sees how many pages were read when the first screen came
        page = store.steps(run_id, from_n=from_n, limit=size)
        if page:
            yield page
        if len(page) < size:
            return
        from_n, size = page[-1].n + 1, PAGE


# ``show --follow``: how often the change marker is polled while nothing pushes commits (SQLite, or a
# PostgreSQL change feed that is down), and how often as a safety net while the feed is live.
FOLLOW_POLL_S = 0.5
FOLLOW_SAFETY_POLL_S = 5.0


def follow_pages(store, run: Run, feed) -> Iterator[list]:
    """``dayflow show --follow``: the run's steps, then each new one as it commits, until the run has ended.

    A step that asked for tools is given once its results are stored (or the run ended without them), so it
    is printed whole. ``feed`` (``store.change_feed``, started) wakes the wait at once where the database
    pushes commits; the change marker is read either way, so a feed that is down costs only promptness.
    When the run has ended, ``run`` (the row the header was printed from) takes its final text, error
    and status, for the transcript's ending.
    """
    from ..store.status import ENDED

    last = 0
    while True:
        marker = store.change_marker()
        current = store.get_run(run.id)
        ended = current.status in ENDED
        fresh = store.steps(run.id, from_n=last + 1, limit=PAGE)
        ready = []
        for step in fresh:
            if step.tool_results is None and step.stop_reason == "tool_use" and not ended:
                break  # its tools run now: printed with their results
            ready.append(step)
        if ready:
            last = ready[-1].n
            yield ready
        if len(fresh) == PAGE and len(ready) == PAGE:
            continue  # more stored than one page: read on before waiting
        if ended and len(ready) == len(fresh):
            run.final_text, run.error, run.status = current.final_text, current.error, current.status
            return
        while store.change_marker() == marker:
            feed.wait(FOLLOW_SAFETY_POLL_S if feed.live else FOLLOW_POLL_S)
