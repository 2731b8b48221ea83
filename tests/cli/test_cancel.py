"""``dayflow cancel`` at each moment of a run, through the real console script and real processes.

The model is a loopback API (the real SDK, calls counted by the server); the tools are an agent written to a
file whose tools append to a ledger, so what ran is counted from outside the processes. Each moment: before
any claim, with a call in flight (driven by a worker on another host), while tools run, while the run waits
for a person. Paid replies are never thrown away; after the cancel is seen no call starts and no tool runs.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

from ..agent.test_junctions import ledger, write_agent
from ..conftest import dayflow_cmd
from ..crash_harness import read_db
from ..loopback_api import LoopbackAPI, message_reply
from ..reliability_helpers import assert_one_error_line, cli_env, dayflow, text

MODEL = "claude-loopback-1"
CHIMES = [{"type": "tool_use", "id": f"toolu_chime{i}", "name": "chime", "input": {}} for i in (1, 2)]


GATED_AGENT = '''
import os, time
from dayflow_tui.agent.define import Agent, tool

def note(line):
    with open(os.environ["LEDGER"], "a") as fh:
        fh.write(line + "\\n")

@tool
def chime() -> dict:
    """Sound the chime: a side effect that waits for the test's go (a file) before it ends."""
    note("chime start")
    deadline = time.monotonic() + 60
    while not os.path.exists(os.environ["GO"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    note("chime done")
    return {"ok": True}

agent = Agent(name="gated", system="You sound chimes.", tools=(chime,), max_steps=4, task="Chime.")
'''


def runs(db: str, env: dict) -> list[dict]:
    return json.loads(dayflow("runs", "--json", db=db, env=env).stdout)


def wait_until(condition, what: str, timeout: float = 60, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc is None or proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{what} never came"
        time.sleep(0.02)


def test_a_queued_run_cancelled_before_any_claim_gets_no_call(db_target):
    with LoopbackAPI() as api:
        env = cli_env(**api.env())
        queued = dayflow("brief", "--queue", "--model", MODEL, db=db_target, env=env)
        run_id = text(queued.stdout).strip()
        cancelled = dayflow("cancel", run_id[:6], "--reason", "not today", "--as", "ana", db=db_target, env=env)
        assert cancelled.returncode == 0, text(cancelled.stderr)
        assert text(cancelled.stdout).strip() == f"cancelled run {run_id} (it was queued)"
        worked = dayflow("worker", "--once", db=db_target, env=env)
        assert worked.returncode == 0 and "0 run(s) driven" in text(worked.stderr)
        assert api.calls == 0
        [run] = runs(db_target, env)
        assert run["status"] == "cancelled" and run["error"].startswith("cancelled by ana@") and \
            run["error"].endswith(": not today")
        assert run["cancel"]["reason"] == "not today" and run["cancel"]["by"].startswith("ana@")
        # Cancelled is final: a second cancel, a resume are refused with one line; a fork is a new run.
        assert_one_error_line(dayflow("cancel", run_id, db=db_target, env=env), "is cancelled already")
        resumed = dayflow("resume", run_id, db=db_target, env=env)
        assert resumed.returncode == 4
        assert_one_error_line(resumed, "a cancelled run is not resumed", "nothing ran: start a new run")
        assert api.calls == 0


def test_a_call_in_flight_on_another_hosts_worker_is_kept_and_its_tools_never_run(db_target, tmp_path):
    book = tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py")
    held = threading.Event()

    def hold_then_chime(handler, body):
        held.wait(60)  # the reply is held while the cancel is given
        return message_reply(CHIMES, "tool_use")(handler, body)

    with LoopbackAPI() as api:
        api.planned[1] = hold_then_chime
        env = cli_env(**api.env(), LEDGER=str(book))
        run_id = text(dayflow("run", ref, "--queue", "--model", MODEL, db=db_target, env=env).stdout).strip()
        worker = subprocess.Popen(dayflow_cmd("worker", "--once", "--db", db_target),
                                  env={**env, "DAYFLOW_HOSTNAME": "other-host"}, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        try:
            wait_until(lambda: api.calls == 1, "the call", proc=worker)
            asked = dayflow("cancel", run_id, "--reason", "wrong agent", db=db_target, env=env)
            assert asked.returncode == 0, text(asked.stderr)
            assert "cancel asked: run" in text(asked.stdout) and "on other-host" in text(asked.stdout)
            assert runs(db_target, env)[0]["status"] == "running"  # asked, not taken from its driver
            held.set()
            out, err = worker.communicate(timeout=60)
        finally:
            held.set()
            if worker.poll() is None:
                worker.kill()
        assert worker.returncode == 0, text(err)
        assert f"run {run_id} cancelled · 1 steps · 1 call(s)" in text(out)
        assert api.calls == 1  # no call after the cancel was seen
        [run] = runs(db_target, env)
        assert (run["status"], run["steps"]) == ("cancelled", 1)  # the paid reply in flight is committed
        assert run["error"].endswith(": wrong agent")
        [step] = read_db(db_target).steps
        assert json.loads(step["assistant"])[0]["name"] == "chime" and step["tool_results"] is None
        assert ledger(book) == []  # its tools never ran


def test_cancel_while_tools_run_stops_before_the_next_tool(db_target, tmp_path):
    book, go = tmp_path / "ledger", tmp_path / "go"
    (tmp_path / "gated.py").write_text(GATED_AGENT)
    ref = f"{tmp_path / 'gated.py'}:agent"
    with LoopbackAPI() as api:
        api.planned[1] = message_reply(CHIMES, "tool_use")
        env = cli_env(**api.env(), LEDGER=str(book), GO=str(go))
        driving = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", db_target), env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: "chime start" in ledger(book), "the first tool", proc=driving)
            [run] = runs(db_target, env)
            asked = dayflow("cancel", run["id"], db=db_target, env=env)
            assert asked.returncode == 0 and "cancel asked" in text(asked.stdout), text(asked.stderr)
            go.write_text("go")  # the first tool ends now, after the cancel was asked
            out, err = driving.communicate(timeout=60)
        finally:
            if driving.poll() is None:
                driving.kill()
        assert driving.returncode == 3
        assert f"run {run['id']} cancelled by " in text(err) and "1 committed step(s) are kept" in text(err)
        assert ledger(book) == ["chime start", "chime done"]  # the tool running finished; the next never began
        assert api.calls == 1
        [after] = runs(db_target, env)
        assert (after["status"], after["steps"]) == ("cancelled", 1)


def test_a_waiting_run_is_cancelled_and_its_call_can_no_longer_be_approved(db_target, tmp_path):
    book = tmp_path / "ledger"
    ref = write_agent(tmp_path / "office.py")
    with LoopbackAPI() as api:
        api.planned[1] = message_reply([{"type": "tool_use", "id": "toolu_bell", "name": "ring_bell",
                                         "input": {"times": 1}}], "tool_use")
        env = cli_env(**api.env(), LEDGER=str(book))
        assert dayflow("run", ref, "--model", MODEL, db=db_target, env=env).returncode == 0
        [run] = runs(db_target, env)
        assert run["status"] == "waiting"
        cancelled = dayflow("cancel", run["id"], "--reason", "no bell", db=db_target, env=env)
        assert text(cancelled.stdout).strip() == f"cancelled run {run['id']} (it was waiting)"
        assert text(dayflow("pending", db=db_target, env=env).stdout).strip() == "nothing waits for a decision"
        refused = dayflow("approve", run["id"], "--all", db=db_target, env=env)
        assert refused.returncode == 4
        assert_one_error_line(refused, "cancelled by", "no bell")
        assert ledger(book) == [] and api.calls == 1
        # A fork of a cancelled run is a new run, and runs.
        forked = dayflow("fork", run["id"], "--at", "0", "--run", "--model", "offline", db=db_target, env=env)
        assert forked.returncode == 0, text(forked.stderr)
        statuses = {r["id"]: r["status"] for r in runs(db_target, env)}
        assert statuses[run["id"]] == "cancelled" and sorted(statuses.values()) == ["cancelled", "done"]


def test_a_finished_run_is_not_cancelled(db_target):
    env = cli_env()
    assert dayflow("brief", db=db_target, env=env).returncode == 0
    [run] = runs(db_target, env)
    refused = dayflow("cancel", run["id"], db=db_target, env=env)
    assert refused.returncode == 4
    assert_one_error_line(refused, f"run {run['id']} is done already; nothing to cancel")
    assert runs(db_target, env)[0]["status"] == "done"
    assert dayflow("cancel", run["id"], "--reason", " ", db=db_target, env=env).returncode == 64


def test_a_worker_takes_the_higher_priority_first_then_the_oldest(db_target):
    with LoopbackAPI() as api:
        env = cli_env(**api.env())
        for task, priority in (("task p0 first", "0"), ("task p5", "5"), ("task p0 second", "0"),
                               ("task below", "-1"), ("task p9", "9")):
            queued = dayflow("brief", "--queue", "--model", MODEL, "--task", task, "--priority", priority,
                             db=db_target, env=env)
            assert queued.returncode == 0, text(queued.stderr)
        assert dayflow("worker", "--once", db=db_target, env=env).returncode == 0
        order = []
        for body in api.requests:  # the task is the first user message of every call of its run
            task = body["messages"][0]["content"]
            task = task if isinstance(task, str) else task[0]["text"]
            if task not in order:
                order.append(task)
        assert order == ["task p9", "task p5", "task p0 first", "task p0 second", "task below"]
        listed = {r["id"]: r["priority"] for r in runs(db_target, env)}
        assert sorted(listed.values()) == [-1, 0, 0, 5, 9]
        shown = text(dayflow("runs", db=db_target, env=env).stdout)
        assert "priority=9" in shown and "priority=-1" in shown
