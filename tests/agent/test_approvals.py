"""Approve before it runs (#16): a tool call waits for a person, decided once, run once, across crashes.

Every test drives the real console script on the offline model with
``DAYFLOW_REQUIRE_APPROVAL=create_task``: the daily brief reads (step 1),
asks to create six follow-up tasks (step 2) and writes the brief (step 3).
Model calls are counted from the call log the offline model appends to.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ..conftest import dayflow_cmd
from ..crash_harness import read_db
from ..reliability_helpers import call_count, cli_env, dayflow, fingerprint, text

ASKED = 6  # create_task calls in the offline brief's step 2


def approval_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    values = {"DAYFLOW_REQUIRE_APPROVAL": "create_task", "DAYFLOW_CALL_LOG": str(tmp_path / "calls.log"),
              "DAYFLOW_USER": "alice", **extra}
    return cli_env(**values)


def waiting_run(db: str, env: dict) -> str:
    started = dayflow("brief", db=db, env=env)
    assert started.returncode == 0, text(started.stderr)
    assert "Traceback" not in text(started.stderr)
    runs = json.loads(dayflow("runs", "--json", db=db, env=env).stdout)
    assert len(runs) == 1 and runs[0]["status"] == "waiting", runs
    return runs[0]["id"]


def pending(db: str, env: dict) -> list[dict]:
    listed = dayflow("pending", "--json", db=db, env=env)
    assert listed.returncode == 0, text(listed.stderr)
    return json.loads(listed.stdout)


def run_tasks(db: str) -> list[dict]:
    return [t for t in read_db(db).tasks if t["run_id"] is not None]


def test_a_run_waits_after_the_call_and_approve_continues_it_without_paying_again(backend, db_target, tmp_path):
    env = approval_env(tmp_path)
    run_id = waiting_run(db_target, env)
    log = tmp_path / "calls.log"
    assert call_count(log) == 2  # the call that asked is committed; no call is made while the run waits
    state = read_db(db_target)
    assert [s["n"] for s in state.steps] == [1, 2] and state.steps[1]["tool_results"] is None
    assert run_tasks(db_target) == []  # nothing that needs approval ran
    asked = pending(db_target, env)
    assert len(asked) == ASKED and {a["tool"] for a in asked} == {"create_task"}
    assert all(a["run_id"] == run_id and len(a["input_hash"]) == 64 for a in asked)

    # A worker passes a waiting run over; a resume refuses it with one line and changes nothing.
    assert dayflow("worker", "--once", db=db_target, env=env).returncode == 0
    refused = dayflow("resume", run_id, db=db_target, env=env)
    assert refused.returncode == 4 and "dayflow approve" in text(refused.stderr), text(refused.stderr)
    assert len(text(refused.stderr).strip().splitlines()) == 1
    assert call_count(log) == 2 and read_db(db_target).runs[0]["status"] == "waiting"

    approved = dayflow("approve", run_id, "--all", db=db_target, env=env)
    assert approved.returncode == 0, text(approved.stderr)
    assert "## Tasks" in text(approved.stdout)
    state = read_db(db_target)
    assert state.runs[0]["status"] == "done" and [s["n"] for s in state.steps] == [1, 2, 3]
    assert call_count(log) == 3  # step 2 was not bought again
    keys = [t["idempotency_key"] for t in run_tasks(db_target)]
    assert sorted(keys) == sorted({a["input"]["idempotency_key"] for a in asked})  # each ran once
    assert pending(db_target, env) == []
    shown = text(dayflow("show", run_id, db=db_target, env=env).stdout)
    assert shown.count("approved by alice on") == ASKED


def test_deny_sends_the_reason_and_the_next_step_sees_it(backend, db_target, tmp_path):
    env = approval_env(tmp_path)
    run_id = waiting_run(db_target, env)
    first = pending(db_target, env)[0]
    denied = dayflow("deny", run_id, first["tool_use_id"], "--reason", "I already did this one", "--queue",
                     db=db_target, env=env)
    assert denied.returncode == 0, text(denied.stderr)
    assert read_db(db_target).runs[0]["status"] == "waiting"  # five more wait
    assert dayflow("approve", run_id, "--all", "--queue", db=db_target, env=env).returncode == 0
    assert read_db(db_target).runs[0]["status"] == "queued"  # the last decision hands it to a worker
    assert dayflow("worker", "--once", db=db_target, env=env).returncode == 0
    state = read_db(db_target)
    assert state.runs[0]["status"] == "done" and call_count(tmp_path / "calls.log") == 3
    results = {r["tool_use_id"]: r for r in json.loads(state.steps[1]["tool_results"])}
    answer = results[first["tool_use_id"]]
    assert answer["is_error"] is True and "I already did this one" in answer["content"]
    assert first["input"]["idempotency_key"] not in {t["idempotency_key"] for t in run_tasks(db_target)}
    assert len(run_tasks(db_target)) == ASKED - 1
    # The model's next call was sent that result: step 3 exists, built on the history holding it.
    assert "denied" in (state.runs[0]["final_text"] or "")
    shown = text(dayflow("show", run_id, db=db_target, env=env).stdout)
    assert "denied by alice on" in shown and "I already did this one" in shown


def test_a_second_decision_is_refused_with_who_decided_and_when(db_path, tmp_path):
    db = str(db_path)
    env = approval_env(tmp_path)
    run_id = waiting_run(db, env)
    call = pending(db, env)[0]
    assert dayflow("approve", run_id, call["tool_use_id"], "--queue", db=db, env=env).returncode == 0
    before = fingerprint(db_path)
    again = dayflow("deny", run_id, call["tool_use_id"], "--reason", "no", "--queue", db=db,
                    env=cli_env(DAYFLOW_USER="bob"))
    err = text(again.stderr)
    assert again.returncode == 4 and "already approved by alice" in err and "Traceback" not in err, err
    assert fingerprint(db_path) == before


def test_edited_arguments_are_checked_and_the_decision_is_bound_to_the_hash(db_path, tmp_path):
    db = str(db_path)
    env = approval_env(tmp_path)
    run_id = waiting_run(db, env)
    call = pending(db, env)[0]
    before = fingerprint(db_path)
    bad = tmp_path / "bad.json"
    for content in ("not json", "[1, 2]", json.dumps({"title": "no key"}),
                    json.dumps({"title": "x", "idempotency_key": "k", "due": "tomorrow"})):
        bad.write_text(content)
        refused = dayflow("approve", run_id, call["tool_use_id"], "--edit", str(bad), db=db, env=env)
        assert refused.returncode == 64, text(refused.stderr)
        assert len(text(refused.stderr).strip().splitlines()) == 1
    stale = dayflow("approve", run_id, call["tool_use_id"], "--hash", "0" * 12, db=db, env=env)
    assert stale.returncode == 4 and call["input_hash"][:12] in text(stale.stderr)
    assert fingerprint(db_path) == before  # nothing written by any refused decision

    good = tmp_path / "good.json"
    good.write_text(json.dumps({**call["input"], "title": "Edited by a person"}))
    edited = dayflow("approve", run_id, call["tool_use_id"], "--hash", call["input_hash"][:12], "--edit",
                     str(good), "--queue", db=db, env=env)
    assert edited.returncode == 0, text(edited.stderr)
    assert dayflow("approve", run_id, "--all", db=db, env=env).returncode == 0
    titles = {t["idempotency_key"]: t["title"] for t in run_tasks(db)}
    assert titles[call["input"]["idempotency_key"]] == "Edited by a person"
    assert call_count(tmp_path / "calls.log") == 3


def test_two_decisions_racing_from_two_processes_one_wins(backend, db_target, tmp_path):
    """Both processes read the call as pending (each pauses inside its decision's transaction); exactly one
    commits, the other is told who decided."""
    env = approval_env(tmp_path)
    run_id = waiting_run(db_target, env)
    for call in pending(db_target, env)[:3]:
        racers = []
        for who, verb in (("alice", ["approve"]), ("bob", ["deny", "--reason", "no"])):
            racer_env = approval_env(tmp_path, DAYFLOW_USER=who, DAYFLOW_TEST_PAUSE_IN="decide:0.5")
            racers.append(subprocess.Popen(dayflow_cmd(*verb, run_id, call["tool_use_id"], "--queue",
                                                       "--db", db_target),
                                           env=racer_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           stdin=subprocess.DEVNULL))
        outcomes = []
        for racer in racers:
            _out, err = racer.communicate(timeout=120)
            outcomes.append((racer.returncode, err.decode()))
        codes = sorted(code for code, _err in outcomes)
        assert codes == [0, 4], outcomes
        loser = next(err for code, err in outcomes if code == 4)
        assert "already" in loser and "Traceback" not in loser, loser
    decided = [a for a in pending(db_target, env)]
    assert len(decided) == ASKED - 3


def test_an_unknown_tool_in_the_setting_is_refused_before_any_run(db_path, tmp_path):
    env = approval_env(tmp_path, DAYFLOW_REQUIRE_APPROVAL="create_tsak")
    refused = dayflow("brief", db=str(db_path), env=env)
    err = text(refused.stderr)
    assert refused.returncode == 64 and "create_tsak" in err and len(err.strip().splitlines()) == 1, err
    assert call_count(tmp_path / "calls.log") == 0


def test_untrusted_arguments_never_reach_the_terminal_raw(db_path, tmp_path):
    """A waiting call's arguments come from the model: escapes are shown, not sent, in pending and show."""
    from dayflow_tui.store import open_store
    from dayflow_tui.store.tables.approvals import CallToAsk

    db = str(db_path)
    env = approval_env(tmp_path)
    run_id = waiting_run(db, env)
    store = open_store(db)
    try:
        from dayflow_tui.store.models import Approval

        with store.write_transaction():
            Approval.update(input=json.dumps({"title": "\x1b]0;owned\x07[bold]x[/]", "idempotency_key": "k"}),
                            tool_name="create_task\x1b[31m").where(Approval.run == run_id).execute()
    finally:
        store.close()
    assert CallToAsk  # the row shape the store writes
    for args in (("pending",), ("pending", "--json"), ("show", run_id)):
        out = dayflow(*args, db=db, env=env).stdout
        assert b"\x1b" not in out and b"\x07" not in out, args


# -- kill -9 anywhere on the decision path -------------------------------------------------------------------

KILL_POINTS = [("decide", 1), ("tools", 1), ("tools", 3), ("answer", 1), ("answered", 2), ("commit", 1),
               ("committed", 1), ("api", 1)]


@pytest.mark.parametrize("phase,nth", KILL_POINTS, ids=[f"{p}{n}" for p, n in KILL_POINTS])
def test_killed_anywhere_between_the_decision_and_the_result_never_runs_a_call_twice(backend, db_target, tmp_path,
                                                                                    phase, nth):
    env = approval_env(tmp_path)
    run_id = waiting_run(db_target, env)
    asked = pending(db_target, env)
    trace = tmp_path / "trace"
    killed_env = approval_env(tmp_path, DAYFLOW_TEST_TRACE=str(trace), DAYFLOW_TEST_PAUSE_IN=f"{phase}:2")
    victim = subprocess.Popen(dayflow_cmd("approve", run_id, "--all", "--db", db_target), env=killed_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (trace.exists() and trace.read_text().splitlines().count(phase) >= nth):
        assert victim.poll() is None, victim.communicate()
        assert time.monotonic() < deadline, trace.read_text() if trace.exists() else "no trace"
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    kills = 1

    # Whatever the moment, the decisions that committed stay; finish the job as a user would.
    state = read_db(db_target)
    traced = approval_env(tmp_path, DAYFLOW_TEST_TRACE=str(trace))
    if state.runs[0]["status"] == "waiting":
        assert dayflow("approve", run_id, "--all", db=db_target, env=traced).returncode == 0
    else:
        finished = dayflow("resume", run_id, db=db_target, env=traced)
        assert finished.returncode == 0, text(finished.stderr)
    state = read_db(db_target)
    assert state.runs[0]["status"] == "done"
    assert [s["n"] for s in state.steps] == [1, 2, 3]
    assert call_count(tmp_path / "calls.log") <= len(state.steps) + kills
    keys = sorted(t["idempotency_key"] for t in run_tasks(db_target))
    assert keys == sorted(a["input"]["idempotency_key"] for a in asked)
    # A call whose answer was kept never runs again: across the killed process and the one that finished,
    # the tools ran once per call, plus at most the one the kill interrupted before its answer was kept.
    runs_of_tools = trace.read_text().splitlines().count("tools")
    interrupted_a_call = phase in ("tools", "answer")  # between a call's start and its answer being kept
    assert runs_of_tools == ASKED + (kills if interrupted_a_call else 0), trace.read_text()
    results = json.loads(state.steps[1]["tool_results"])
    assert len(results) == ASKED and not any(r.get("is_error") for r in results)
    shown = text(dayflow("show", run_id, db=db_target, env=env).stdout)
    assert shown.count("approved by alice") == ASKED  # no decision lost


def test_a_waiting_run_travels_with_its_calls_and_decisions(tmp_path):
    """Exported while waiting (one call decided), imported elsewhere: the rest is decided there and the run
    finishes with no call bought again."""
    env = approval_env(tmp_path)
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    run_id = waiting_run(first, env)
    call = pending(first, env)[0]
    assert dayflow("deny", run_id, call["tool_use_id"], "--reason", "skip", "--queue", db=first, env=env).returncode == 0
    archive = tmp_path / "runs.jsonl"
    assert dayflow("export", run_id, "--jsonl", str(archive), db=first, env=env).returncode == 0
    asked_rows = [line for line in archive.read_text().splitlines()
                  if '"kind":"approval"' in line and '"state":"auto"' not in line]
    assert len(asked_rows) == ASKED  # the calls a person decides (the journal of the other calls travels too)
    imported = dayflow("import", str(archive), db=second, env=env)
    assert imported.returncode == 0, text(imported.stderr)
    assert len(pending(second, env)) == ASKED - 1
    assert dayflow("approve", run_id, "--all", db=second, env=env).returncode == 0
    state = read_db(second)
    assert state.runs[0]["status"] == "done" and call_count(tmp_path / "calls.log") == 3
    assert "skip" in json.loads(state.steps[1]["tool_results"])[0]["content"]


# -- the dashboard -----------------------------------------------------------------------------------------------


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_the_dashboard_approves_or_denies_a_waiting_run_and_it_goes_on(store, decision):
    from dayflow_tui.agent import runs
    from dayflow_tui.tui.app import DayflowApp
    from dayflow_tui.tui.screens.decide import DenyDialog

    from ..conftest import CountingClient
    from ..tui_helpers import SIZE, open_run, screen_text, wait_for

    first = CountingClient()
    waited = runs.run_brief(store, client=first, approval_tools=("create_task",))
    assert waited.status == "waiting" and first.calls == 2
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "⏸ 1 waiting" in app.sub_title)
        screen = await open_run(pilot, waited.run_id)
        await wait_for(pilot, lambda: "waiting for a decision" in screen_text(app))
        # Every waiting call: A approves them all after its confirm; for a denial each is marked (space), then d.
        await wait_for(pilot, lambda: len(screen.pending) == ASKED)
        if decision == "approve":
            from dayflow_tui.tui.screens.decide import ApproveAllDialog

            await pilot.press("A")
            await wait_for(pilot, lambda: isinstance(app.screen, ApproveAllDialog))
            app.screen.query_one("#approve-all-confirm").press()
        else:
            for _ in range(ASKED):
                await pilot.press("space", "j")
            await pilot.press("d")
            await wait_for(pilot, lambda: isinstance(app.screen, DenyDialog))
            for key in "not now":
                await pilot.press(key if key != " " else "space")
            await pilot.press("enter")
        await wait_for(pilot, lambda: screen.run is not None and screen.run.status == "done" and not app.is_driving)
    assert client.calls == 1  # the step that waited was not bought again
    results = json.loads(store.steps(waited.run_id)[1].tool_results)
    made = store.list_tasks(run_id=waited.run_id)
    if decision == "approve":
        assert len(made) == ASKED and not any(r.get("is_error") for r in results)
    else:
        assert made == [] and all(r.get("is_error") and "not now" in r["content"] for r in results)
    decided = [row for row in store.approvals(waited.run_id) if row.state != "auto"]
    assert len(decided) == ASKED and {row.state for row in decided} == {"approved" if decision == "approve"
                                                                         else "denied"}


@pytest.mark.anyio
async def test_waiting_runs_come_first_in_the_run_list_and_leave_the_top_once_decided(store):
    from dayflow_tui.agent import runs
    from dayflow_tui.tui.app import DayflowApp

    from ..conftest import CountingClient
    from ..tui_helpers import SIZE, settle, wait_for

    waited = runs.run_brief(store, client=CountingClient(), approval_tools=("create_task",))
    newer = [runs.run_brief(store, client=CountingClient()).run_id for _ in range(2)]
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one("RunTable")
        assert [r.id for r in table.rows] == [waited.run_id, newer[1], newer[0]] and table.total == 3
        assert table.current.id == waited.run_id  # the cursor starts on what needs a person
        for row in store.approvals(waited.run_id):
            if row.state == "pending":
                store.decide(waited.run_id, row.tool_use_id, approve=True, by="test", host="here")
        await wait_for(pilot, lambda: [r.id for r in table.rows] == [newer[1], newer[0], waited.run_id])
        assert table.total == 3


@pytest.mark.anyio
async def test_the_dashboard_edits_a_calls_arguments_then_approves_it(store):
    from textual.widgets import TextArea

    from dayflow_tui.agent import runs
    from dayflow_tui.tui.app import DayflowApp
    from dayflow_tui.tui.screens.decide import EditDialog

    from ..conftest import CountingClient
    from ..tui_helpers import SIZE, open_run, screen_text, wait_for

    waited = runs.run_brief(store, client=CountingClient(), approval_tools=("create_task",))
    first = [r for r in store.approvals(waited.run_id) if r.state == "pending"][0]
    args = json.loads(first.input)
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_run(pilot, waited.run_id)
        await wait_for(pilot, lambda: "waiting for a decision" in screen_text(app))
        # A bad edit (not JSON, or not fitting the schema) keeps the dialog open with the edit and one line
        # under it saying why, and decides nothing.
        await pilot.press("E")
        await wait_for(pilot, lambda: isinstance(app.screen, EditDialog))
        dialog = app.screen
        for bad, why in (('{"title": "half', "not JSON"), (json.dumps({"title": "no key"}), "do not fit")):
            dialog.query_one(TextArea).text = bad
            dialog.query_one("#edit-confirm").press()
            await wait_for(pilot, lambda: why in str(dialog.query_one("#edit-problem").render()))
            assert app.screen is dialog and dialog.query_one(TextArea).text == bad
        assert all(r.state == "pending" for r in store.approvals(waited.run_id) if r.state != "auto")
        # Mended in the same dialog, it is approved with the person's arguments; the rest with `a`.
        dialog.query_one(TextArea).text = json.dumps({**args, "title": "Edited in the dashboard"})
        # Pressed, not clicked: under a loaded full suite a click can land on a layout not yet refreshed
        # (a toast from the refused edits above), and the test then waits for nothing.
        dialog.query_one("#edit-confirm").press()
        await wait_for(pilot, lambda: store.approvals(waited.run_id) and
                       next(r for r in store.approvals(waited.run_id) if r.tool_use_id == first.tool_use_id)
                       .state == "approved")
        # The rest at once: A, after a confirm that lists them (a approves the one under the cursor only).
        from dayflow_tui.tui.screens.decide import ApproveAllDialog

        await wait_for(pilot, lambda: bool(screen.pending) and all(
            call.tool_use_id != first.tool_use_id for call in screen.pending))
        await pilot.press("A")
        await wait_for(pilot, lambda: isinstance(app.screen, ApproveAllDialog))
        app.screen.query_one("#approve-all-confirm").press()
        await wait_for(pilot, lambda: screen.run is not None and screen.run.status == "done" and not app.is_driving)
    titles = {t.idempotency_key: t.title for t in store.list_tasks(run_id=waited.run_id)}
    assert titles[args["idempotency_key"]] == "Edited in the dashboard" and client.calls == 1
