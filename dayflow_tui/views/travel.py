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


# How each row of a diff is worded, in `dayflow diff` and on the dashboard's diff screen alike.
STATE_WORD = {"shared": "shared", "same": "same", "results_differ": "results differ", "differs": "differs",
              "only_a": "only in A", "only_b": "only in B"}
ALIKE = ("shared", "same")


def headline(diff) -> str:
    """Where the two runs part, worded from the rows themselves: the first row not ``same``/``shared`` is the
    first difference, with that row's own word; when the model's turn first differs later, that step too."""
    first = next((step for step in diff.steps if step.state not in ALIKE), None)
    if first is None:
        return "no difference"
    line = f"first difference at step {first.n} ({STATE_WORD[first.state]})"
    if first.state == "results_differ":
        turned = diff.first_divergence
        line += (f"; the model's turn first differs at step {turned}" if turned
                 else "; the model's turns are the same")
    return line
