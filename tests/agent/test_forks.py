"""Time travel (#14): fork a run at any step, change what the model saw, compare two runs.

The real SDK talks to a loopback server that records every request body, so
"the fork's first call is the one its parent made after step K" is checked
on the bytes sent. Every command is the real console script.
"""

from __future__ import annotations

import json

import pytest

from ..crash_harness import read_db
from ..loopback_api import LoopbackAPI
from ..reliability_helpers import cli_env, dayflow, text

MODEL = "claude-loopback-1"


def run_ids(db: str, env: dict) -> list[str]:
    return [r["id"] for r in json.loads(dayflow("runs", "--json", db=db, env=env).stdout)]


def steps_of(db: str, run_id: str) -> list[dict]:
    return [s for s in read_db(db).steps if s["run_id"] == run_id]


def ok(result):
    assert result.returncode == 0, text(result.stderr)
    assert "Traceback" not in text(result.stderr)
    return result


@pytest.mark.parametrize("at", [1, 2])
def test_a_fork_at_k_sends_exactly_what_its_parent_sent_after_step_k(backend, db_target, at):
    with LoopbackAPI() as api:
        env = cli_env(**api.env())
        ok(dayflow("brief", "--model", MODEL, db=db_target, env=env))
        [parent] = run_ids(db_target, env)
        parent_rows = steps_of(db_target, parent)
        parent_run = read_db(db_target).runs[0]
        sent_by_parent = api.requests[at]  # the parent's call for step at + 1
        fork = text(ok(dayflow("fork", parent, "--at", str(at), db=db_target, env=env)).stdout).strip()
        assert api.calls == 3  # forking calls nothing
        state = {r["id"]: r for r in read_db(db_target).runs}
        assert state[fork]["status"] == "forked" and state[fork]["parent_id"] == parent
        assert state[fork]["forked_at"] == at and state[fork]["step_count"] == at
        ok(dayflow("resume", fork, db=db_target, env=env))
        assert api.requests[3] == sent_by_parent  # the same messages, system, tools and model, byte for byte
        assert api.calls == 3 + (3 - at)  # only the steps after the fork point were bought
    state = {r["id"]: r for r in read_db(db_target).runs}
    assert state[fork]["status"] == "done"
    assert steps_of(db_target, parent) == parent_rows  # the parent is untouched, row for row
    assert {k: v for k, v in state[parent].items() if k != "updated_at"} == \
        {k: v for k, v in parent_run.items() if k != "updated_at"}
    copies = steps_of(db_target, fork)[:at]
    for mine, theirs in zip(copies, parent_rows):
        assert {k: v for k, v in mine.items() if k != "run_id"} == {k: v for k, v in theirs.items() if k != "run_id"}
    keys = [t["idempotency_key"] for t in read_db(db_target).tasks]
    assert len(keys) == len(set(keys))  # no side effect twice across parent and fork


def test_an_edited_result_changes_that_block_only_and_the_model_sees_it(db_path, tmp_path):
    db = str(db_path)
    env = cli_env(DAYFLOW_CALL_LOG=str(tmp_path / "calls.log"))
    ok(dayflow("brief", db=db, env=env))
    [parent] = run_ids(db, env)
    results = json.loads(steps_of(db, parent)[1]["tool_results"])
    target = results[1]["tool_use_id"]
    edited = tmp_path / "result.txt"
    edited.write_text('{"ok": false, "error": {"code": "exists", "message": "made by hand last week"}}')
    fork = text(ok(dayflow("fork", parent, "--at", "2", "--edit-result", f"2:{target}={edited}",
                           "--append", "Mention the dentist.", db=db, env=env)).stdout).strip()
    forked = json.loads(steps_of(db, fork)[1]["tool_results"])
    assert forked[:1] + forked[2:len(results)] == results[:1] + results[2:]  # every other result as it was
    assert forked[1]["content"] == edited.read_text() and forked[1]["tool_use_id"] == target
    assert forked[-1] == {"type": "text", "text": "[a note from the person who forked this run] Mention the dentist."}
    ok(dayflow("resume", fork, db=db, env=env))
    final = {r["id"]: r for r in read_db(db).runs}[fork]["final_text"]
    assert "exists" in final  # the model's next step was built on the edited result

    shown = text(ok(dayflow("diff", parent, fork, db=db, env=env)).stdout)
    # The headline is worded from the rows: step 2 is the first that is not the same (issue #30).
    assert "step   2  results differ" in shown and "step   1  shared" in shown
    assert "first difference at step 2 (results differ); the model's turn first differs at step 3" in shown
    data = json.loads(ok(dayflow("diff", parent, fork, "--json", db=db, env=env)).stdout)
    assert data["first_divergence"] == 3 and data["common_fork"] == 2
    assert [s["state"] for s in data["steps"]] == ["shared", "results_differ", "differs"]
    assert "made by hand" in data["steps"][1]["results"][0]["b"]

    # A fork of the fork, and the lineage in `runs`.
    grandchild = text(ok(dayflow("fork", fork, "--at", "3", db=db, env=env)).stdout).strip()
    listing = text(ok(dayflow("runs", db=db, env=env)).stdout).splitlines()
    assert listing[0].startswith(parent) and listing[1].startswith(f"└─ {fork}")
    assert listing[2].startswith(f"  └─ {grandchild}")
    assert "fork of run " + fork in text(ok(dayflow("show", grandchild, db=db, env=env)).stdout)


