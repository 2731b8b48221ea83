"""Runs, read for listing: ``dayflow runs``'s lines and JSON rows, and the dashboard's preview pane.

The dashboard's scrolling run list is ``views.run_list`` (paged, live); both
arrange forks with ``views.forks`` and word dollars with ``views.costs``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..store.models import Run

PREVIEW_TASKS = 8  # the preview pane lists this many of a run's tasks (and says when there are more)


@dataclass(frozen=True)
class RunLine:
    """A run as ``dayflow runs`` lists it: where it sits in the fork tree, its status now, what it cost."""

    run: Run
    status: str  # the status shown (a running run whose owner died is interrupted)
    depth: int  # 0, or how deep a fork sits under a listed parent
    cost: object  # a money.cost.RunCost
    rollup: object = None  # ``runs --tree``: a views.run_tree.Rollup of the subagent tree under it, if any


def run_lines(store, *, limit: int, status: str | None = None, source: str | None = None) -> tuple[RunLine, ...]:
    """The newest ``limit`` runs (of ``status``, from ``source``), forks under their parents, with their costs."""
    from ..money.cost import run_costs
    from ..store import effective_status
    from .forks import arrange

    runs = store.list_runs(limit=limit, status=[status] if status else None, source=source)
    if status in ("running", "interrupted"):
        runs = [r for r in runs if effective_status(r) == status]  # liveness is not in SQL
    costs = run_costs(store, [r.id for r in runs])
    return tuple(RunLine(run, effective_status(run), depth, costs[run.id])
                 for run, depth in arrange(runs).with_depth())


def tree_lines(store, *, limit: int, status: str | None = None, source: str | None = None
               ) -> tuple[RunLine, ...]:
    """``runs --tree``: the newest ``limit`` runs, each subagent run under the run whose call started it (read
    whole, however far down the list it would be), forks under their parents as ``run_lines`` places them,
    and each parent's roll-up (``views.run_tree``)."""
    from ..store import effective_status
    from .forks import arrange
    from .run_tree import read_subtrees, roll_up

    runs = store.list_runs(limit=limit, status=[status] if status else None, source=source)
    if status in ("running", "interrupted"):
        runs = [r for r in runs if effective_status(r) == status]
    listed = {r.id for r in runs}
    # A subagent run is listed under its parent's tree when the parent is listed; on its own otherwise.
    tops = [r for r in runs if not (r.parent_call_id and r.parent_id in listed)]
    trees = read_subtrees(store, tops)
    lines: list[RunLine] = []
    for run, depth in arrange(tops).with_depth():
        tree = trees[run.id]
        for node, below in tree.walk():
            rollup = roll_up(node) if node.children else None
            lines.append(RunLine(node.run, node.status, depth + below, node.cost, rollup))
    return tuple(lines)


def run_json(line: RunLine) -> dict:
    """One run of ``dayflow runs --json``."""
    from ..money.cost import run_cost_json
    from .titles import is_given, run_title

    r = line.run
    return {"id": r.id, "title": run_title(r), "title_given": is_given(r), "status": line.status,
            "stored_status": r.status, "created_at": r.created_at,
            "updated_at": r.updated_at, "steps": r.step_count, "input_tokens": r.input_tokens,
            "output_tokens": r.output_tokens, "cache_write_tokens": r.cache_creation_tokens,
            "cache_read_tokens": r.cache_read_tokens, "model": r.model, "compact_at": r.compact_at,
            **run_cost_json(line.cost, r.budget_usd), "error": r.error, "parent_id": r.parent_id,
            "forked_at": r.forked_at, "parent_call_id": r.parent_call_id, "agent": r.agent or "brief",
            "priority": r.priority or 0,
            "cancel": None if r.cancel_at is None else {"at": r.cancel_at, "by": r.cancelled_by,
                                                        "reason": r.cancel_reason},
            "source": r.source or "dayflow",
            "session": None if (r.source or "dayflow") == "dayflow" else {
                "id": r.external_id, "dir": r.external_dir, "git_branch": r.external_branch}}


def tree_run_json(line: RunLine) -> dict:
    """One run of ``dayflow runs --tree --json``: ``run_json`` with its depth and its tree's roll-up."""
    from .run_tree import rollup_json

    return {**run_json(line), "depth": line.depth, "tree": rollup_json(line.rollup)}


@dataclass(frozen=True)
class Preview:
    """The run list's preview pane: the run, its first tasks, and its dollars."""

    run: Run
    tasks: tuple
    cost: object  # Decimal, or None: some call has no price


def read_preview(store, run_id: str, *, tasks: int = PREVIEW_TASKS) -> Preview:
    """Everything the pane shows, in one go (on the dashboard's reader thread)."""
    from ..money.cost import run_cost

    run = store.get_run(run_id)
    return Preview(run, tuple(store.list_tasks(include_done=True, run_id=run.id)[:tasks + 1]),
                   run_cost(store, run.id).total)


def claude_resume_command(run: Run) -> str:
    """The shell command that continues an imported Claude Code session where it was made (its directory quoted)."""
    import shlex

    session = shlex.quote(run.external_id or "")
    return f"cd {shlex.quote(run.external_dir)} && claude --resume {session}" if run.external_dir \
        else f"claude --resume {session}"
