"""The diff's headline is worded from the rows it sits above (issue #30)."""

from __future__ import annotations

from dayflow_tui.agent.run_diff import RunDiff, StepDiff
from dayflow_tui.views.travel import ALIKE, STATE_WORD, headline


def _diff(*states: str, first_divergence: int | None) -> RunDiff:
    return RunDiff("a", "b", 0, [StepDiff(n, state) for n, state in enumerate(states, start=1)], first_divergence,
                   ((0, 0), (0, 0)), (len(states), len(states)))


def test_the_headline_names_the_first_row_that_differs():
    cases = [
        (("results_differ", "results_differ", "differs"), 3,
         "first difference at step 1 (results differ); the model's turn first differs at step 3"),
        (("shared", "same", "differs"), 3, "first difference at step 3 (differs)"),
        (("same", "same"), None, "no difference"),
        (("same", "results_differ"), None, "first difference at step 2 (results differ); the model's turns are the same"),
        (("shared", "only_b"), 2, "first difference at step 2 (only in B)"),
    ]
    for states, first, said in cases:
        diff = _diff(*states, first_divergence=first)
        assert headline(diff) == said, states
        first_row = next((s for s in diff.steps if s.state not in ALIKE), None)
        if first_row is not None:  # what the header names is what that row is marked
            assert f"step {first_row.n} ({STATE_WORD[first_row.state]})" in said