def test_diff_of_a_run_with_itself_and_of_two_unrelated_runs(db_path):
    db = str(db_path)
    env = cli_env()
    ok(dayflow("brief", db=db, env=env))
    ok(dayflow("brief", "--task", "Only read my calendar and write a short brief.", db=db, env=env))
    other, first = run_ids(db, env)
    same = json.loads(ok(dayflow("diff", first, first, "--json", db=db, env=env)).stdout)
    assert same["first_divergence"] is None and {s["state"] for s in same["steps"]} == {"shared"}
    apart = json.loads(ok(dayflow("diff", first, other, "--json", db=db, env=env)).stdout)
    assert apart["common_fork"] == 0


def test_bad_fork_requests_write_nothing(db_path, tmp_path):
    from ..reliability_helpers import fingerprint

    db = str(db_path)
    env = cli_env()
    ok(dayflow("brief", db=db, env=env))
    [parent] = run_ids(db, env)
    before = fingerprint(db_path)
    missing = tmp_path / "missing.txt"
    for args in (("--at", "9"), ("--at", "-1"), ("--at", "2", "--edit-result", "2:toolu_nope=/dev/null"),
                 ("--at", "2", "--edit-result", "nonsense"), ("--at", "2", "--edit-result", f"2:x={missing}"),
                 ("--at", "0", "--append", "hello"), ("--at", "2", "--append", "   "),
                 ("--at", "1", "--edit-result", "2:toolu_off0200=/dev/null")):
        refused = dayflow("fork", parent, *args, db=db, env=env)
        err = text(refused.stderr)
        assert refused.returncode == 64 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)
    assert fingerprint(db_path) == before
    unknown = dayflow("fork", "nosuchrun", "--at", "1", db=db, env=env)
    assert unknown.returncode == 3


def test_spend_counts_a_forks_copied_steps_once(db_path, monkeypatch):
    """The copies were paid for by the parent: spend totals count them once."""
    db = str(db_path)
    env = cli_env(DAYFLOW_PRICES=json.dumps({"offline": {"input": 3.0, "output": 15.0}}))
    ok(dayflow("brief", db=db, env=env))
    [parent] = run_ids(db, env)
    before = json.loads(ok(dayflow("spend", "--json", db=db, env=env)).stdout)["total"]
    ok(dayflow("fork", parent, "--at", "2", db=db, env=env))
    after = json.loads(ok(dayflow("spend", "--json", db=db, env=env)).stdout)["total"]
    assert after["cost_usd"] == before["cost_usd"] and after["calls"] == before["calls"]


