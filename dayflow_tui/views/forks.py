"""The fork tree: runs newest first, each fork listed under its parent, the oldest fork first.

One arrangement for both front ends: ``dayflow runs`` indents forks with
``└─`` and the dashboard's run list draws the same tree (and folds it). A
fork goes under its parent only when the parent is listed too; anything that
cannot be placed (a run naming itself, a cycle a damaged or imported row
makes) is listed after the trees, so no run listed is ever dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence


@dataclass(frozen=True)
class ForkTree:
    """Runs in the order shown, with where each fork sits."""

    rows: tuple = ()
    depth: Mapping[str, int] = field(default_factory=dict)  # forks only: 1 under a root run, 2 under a fork...
    forks: Mapping[str, int] = field(default_factory=dict)  # per listed parent: how many of its forks are listed
    hidden: int = 0  # runs left out because a run above them is folded

    def with_depth(self) -> list[tuple]:
        """``(run, depth)`` per row shown (0 for a run that is not under another)."""
        return [(run, self.depth.get(run.id, 0)) for run in self.rows]


def _parent(run) -> str | None:
    return getattr(run, "parent_id", None)


def has_forks(runs: Iterable) -> bool:
    return any(_parent(run) for run in runs)


def arrange(runs: Sequence, *, pinned: int = 0, folded: frozenset = frozenset()) -> ForkTree:
    """``runs`` (newest first) as a tree; the first ``pinned`` rows stay on top as they are.

    The forks of a run in ``folded`` are left out (counted in ``hidden``).
    """
    rows = list(runs)
    head, body = rows[:pinned], rows[pinned:]
    loaded = {run.id for run in body}
    children: dict[str, list] = {}
    for run in body:
        parent = _parent(run)
        if parent in loaded and parent != run.id:
            children.setdefault(parent, []).append(run)
    shown: list = list(head)
    depth: dict[str, int] = {}
    hidden = 0
    placed: set[str] = set()

    def place(run, level: int) -> None:
        nonlocal hidden
        if run.id in placed:
            return
        placed.add(run.id)
        shown.append(run)
        if level:
            depth[run.id] = level
        if run.id in folded:
            under = _tree_ids(run.id, children)
            hidden += len(under)
            placed.update(under)
            return
        for kid in reversed(children.get(run.id, [])):  # the oldest fork first under its parent
            place(kid, level + 1)

    for run in body:
        if _parent(run) in loaded:
            continue  # placed under its parent (or, naming itself or in a cycle, below)
        place(run, 0)
    for run in body:  # a cycle or a run naming itself comes after the trees, newest first
        if run.id not in placed:
            place(run, 0)
    forks = {parent: len(kids) for parent, kids in children.items()}
    return ForkTree(tuple(shown), depth, forks, hidden)


def _tree_ids(run_id: str, children: Mapping[str, list]) -> set[str]:
    found: set[str] = set()
    stack = list(children.get(run_id, []))
    while stack:
        run = stack.pop()
        if run.id not in found:
            found.add(run.id)
            stack.extend(children.get(run.id, []))
    return found
