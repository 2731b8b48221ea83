"""`dayflow show` and `dayflow runs --tree` on a tree made by really running a parent agent with subagents
(the loopback API answers each agent of ``tests/subagent_tree.py``): the real console script, read back."""

from __future__ import annotations

import json

import pytest

from ..loopback_api import LoopbackAPI
from ..reliability_helpers import cli_env, dayflow
from ..subagent_tree import MODEL, tree_script, write_agent


@pytest.fixture(scope="module")
def tree_db(tmp_path_factory):
    """The writer run through `dayflow run`: a researcher child (with a checker grandchild), a failed checker."""
    directory = tmp_path_factory.mktemp("tree")
    db = directory / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: tree_script for n in range(1, 50)}
        done = dayflow("run", write_agent(directory), "--model", MODEL, db=db,
                       env=cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0"))
        assert done.returncode == 0, done.stderr
        calls = api.calls
    listed = json.loads(dayflow("runs", "--json", db=db).stdout)
    (parent,) = [r for r in listed if r["parent_id"] is None]
    by_call = {r["parent_call_id"]: r for r in listed if r["parent_call_id"]}
    return db, parent, by_call, calls


def _out(*args, db):
    done = dayflow(*args, db=db)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def test_show_names_each_calls_child_and_prints_the_tree_rolled_up(tree_db):
    db, parent, by_call, calls = tree_db
    researcher, checker, grandchild = (by_call[c] for c in ("toolu_research01", "toolu_check01", "toolu_verify01"))
    assert calls == 7  # 6 committed steps over the tree, and the refused call (no step, no charge)
    out = _out("show", parent["id"], "--no-pager", db=db)
    # The tree at the top: 4 runs, 6 steps, the dollars of all of them, and the failed child at the parent.
    total = sum(r["cost_usd"] for r in (parent, researcher, checker, grandchild))
    assert f"tree 4 runs · 6 steps · ${total:.4f} · worst ✖ failed" in out
    assert f"  └─ {researcher['id']}  researcher  ✔ done  2 steps  ${researcher['cost_usd']:.4f}" in out
    assert f"     └─ {grandchild['id']}  checker  ✔ done  1 step  " in out
    assert f"  └─ {checker['id']}  checker  ✖ failed  0 steps  $0.00" in out
    # Each subagent call names its child, under the call.
    lines = out.splitlines()
    at = lines.index('  -> researcher({"task": "Lisbon\'s weather today"})')
    assert lines[at + 2] == f"     ↳ subagent run {researcher['id']}  researcher  ✔ done  2 steps  " \
                            f"${researcher['cost_usd']:.4f}"
    assert f"     ↳ subagent run {checker['id']}  checker  ✖ failed  0 steps  $0.00" in lines
    assert "\x1b" not in out  # the child's answer carries an escape code: never written to the terminal


def test_show_of_a_child_says_which_call_started_it(tree_db):
    db, parent, by_call, _calls = tree_db
    researcher = by_call["toolu_research01"]
    out = _out("show", researcher["id"], "--no-pager", db=db)
    assert f"a subagent's run: started by call toolu_research01 of run {parent['id']}" in out
    assert "fork of" not in out
    assert "tree 2 runs · 3 steps" in out
    assert "[bold]21 C[/]" in out and "\\x1b[31m" in out and "\x1b" not in out  # shown literally


def test_show_json_carries_the_tree_and_each_calls_child(tree_db):
    db, parent, by_call, _calls = tree_db
    doc = json.loads(_out("show", parent["id"], "--json", db=db))
    assert doc["run"]["id"] == parent["id"]
    tree = doc["tree"]
    assert [c["id"] for c in tree["children"]] == [by_call["toolu_research01"]["id"], by_call["toolu_check01"]["id"]]
    assert tree["children"][0]["children"][0]["id"] == by_call["toolu_verify01"]["id"]
    assert doc["tree_rollup"]["runs"] == 4 and doc["tree_rollup"]["steps"] == 6
    assert doc["tree_rollup"]["worst_status"] == "failed"
    assert doc["tree_rollup"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in [parent, *by_call.values()]))
    started = {n: step.get("subagent_runs") for n, step in enumerate(doc["steps"], 1)}
    assert started[1] == {"toolu_research01": {
        "id": by_call["toolu_research01"]["id"], "agent": "researcher", "status": "done", "steps": 2,
        "parent_call_id": "toolu_research01", "cost_usd": by_call["toolu_research01"]["cost_usd"]}}
    assert started[2]["toolu_check01"]["status"] == "failed" and started[3] is None
    raw = _out("show", by_call["toolu_research01"]["id"], "--json", db=db)
    assert "\x1b" not in raw and "\\u001b[31m" in raw  # the escape stays escaped in JSON


def test_runs_tree_nests_children_and_rolls_up_cost_and_status_at_the_parent(tree_db):
    db, parent, by_call, _calls = tree_db
    out = _out("runs", "--tree", db=db)
    lines = out.splitlines()
    assert lines[0].startswith(f"{parent['id']}  done ") and "tree: 4 runs · 6 steps · $" in lines[0]
    assert lines[0].split("tree: ")[1].split("  ·")[0].endswith("worst ✖ failed")  # done, yet a child failed
    assert lines[1].startswith(f"└─ {by_call['toolu_research01']['id']}  done ") and "subagent" in lines[1]
    assert "tree: 2 runs · 3 steps" in lines[1] and "worst" not in lines[1].split("tree: ")[1].split("  ·")[0]
    assert lines[2].startswith(f"  └─ {by_call['toolu_verify01']['id']}  done ")
    assert lines[3].startswith(f"└─ {by_call['toolu_check01']['id']}  failed ")
    assert "\x1b" not in out
    rows = json.loads(_out("runs", "--tree", "--json", db=db))
    assert [(r["id"], r["depth"]) for r in rows] == [
        (parent["id"], 0), (by_call["toolu_research01"]["id"], 1), (by_call["toolu_verify01"]["id"], 2),
        (by_call["toolu_check01"]["id"], 1)]
    assert rows[0]["tree"]["worst_status"] == "failed" and rows[0]["tree"]["runs"] == 4
    assert rows[2]["tree"] is None
    # A listed parent brings its whole tree, the failed child too, although the filter leaves that one out.
    done_only = json.loads(_out("runs", "--tree", "--json", "--status", "done", db=db))
    assert [r["id"] for r in done_only] == [r["id"] for r in rows]
    assert [r["id"] for r in json.loads(_out("runs", "--json", "--status", "done", db=db))].count(
        by_call["toolu_check01"]["id"]) == 0


def test_a_child_waiting_for_a_decision_shows_at_the_parent_row(tmp_path):
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: tree_script for n in range(1, 50)}
        done = dayflow("run", write_agent(tmp_path, "editor"), "--model", MODEL, db=db,
                       env=cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0"))
        assert done.returncode == 0, done.stderr
    rows = json.loads(_out("runs", "--tree", "--json", db=db))
    assert [(r["agent"], r["depth"], r["status"]) for r in rows][1:] == [("publisher", 1, "waiting")]
    editor = rows[0]
    assert editor["agent"] == "editor" and editor["tree"]["worst_status"] == "waiting"
    parent_line = _out("runs", "--tree", db=db).splitlines()[0]
    assert parent_line.startswith(editor["id"])
    # The parent's own status, or the tree's worst beside it: either way the row says a run waits.
    assert editor["status"] == "waiting" or "worst ⏸ waiting" in parent_line