def test_a_fork_travels_with_its_parent_link_and_its_copied_steps_are_searchable(db_path, tmp_path):
    """Export keeps parent_id/forked_at; import restores them; search finds the fork's copied steps as its own."""
    db = str(db_path)
    env = cli_env()
    ok(dayflow("brief", db=db, env=env))
    [parent] = run_ids(db, env)
    fork = text(ok(dayflow("fork", parent, "--at", "2", db=db, env=env)).stdout).strip()
    hits = json.loads(ok(dayflow("search", "calendar", "--json", db=db, env=env)).stdout)
    found = {h.get("run_id") or h.get("run") for h in (hits if isinstance(hits, list) else hits["results"])}
    assert {parent, fork} <= found
    archive = tmp_path / "runs.jsonl"
    ok(dayflow("export", parent, fork, "--jsonl", str(archive), db=db, env=env))
    other = str(tmp_path / "other.db")
    ok(dayflow("import", str(archive), db=other, env=env))
    runs = {r["id"]: r for r in read_db(other).runs}
    assert runs[fork]["parent_id"] == parent and runs[fork]["forked_at"] == 2
    assert steps_of(other, fork) and len(steps_of(other, fork)) == 2


# -- the dashboard ---------------------------------------------------------------------------------------------


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_the_dashboard_forks_at_a_step_resumes_the_fork_and_diffs_it(store):
    from dayflow_tui.agent import runs
    from dayflow_tui.tui.app import DayflowApp
    from dayflow_tui.tui.screens.time_travel import DiffScreen, ForkDialog
    from dayflow_tui.tui.screens.transcript import TranscriptScreen

    from ..conftest import CountingClient
    from ..tui_helpers import SIZE, open_run, select_loaded, settle, wait_for

    parent = runs.run_brief(store, client=CountingClient()).run_id
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_run(pilot, parent)
        await pilot.press("g", "j")  # step 2
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, ForkDialog))
        for key in "Mention the dentist.":
            await pilot.press({" ": "space", ".": "full_stop"}.get(key, key))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TranscriptScreen) and app.screen is not screen
                       and app.screen.run is not None)
        fork = app.screen
        assert fork.run.parent_id == parent and fork.run.forked_at == 2 and fork.run.status == "forked"
        await pilot.press("r")
        await wait_for(pilot, lambda: fork.run.status == "done" and not app.is_driving)
        assert client.calls == 1  # only the step after the fork point was bought
        await pilot.press("escape", "escape")
        await settle(pilot)
        await select_loaded(pilot, parent)
        await pilot.press("d")
        await select_loaded(pilot, fork.run_id)
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.diff is not None)
        diff = app.screen.diff
        # The note is a difference in what the tools (a person) answered at step 2; the offline model writes
        # the same brief after it, so the model itself never diverges.
        assert diff.common_fork == 2 and [s.state for s in diff.steps] == ["shared", "results_differ", "same"]
    note = json.loads(store.steps(fork.run_id)[1].tool_results)[-1]
    assert note["type"] == "text" and note["text"].endswith("Mention the dentist.")
    assert store.steps(parent)[1].tool_results != store.steps(fork.run_id)[1].tool_results  # the parent untouched


@pytest.mark.anyio
async def test_the_run_list_shows_forks_under_their_parent_and_folds_them(store):
    from dayflow_tui.agent import runs
    from dayflow_tui.store.tables.forks import ForkPlan
    from dayflow_tui.tui.app import DayflowApp

    from ..conftest import CountingClient
    from ..tui_helpers import SIZE, screen_text, select_loaded, settle, wait_for

    parent = runs.run_brief(store, client=CountingClient()).run_id
    first = store.fork_run(parent, ForkPlan(at=1)).id
    second = store.fork_run(parent, ForkPlan(at=2)).id
    grandchild = store.fork_run(first, ForkPlan(at=1)).id
    newest = runs.run_brief(store, client=CountingClient()).run_id
    app = DayflowApp(store)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("RunTable")
        assert [r.id for r in table.rows] == [newest, parent, first, grandchild, second]
        assert table.window.depth == {first: 1, grandchild: 2, second: 1} and table.total == 5
        text = screen_text(app)
        assert "▾ 2 forks" in text and "└─ ⑂ @1" in text and "  └─ ⑂ @1" in text
        await select_loaded(pilot, parent)
        await pilot.press("z")
        await wait_for(pilot, lambda: [r.id for r in table.rows] == [newest, parent])
        assert table.total == 2 and table.current.id == parent
        await wait_for(pilot, lambda: "▸ 2 forks" in screen_text(app))
        await pilot.press("z")
        await wait_for(pilot, lambda: len(table.rows) == 5)
