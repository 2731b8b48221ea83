"""A run's subagent tree, read and rolled up: one roll-up for ``dayflow show``, ``dayflow runs --tree`` and the
dashboard.

A subagent's run is a run of its own (``parent_id`` and the ``parent_call_id`` of the call that started it):
its own steps, status and dollars. What a person asks of a parent is the whole tree's: what it cost, and
whether anything under it failed or waits for a decision although the parent looks fine. ``roll_up`` says
that, from a ``TreeNode`` read here (``read_tree``) or, for a list of runs, ``read_rollups``. Forks are
not part of a tree (a fork is a run a person started, listed under its parent by ``views.forks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Iterable

from ..money.cost import NO_CALLS, RunCost, add_costs, run_costs, usd_number
from ..store import RunStatus, effective_status
from ..store.models import Run

# The worst first: what needs a person, then what stopped, then what still moves, then what ended well.
# A status Dayflow never wrote (a damaged row) ranks below them all: shown as it is, never the tree's word.
SEVERITY = ("waiting", "failed", "budget", "interrupted", "cancelled", "running", "queued", "forked", "done")
_RANK = {status: i for i, status in enumerate(SEVERITY)}
MAX_DEPTH = 32  # a tree deeper than this (a damaged row pointing in a circle) is read no further


def worse(a: str, b: str) -> str:
    """The worse of two shown statuses (``SEVERITY``)."""
    return a if _RANK.get(a, len(SEVERITY)) <= _RANK.get(b, len(SEVERITY)) else b


@dataclass(frozen=True)
class TreeNode:
    """A run in its tree: its shown status, its own cost, and the subagent runs its calls started."""

    run: Run
    status: str
    cost: RunCost
    children: tuple["TreeNode", ...] = ()

    def walk(self, depth: int = 0) -> Iterable[tuple["TreeNode", int]]:
        """Every node, parent before its children (oldest first), with its depth under this one."""
        yield self, depth
        for child in self.children:
            yield from child.walk(depth + 1)

    def child_for_call(self) -> dict[str, "TreeNode"]:
        """The child each of this run's calls started, by the call's id (the ``tool_use`` block's id)."""
        return {child.run.parent_call_id: child for child in self.children if child.run.parent_call_id}


@dataclass(frozen=True)
class Rollup:
    """A tree summed: how many runs, steps, the dollars (None: some call has no price) and the worst status."""

    runs: int
    steps: int
    total: Decimal | None
    worst: str
    own_status: str  # the root's own status, to tell "done, but a child failed" from "failed"

    @property
    def differs(self) -> bool:
        """Does the tree say something the root's own status does not (a child failed, one waits)?"""
        return self.worst != self.own_status


def roll_up(node: TreeNode) -> Rollup:
    """The tree under ``node`` (itself included) summed: the one roll-up every front end shows."""
    nodes = [n for n, _depth in node.walk()]
    worst = node.status
    for n in nodes:
        worst = worse(worst, n.status)
    steps = sum(n.run.step_count if isinstance(n.run.step_count, int) else 0 for n in nodes)
    cost = add_costs(n.cost.cost for n in nodes)
    return Rollup(len(nodes), steps, None if cost is None else cost.total, worst, node.status)


def read_tree(store, run_id: str) -> TreeNode:
    """The run and every subagent run under it (one query per level), with their costs."""
    root = store.get_run(run_id)
    return read_subtrees(store, [root])[root.id]


def read_rollups(store, runs: Iterable[Run]) -> dict[str, Rollup]:
    """The roll-up of each of ``runs`` that has subagent runs under it (the others are their own row)."""
    trees = read_subtrees(store, list(runs), lone_costs=False)
    return {run_id: roll_up(tree) for run_id, tree in trees.items() if tree.children}


def read_subtrees(store, roots: list[Run], *, lone_costs: bool = True) -> dict[str, TreeNode]:
    """Each root's tree: its descendants read a level at a time (each run asked about once), their costs in
    one query. A root may be under another root too (a list holds parents and children): each gets its tree.
    ``lone_costs=False``: a root without children is left at no cost (a caller that rolls up trees only; the
    run list has its rows' costs already: reading them again took most of this function's time)."""
    kids: dict[str, list[Run]] = {}
    runs = {run.id: run for run in roots}
    level = list(runs)
    asked: set[str] = set()
    for _ in range(MAX_DEPTH):
        level = [run_id for run_id in dict.fromkeys(level) if run_id not in asked]
        if not level:
            break
        asked.update(level)
        found = store.subagents_of(level)
        level = []
        for parent_id, children in found.items():
            kids[parent_id] = children
            for child in children:
                runs.setdefault(child.id, child)
                level.append(child.id)
    under = {child.id for children in kids.values() for child in children}
    priced = [run_id for run_id in runs if lone_costs or kids.get(run_id) or run_id in under]
    costs = run_costs(store, priced) if priced else {}

    def node(run: Run, above: frozenset) -> TreeNode:
        # ``above``: the runs on the way down; a damaged row naming one of them is not followed round again.
        under = tuple(node(child, above | {child.id}) for child in kids.get(run.id, ()) if child.id not in above)
        return TreeNode(run, effective_status(run), costs.get(run.id, NO_CALLS), under)

    return {run.id: node(run, frozenset({run.id})) for run in roots}


def tree_json(node: TreeNode) -> dict:
    """A node as data: the run's id, agent, status, steps and cost, the call that started it, its children."""
    run = node.run
    return {"id": run.id, "agent": run.agent or "brief", "status": node.status, "steps": run.step_count,
            "parent_call_id": run.parent_call_id, "cost_usd": usd_number(node.cost.total),
            "children": [tree_json(child) for child in node.children]}


def rollup_json(rollup: Rollup | None) -> dict | None:
    if rollup is None:
        return None
    return {"runs": rollup.runs, "steps": rollup.steps, "cost_usd": usd_number(rollup.total),
            "worst_status": rollup.worst}


def status_word(status: str) -> str:
    """A status with its glyph (``✖ failed``); a word Dayflow never wrote (a damaged row) as it is."""
    try:
        return RunStatus(status).label
    except ValueError:
        return status


def rollup_text(rollup: Rollup) -> str:
    """The tree in a few words: ``4 runs · 6 steps · $0.0036 · worst ✖ failed`` (the worst only when it is
    not the root's own status: a parent done while a child failed says so)."""
    from .costs import cost_text

    text = f"{rollup.runs} runs · {rollup.steps} steps · {cost_text(rollup.total)}"
    return text + (f" · worst {status_word(rollup.worst)}" if rollup.differs else "")


def node_text(node: TreeNode) -> str:
    """One run of a tree: ``id  agent  ✔ done  2 steps  $0.0012`` (the caller makes it printable)."""
    from .costs import cost_text

    run = node.run
    steps = run.step_count
    return (f"{run.id}  {run.agent or 'brief'}  {status_word(node.status)}  "
            f"{steps} step{'' if steps == 1 else 's'}  {cost_text(node.cost.total)}")
