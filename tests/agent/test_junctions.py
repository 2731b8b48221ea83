"""Exactly once where two features meet a fault (#24): approval x kill, agent edit x kill, fork x own agent.

Each test drives the real console script against a loopback API (the real SDK, calls counted by the
server) and an agent written to a file whose tools append to a ledger before and after their effect, so
how often a body ran is counted from outside the processes that were killed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from ..conftest import dayflow_cmd
from ..crash_harness import read_db
from ..loopback_api import LoopbackAPI, message_reply
from ..reliability_helpers import assert_one_error_line, cli_env, dayflow, fingerprint, text

MODEL = "claude-loopback-1"

AGENT = '''
import os, time
from dayflow_tui.agent.define import Agent, tool

LEDGER = os.environ["LEDGER"]

def note(line):
    with open(LEDGER, "a") as fh:
        fh.write(line + "\\n")

@tool(read_only=True)
def look(topic: str = "all") -> dict:
    """Look things up."""
    note("look")
    return {"ok": True, "found": ["a", "b"]}

@tool(BELL_RULE)
def ring_bell(times: int = 1) -> dict:
    """Ring the office bell: a side effect that must never happen twice."""
    note("bell start")
    time.sleep(float(os.environ.get("SLOW", "0")))
    note("bell done")
    return {"ok": True, "rang": times}

@tool
def chime() -> dict:
    """Sound the chime: a side effect too, that needs nobody's approval."""
    note("chime start")
    time.sleep(float(os.environ.get("SLOW_CHIME", "0")))
    note("chime done")
    return {"ok": True}

