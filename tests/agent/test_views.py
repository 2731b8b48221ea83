"""The read layer both front ends print from (``dayflow_tui.views``).

``dayflow runs`` (the real console script) and the dashboard's run list
(its read model, as the screen gets it) must show the same fork tree, and
every span of time must read the same in the CLI, the dashboard and the
next call's cache note. Nothing in ``views`` may import Textual.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta

import pytest

from dayflow_tui import clock
from dayflow_tui.views import forks, time as time_text
from dayflow_tui.views.run_list import RunFilter, RunListModel

from ..reliability_helpers import cli_env, dayflow, text


@dataclass(frozen=True)
class Row:
    id: str
    parent_id: str | None = None


def ids(tree: forks.ForkTree) -> list[tuple[str, int]]:
    return [(run.id, depth) for run, depth in tree.with_depth()]


# -- the fork tree -------------------------------------------------------------------------------------


def _lineage(store) -> dict[str, str]:
    """A run, two forks of it, a fork of the first fork, and a newer run: their ids by role."""
    from dayflow_tui.agent import runs
    from dayflow_tui.store.tables.forks import ForkPlan

    from ..conftest import CountingClient

    parent = runs.run_brief(store, client=CountingClient()).run_id
    first = store.fork_run(parent, ForkPlan(at=1)).id
    second = store.fork_run(parent, ForkPlan(at=2)).id
    grandchild = store.fork_run(first, ForkPlan(at=1)).id
    newest = runs.run_brief(store, client=CountingClient()).run_id
    return dict(parent=parent, first=first, second=second, grandchild=grandchild, newest=newest)


def test_the_cli_and_the_dashboard_list_the_same_fork_tree(store, db_target):
    runs = _lineage(store)
    expected = [(runs["newest"], 0), (runs["parent"], 0), (runs["first"], 1), (runs["grandchild"], 2),
                (runs["second"], 1)]
    # The dashboard: the run list's read model, as the screen receives it.
    window = RunListModel(store).reload(RunFilter())
    assert [(run.id, window.depth.get(run.id, 0)) for run in window.shown] == expected
    assert window.forks == {runs["parent"]: 2, runs["first"]: 1}
    # The CLI: the real console script, its indentation read back into depths.
    listing = text(dayflow("runs", db=db_target, env=cli_env()).stdout).splitlines()
    printed = []
    for line in listing:
        indent, _, rest = line.rpartition("└─ ")
        printed.append((rest.split()[0], len(indent) // 2 + 1 if _ else 0))
    assert printed == expected


def test_the_cli_and_the_dashboard_fold_no_fork_away_unasked_and_both_fold_the_same_way():
    rows = [Row("n"), Row("f2", "p"), Row("g", "f1"), Row("f1", "p"), Row("p")]
    tree = forks.arrange(rows)
    assert ids(tree) == [("n", 0), ("p", 0), ("f1", 1), ("g", 2), ("f2", 1)]
    assert tree.forks == {"p": 2, "f1": 1} and tree.hidden == 0
    folded = forks.arrange(rows, folded=frozenset({"p"}))
    assert ids(folded) == [("n", 0), ("p", 0)] and folded.hidden == 3
    inner = forks.arrange(rows, folded=frozenset({"f1"}))
    assert ids(inner) == [("n", 0), ("p", 0), ("f1", 1), ("f2", 1)] and inner.hidden == 1


def test_a_fork_whose_parent_is_not_listed_is_a_root_and_pinned_rows_stay_on_top():
    rows = [Row("w", "p"), Row("f", "gone"), Row("p"), Row("c", "p")]
    tree = forks.arrange(rows, pinned=1)  # "w" waits for a person: pinned on top, never moved under "p"
    assert ids(tree) == [("w", 0), ("f", 0), ("p", 0), ("c", 1)]


def test_damaged_lineage_drops_no_run():
    """A run naming itself, or two naming each other (a damaged or imported row), is still listed once."""
    rows = [Row("a", "b"), Row("b", "a"), Row("s", "s"), Row("r")]
    tree = forks.arrange(rows)
    assert sorted(run.id for run in tree.rows) == ["a", "b", "r", "s"]
    assert len(tree.rows) == 4 and tree.with_depth()[0] == (rows[3], 0)


# -- one way to write a span of time -------------------------------------------------------------------


@pytest.mark.parametrize("seconds, written", [(0, "0s"), (45.9, "45s"), (130, "2m 10s"), (3900, "1h 05m"),
                                              (2 * 86400 + 3 * 3600, "2d 3h"), (-5, "0s")])
def test_one_duration_everywhere(seconds, written):
    from dayflow_tui.tui import formatting

    assert time_text.duration(seconds) == clock.duration(seconds) == written
    if seconds >= 10:
        assert formatting.seconds(seconds) == time_text.gap(seconds) == written  # the dashboard's step gaps
    assert formatting.ago is time_text.ago and formatting.started is time_text.started


def test_the_next_calls_cache_note_writes_its_span_the_same_way():
    from dayflow_tui.money.estimate import NextCall

    call = NextCall(model="m", messages=3, input_tokens=1000, counted=False, cached_prefix_tokens=900, ttl="5m",
                    seconds_since_last=130.0, expected_output_tokens=100, max_output_tokens=1000, prices=None)
    assert call.cache_note() == f"warm: last call {time_text.duration(130)} ago, lifetime 5m"


def test_gaps_ages_and_moments(monkeypatch):
    monkeypatch.setenv("DAYFLOW_FAKE_NOW", "2026-12-02T14:00:00+00:00")
    assert time_text.gap(None) == "—" and time_text.gap(0.74) == "0.7s"
    assert time_text.ago("2026-12-02T13:59:18.000Z") == "42s ago"
    assert time_text.ago("2026-12-02T11:00:00.000Z") == "3h ago"
    assert time_text.ago("2026-11-30T14:00:00.000Z") == "2d ago"
    assert time_text.ago("not a time") == "" and time_text.ago(None) == ""
    assert time_text.started("2026-12-02T13:54:47.123Z") == "2026-12-02 13:54:47"
    assert time_text.started("\x1b[31mred") == "\\x1b[31mred"  # a damaged row is shown as text
    assert time_text.age_words(timedelta(days=30)) == "30 days"
    assert time_text.age_words(timedelta(weeks=1)) == "1 week"
    assert time_text.age_words(timedelta(seconds=45)) == "45 seconds"


def test_prune_says_the_age_as_views_write_it(db_path):
    assert dayflow("brief", db=str(db_path), env=cli_env()).returncode == 0
    result = dayflow("prune", "--older-than", "90m", db=str(db_path), env=cli_env())
    assert result.returncode == 0, text(result.stderr)
    assert f"more than {time_text.age_words(timedelta(minutes=90))} ago" in text(result.stderr)


# -- costs: one set of words -----------------------------------------------------------------------------


def test_spend_in_the_cli_and_on_the_dashboard_are_the_same_sums(store, db_target):
    import json

    from dayflow_tui.views.costs import read_spend, spend_summary

    _lineage(store)
    table = read_spend(store, by="model")
    printed = json.loads(dayflow("spend", "--json", db=db_target, env=cli_env()).stdout)
    assert printed["total"]["calls"] == table.total.calls > 0
    assert printed["total"]["cost_usd"] == pytest.approx(float(table.total.cost.total))
    assert spend_summary(store).startswith("spend: today ")


# -- no Textual below the screens ------------------------------------------------------------------------


def test_views_never_import_textual():
    code = ("import sys, pkgutil, importlib, dayflow_tui.views as v\n"
            "for m in pkgutil.iter_modules(v.__path__): importlib.import_module('dayflow_tui.views.' + m.name)\n"
            "bad = sorted(n for n in sys.modules if n == 'textual' or n.startswith('textual.'))\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
