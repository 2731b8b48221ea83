"""Two runs compared step by step: ``dayflow diff`` and the dashboard's diff screen read it here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Compared:
    a: object  # the two stored runs (ids given as prefixes are resolved)
    b: object
    diff: object  # agent.run_diff.RunDiff


def read_diff(store, run_a: str, run_b: str) -> Compared:
    from ..agent.run_diff import diff_runs

    a, b = store.get_run(run_a), store.get_run(run_b)
    return Compared(a, b, diff_runs(a, store.steps(a.id), b, store.steps(b.id)))