agent = Agent(name="office", system="SYSTEM_TEXT", tools=(look, ring_bell, chime), max_steps=6, task="Chores.")
'''


def write_agent(path: Path, *, bell_rule: str = "needs_approval=True", system: str = "You do office chores.") -> str:
    path.write_text(textwrap.dedent(AGENT).replace("BELL_RULE", bell_rule).replace("SYSTEM_TEXT", system))
    return f"{path}:agent"


def bell_then_end(*extra_calls: dict) -> LoopbackAPI:
    """Step 1 rings the bell (and any ``extra_calls``); step 2 ends the run."""
    api = LoopbackAPI()
    api.planned[1] = message_reply([*extra_calls, {"type": "tool_use", "id": "toolu_bell", "name": "ring_bell",
                                                   "input": {"times": 2}}], "tool_use")
    api.planned[2] = message_reply([{"type": "text", "text": "Done."}], "end_turn")
    return api


def ledger(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def kill_when(proc: subprocess.Popen, path: Path, line: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while line not in ledger(path):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{line!r} never came"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def only_run(db: str, env: dict) -> dict:
    [run] = json.loads(dayflow("runs", "--json", db=db, env=env).stdout)
    return run


def step_results(db: str, n: int) -> dict:
    step = [s for s in read_db(db).steps if s["n"] == n][0]
    return {r["tool_use_id"]: json.loads(r["content"]) for r in json.loads(step["tool_results"])}


def test_an_approved_plain_tool_killed_in_its_body_is_never_run_again(backend, db_target, tmp_path):
    book = tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py")
    with bell_then_end() as api:
        env = cli_env(**api.env(), LEDGER=str(book))
        started = dayflow("run", ref, "--model", MODEL, db=db_target, env=env)
        assert started.returncode == 0, text(started.stderr)
        run = only_run(db_target, env)
        assert run["status"] == "waiting" and api.calls == 1
        approving = subprocess.Popen(dayflow_cmd("approve", run["id"], "--all", "--db", db_target),
                                     env={**env, "SLOW": "30"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        kill_when(approving, book, "bell start")
        resumed = dayflow("resume", run["id"], db=db_target, env=env)
        assert resumed.returncode == 0, text(resumed.stderr)
        assert api.calls == 2  # step 1 was not bought again
    assert ledger(book).count("bell start") == 1 and "bell done" not in ledger(book)
    assert step_results(db_target, 1)["toolu_bell"]["error"]["code"] == "outcome_unknown"
    assert read_db(db_target).runs[0]["status"] == "done"


def test_a_plain_call_beside_a_waiting_one_killed_in_its_body_is_not_run_again(backend, db_target, tmp_path):
    book = tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py")
    chime = {"type": "tool_use", "id": "toolu_chime", "name": "chime", "input": {}}
    with bell_then_end(chime) as api:
        env = cli_env(**api.env(), LEDGER=str(book))
        first = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", db_target),
                                 env={**env, "SLOW_CHIME": "30"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL)
        kill_when(first, book, "chime start")  # on the way to the wait: the bell is not asked about yet
        run_id = only_run(db_target, env)["id"]
        again = dayflow("resume", run_id, db=db_target, env=env)
        assert again.returncode == 0, text(again.stderr)
        assert only_run(db_target, env)["status"] == "waiting"  # the bell still waits for a person
        assert "bell start" not in ledger(book)
        approved = dayflow("approve", run_id, "--all", db=db_target, env=env)
        assert approved.returncode == 0, text(approved.stderr)
        assert api.calls == 2
    assert ledger(book).count("chime start") == 1 and "chime done" not in ledger(book)
    assert ledger(book).count("bell start") == ledger(book).count("bell done") == 1
    results = step_results(db_target, 1)
    assert results["toolu_chime"]["error"]["code"] == "outcome_unknown" and results["toolu_bell"]["ok"] is True


def test_dropping_the_approval_rule_of_a_queued_run_is_noticed(db_path, tmp_path):
    db, book = str(db_path), tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py")
    with bell_then_end() as api:
        env = cli_env(**api.env(), LEDGER=str(book))
        queued = dayflow("run", ref, "--model", MODEL, "--queue", db=db, env=env)
        assert queued.returncode == 0, text(queued.stderr)
        run_id = queued.stdout.decode().strip()
        write_agent(tmp_path / "office.py", bell_rule="")  # the bell no longer asks anyone
        before = fingerprint(db_path)
        refused = dayflow("resume", run_id, db=db, env=env)
        assert_one_error_line(refused, "approval rule", "--allow-changed-agent")
        assert fingerprint(db_path) == before and api.calls == 0
        assert dayflow("worker", "--once", db=db, env=env).returncode == 0
        assert api.calls == 0  # a worker does not go on with the changed agent either
    run = only_run(db, env)
    assert run["status"] == "failed" and "approval rule" in run["error"], run
    assert "bell start" not in ledger(book)


def test_a_plain_tool_made_read_only_after_a_kill_in_its_body_is_noticed(db_path, tmp_path):
    db, book = str(db_path), tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py", bell_rule="")
    with bell_then_end() as api:
        env = cli_env(**api.env(), LEDGER=str(book))
        victim = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", db), env={**env, "SLOW": "30"},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        kill_when(victim, book, "bell start")
        write_agent(tmp_path / "office.py", bell_rule="read_only=True")
        run_id = only_run(db, env)["id"]
        before = fingerprint(db_path)
        refused = dayflow("resume", run_id, db=db, env=env)
        assert_one_error_line(refused, "ring_bell's kind (plain -> read_only)")
        assert fingerprint(db_path) == before and api.calls == 1
    assert ledger(book).count("bell start") == 1


def test_an_approval_predicate_counts_by_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv("LEDGER", str(tmp_path / "ledger"))
    from dayflow_tui.agent.registry import load_agent

    first = load_agent(write_agent(tmp_path / "a.py", bell_rule="needs_approval=lambda args: args.get('times', 1) > 1"))
    same = load_agent(write_agent(tmp_path / "b.py", bell_rule="needs_approval=lambda args: args.get('times', 1) > 1"))
    other = load_agent(write_agent(tmp_path / "c.py", bell_rule="needs_approval=lambda args: args.get('times', 1) > 2"))
    assert first.fingerprint() == same.fingerprint() != other.fingerprint()


def test_a_run_recorded_before_kinds_were_fingerprinted_still_resumes(store, tmp_path, monkeypatch):
    monkeypatch.setenv("LEDGER", str(tmp_path / "ledger"))
    from dayflow_tui.agent.registry import agent_for_run, load_agent
    from dayflow_tui.store.models import Run

    ref = write_agent(tmp_path / "office.py")
    agent = load_agent(ref)
    shape = {"system": agent.system, "tools": {t.name: t.input_schema for t in agent.tools}, "model": agent.model}
    run = store.create_run("Chores.", model="offline", agent={
        "agent": agent.name, "agent_ref": ref, "agent_fingerprint": agent.legacy_fingerprint(),
        "agent_shape": json.dumps(shape)})
    assert agent_for_run(Run.get_by_id(run.id))[1] is None


def test_a_fork_of_your_own_agents_run_keeps_its_agent(backend, db_target, tmp_path):
    book = tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py", system="Only the office agent says this.")
    with LoopbackAPI() as api:
        api.planned[1] = message_reply([{"type": "tool_use", "id": "toolu_look", "name": "look", "input": {}}],
                                       "tool_use")
        api.planned[2] = message_reply([{"type": "tool_use", "id": "toolu_bell", "name": "ring_bell",
                                         "input": {"times": 1}}], "tool_use")
        api.planned[3] = message_reply([{"type": "tool_use", "id": "toolu_bell2", "name": "ring_bell",
                                         "input": {"times": 1}}], "tool_use")
        env = cli_env(**api.env(), LEDGER=str(book))
        assert dayflow("run", ref, "--model", MODEL, db=db_target, env=env).returncode == 0
        parent = only_run(db_target, env)
        assert parent["status"] == "waiting" and api.calls == 2
        forked = dayflow("fork", parent["id"], "--at", "1", "--append", "Ring it once more.", db=db_target, env=env)
        assert forked.returncode == 0, text(forked.stderr)
        fork_id = forked.stdout.decode().strip()
        resumed = dayflow("resume", fork_id, db=db_target, env=env)
        assert resumed.returncode == 0, text(resumed.stderr)
        assert api.calls == 3
        sent = api.requests[2]
        assert sent["system"][0]["text"] == "Only the office agent says this."
        assert [t["name"] for t in sent["tools"]] == ["look", "ring_bell", "chime"]
        assert sent["messages"] == api.requests[1]["messages"][:2] + [sent["messages"][2]]  # the parent's bytes
    runs = {r["id"]: r for r in read_db(db_target).runs}
    fork = runs[fork_id]
    assert (fork["agent"], fork["agent_ref"], fork["agent_fingerprint"]) == (
        parent["agent"], runs[parent["id"]]["agent_ref"], runs[parent["id"]]["agent_fingerprint"])
    assert fork["status"] == "waiting"  # its own bell call waits for a person: not unknown_tool, not run
    assert "bell start" not in ledger(book)


def test_a_fork_with_a_copied_waiting_call_waits_again(db_path, tmp_path):
    db, book = str(db_path), tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py")
    with bell_then_end() as api:
        env = cli_env(**api.env(), LEDGER=str(book))
        assert dayflow("run", ref, "--model", MODEL, db=db, env=env).returncode == 0
        parent = only_run(db, env)
        forked = dayflow("fork", parent["id"], "--at", "1", "--run", db=db, env=env)
        assert forked.returncode == 0, text(forked.stderr)
        assert api.calls == 1  # the copied step is not bought again, and its call waits: no call yet
    runs = read_db(db).runs
    assert sorted(r["status"] for r in runs) == ["waiting", "waiting"]
    assert "bell start" not in ledger(book)


@pytest.fixture(scope="module")
def waiting_run(tmp_path_factory):
    """One run waiting on its bell, shared by the hash tests (each refused approve must leave it as it was):
    (database file, run id, environment, the loopback API)."""
    folder = tmp_path_factory.mktemp("waiting")
    db_path = folder / "dayflow.db"
    ref = write_agent(folder / "office.py")
    with bell_then_end() as api:
        env = cli_env(**api.env(), LEDGER=str(folder / "ledger"), XDG_DATA_HOME=str(folder / "xdg"),
                      XDG_STATE_HOME=str(folder / "xdg-state"), XDG_CONFIG_HOME=str(folder / "xdg-config"))
        assert dayflow("run", ref, "--model", MODEL, db=str(db_path), env=env).returncode == 0
        yield db_path, only_run(str(db_path), env)["id"], env, api


@pytest.mark.parametrize("given", ["", "   ", "abc", "zz" * 8])
def test_an_empty_short_or_non_hex_hash_is_a_usage_error(waiting_run, given):
    db_path, run_id, env, api = waiting_run
    before = fingerprint(db_path)
    refused = dayflow("approve", run_id, "--hash", given, db=str(db_path), env=env)
    assert refused.returncode == 64
    assert_one_error_line(refused, "--hash")
    assert fingerprint(db_path) == before and api.calls == 1


def test_a_poison_tool_runs_max_attempts_times_in_all(db_path, tmp_path):
    db, book = str(db_path), tmp_path / "ledger"
    (tmp_path / "poison.py").write_text(textwrap.dedent('''
        import os, signal
        from dayflow_tui.agent.define import Agent, tool

        @tool(read_only=True)
        def boom() -> dict:
            """Kill the process that runs it."""
            with open(os.environ["LEDGER"], "a") as fh:
                fh.write("boom\\n")
            os.kill(os.getpid(), signal.SIGKILL)

        agent = Agent(name="poison", system="Call boom.", tools=(boom,), task="Go.")
    '''))
    with LoopbackAPI() as api:
        api.planned[1] = message_reply([{"type": "tool_use", "id": "toolu_boom", "name": "boom", "input": {}}],
                                       "tool_use")
        env = cli_env(**api.env(), LEDGER=str(book), DAYFLOW_MAX_ATTEMPTS="3", DAYFLOW_RETRY_BACKOFF="0")
        queued = dayflow("run", f"{tmp_path / 'poison.py'}:agent", "--model", MODEL, "--queue", db=db, env=env)
        assert queued.returncode == 0, text(queued.stderr)
        deaths = 0
        for _ in range(8):
            worker = dayflow("worker", "--once", db=db, env=env)
            if worker.returncode == -signal.SIGKILL:
                deaths += 1
            elif only_run(db, env)["status"] == "failed":
                break
        assert api.calls == 1 <= 1 + deaths
    run = only_run(db, env)
    assert run["status"] == "failed" and "gave up after 3 attempts" in run["error"], run
    assert ledger(book).count("boom") == deaths == 3


@pytest.mark.parametrize("stop_reason, words", [("model_context_window_exceeded", "context window"),
                                                ("refusal", "dayflow fork")])
def test_documented_stop_reasons_say_what_to_do(db_path, tmp_path, stop_reason, words):
    db = str(db_path)
    with LoopbackAPI() as api:
        api.planned[1] = message_reply([{"type": "tool_use", "id": "toolu_1", "name": "read_inbox", "input": {}}],
                                       "tool_use")
        api.planned[2] = message_reply([{"type": "text", "text": "Stopping here."}], stop_reason)
        env = cli_env(**api.env())
        stopped = dayflow("brief", "--model", MODEL, db=db, env=env)
        err = text(stopped.stderr)
        assert stopped.returncode == 3 and "unexpected" not in err and words in err, err
        run = only_run(db, env)
        assert run["status"] == "failed" and "unexpected" not in run["error"], run
        if stop_reason == "refusal":
            assert f"dayflow fork {run['id']} --at 1 --append" in err
            assert "dayflow resume" not in err  # resuming pays for the same refusal again


def test_a_waiting_run_whose_agent_changed_is_not_decided_unless_allowed(db_path, tmp_path):
    db, book = str(db_path), tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py")
    with bell_then_end() as api:
        env = cli_env(**api.env(), LEDGER=str(book))
        assert dayflow("run", ref, "--model", MODEL, db=db, env=env).returncode == 0
        run_id = only_run(db, env)["id"]
        write_agent(tmp_path / "office.py", system="You do office chores, now differently.")
        before = fingerprint(db_path)
        refused = dayflow("approve", run_id, "--all", db=db, env=env)
        assert_one_error_line(refused, "system prompt", "--allow-changed-agent")
        assert fingerprint(db_path) == before  # nothing decided
        allowed = dayflow("approve", run_id, "--all", "--allow-changed-agent", db=db, env=env)
        assert allowed.returncode == 0, text(allowed.stderr)
        assert api.calls == 2
    assert only_run(db, env)["status"] == "done"
    assert ledger(book).count("bell start") == ledger(book).count("bell done") == 1


def test_a_fork_of_a_step_killed_in_a_plain_tool_never_runs_it_again(backend, db_target, tmp_path):
    book = tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py", bell_rule="")
    chime = {"type": "tool_use", "id": "toolu_chime", "name": "chime", "input": {}}
    with bell_then_end(chime) as api:
        env = cli_env(**api.env(), LEDGER=str(book))
        victim = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", db_target),
                                  env={**env, "SLOW": "30"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL)
        kill_when(victim, book, "bell start")  # the chime ran and was kept; the bell was killed in its body
        parent_id = only_run(db_target, env)["id"]
        forked = dayflow("fork", parent_id, "--at", "1", "--run", db=db_target, env=env)
        assert forked.returncode == 0, text(forked.stderr)
        fork_id = forked.stdout.decode().splitlines()[0].strip()
        resumed = dayflow("resume", parent_id, db=db_target, env=env)
        assert resumed.returncode == 0, text(resumed.stderr)
        assert api.calls == 3  # step 1 bought once; step 2 once by the fork, once by the parent
    # One side effect across the pair: the fork reused the parent's chime and did not ring the bell again.
    assert ledger(book).count("chime start") == ledger(book).count("chime done") == 1
    assert ledger(book).count("bell start") == 1 and "bell done" not in ledger(book)
    for run_id in (parent_id, fork_id):
        step = [s for s in read_db(db_target).steps if s["run_id"] == run_id and s["n"] == 1][0]
        results = {r["tool_use_id"]: json.loads(r["content"]) for r in json.loads(step["tool_results"])}
        assert results["toolu_bell"]["error"]["code"] == "outcome_unknown" and results["toolu_chime"]["ok"]
