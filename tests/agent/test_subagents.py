"""Durable subagents (issue #27): a parent's call runs a child run, once per call, through kills."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import threading

from dayflow_tui.agent import runs
from dayflow_tui.agent.registry import load_agent
from dayflow_tui.agent.tools import ToolContext
from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI, message_reply
from ..reliability_helpers import cli_env

MODEL = "claude-loopback-1"

AGENT_FILE = '''
from dayflow_tui import Agent, tool
from dayflow_tui.agent.subagents import tool_from_agent


@tool(read_only=True)
def lookup(city: str) -> dict:
    """Today's weather in a city."""
    return {"ok": True, "city": city, "sky": "dry", "high": 21}


researcher = Agent(name="researcher", system="Find the facts with lookup.", tools=(lookup,))
agent = Agent(name="writer", system="Write the answer; ask the researcher first.", tools=(tool_from_agent(researcher),),
              task="Should I take an umbrella in Lisbon?")
'''


def script(handler, body):
    """The writer asks the researcher, then answers; the researcher looks up, then answers."""
    tools = {t["name"] for t in body.get("tools") or []}
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if "researcher" in tools:  # the parent
        if turns == 0:
            return message_reply([{"type": "tool_use", "id": "toolu_parent01", "name": "researcher",
                                   "input": {"task": "Lisbon's weather today"}}], "tool_use")(handler, body)
        result = body["messages"][-1]["content"][0]["content"]
        return message_reply([{"type": "text", "text": f"No umbrella: {result}"}])(handler, body)
    if turns == 0:  # the child
        return message_reply([{"type": "tool_use", "id": "toolu_child01", "name": "lookup",
                               "input": {"city": "Lisbon"}}], "tool_use")(handler, body)
    return message_reply([{"type": "text", "text": "Lisbon is dry, 21 C."}])(handler, body)


def _setup(tmp_path):
    path = tmp_path / "writer.py"
    path.write_text(AGENT_FILE)
    return f"{path}:agent", tmp_path / "dayflow.db"


def _runs(db):
    store = open_store(db)
    try:
        return {r.id: (r.status, r.parent_id, r.parent_call_id, r.step_count, r.final_text, r.agent_ref)
                for r in (store.get_run(listed.id) for listed in store.list_runs())}
    finally:
        store.close()


def test_a_call_runs_the_subagent_as_a_child_run_and_answers_with_its_text(tmp_path):
    ref, db = _setup(tmp_path)
    with LoopbackAPI() as api:
        api.planned = {n: script for n in range(1, 20)}
        done = subprocess.run(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)),
                              env=cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0"), capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        runs = _runs(db)
        (parent_id,) = [i for i, r in runs.items() if r[1] is None]
        (child_id,) = [i for i, r in runs.items() if r[1] == parent_id]
        assert runs[parent_id][0] == "done" and runs[parent_id][4] == "No umbrella: Lisbon is dry, 21 C."
        assert runs[child_id][:4] == ("done", parent_id, "toolu_parent01", 2)
        assert runs[child_id][5].endswith(">researcher")
        assert api.calls == runs[parent_id][3] + runs[child_id][3] == 4  # one paid call per step, over the tree


def test_a_kill_inside_the_child_resumes_that_child_never_a_second_one(tmp_path):
    ref, db = _setup(tmp_path)
    with LoopbackAPI() as api:
        api.planned = {n: script for n in range(1, 20)}
        in_flight = threading.Event()
        api.on_request = lambda number: in_flight.set() if number == 3 else None  # the child's second call
        env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0")
        proc = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        api.delay = 2.0
        try:
            assert in_flight.wait(90)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        api.delay = 0.0
        runs = _runs(db)
        (parent_id,) = [i for i, r in runs.items() if r[1] is None]
        (child_id,) = [i for i, r in runs.items() if r[1] == parent_id]
        assert runs[child_id][3] == 1 and runs[parent_id][3] == 1  # each had one committed step
        resumed = subprocess.run(dayflow_cmd("resume", parent_id, "--db", str(db)), env=env, capture_output=True,
                                 text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert resumed.returncode == 0, resumed.stderr
        runs = _runs(db)
        assert len(runs) == 2  # the same child, resumed
        assert runs[child_id][0] == runs[parent_id][0] == "done"
        steps = runs[child_id][3] + runs[parent_id][3]
        assert api.calls <= steps + 1  # the tree: one death, one call lost at most
        assert api.calls == steps + 1


def test_a_call_whose_child_finished_answers_from_it_without_a_call(tmp_path, monkeypatch):
    ref, db = _setup(tmp_path)
    with LoopbackAPI() as api:
        api.planned = {n: script for n in range(1, 20)}
        for name, value in api.env().items():
            monkeypatch.setenv(name, value)
        done = subprocess.run(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)),
                              env=cli_env(**api.env()), capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        calls = api.calls
        store = open_store(db)
        try:
            parent = next(r for r in store.list_runs() if r.parent_id is None)
            # The parent's call run again (a crash after the child ended, before the parent kept the result):
            tool = load_agent(ref).tool_named("researcher")
            ctx = ToolContext(store=store, run_id=parent.id, today=datetime.date.today(), agent=load_agent(ref),
                              call_id="toolu_parent01", hand_over=runs.hand_over)
            payload, is_error = tool.run(ctx, {"task": "Lisbon's weather today"})
            assert (payload, is_error) == ("Lisbon is dry, 21 C.", False)
            assert api.calls == calls and len(store.list_runs()) == 2
        finally:
            store.close()


LONG_CHILD_STEPS = 6


def long_script(handler, body):
    """The writer asks the researcher once; the researcher looks up ``LONG_CHILD_STEPS`` times, then answers."""
    tools = {t["name"] for t in body.get("tools") or []}
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if "researcher" in tools:
        if turns == 0:
            return message_reply([{"type": "tool_use", "id": "toolu_parent01", "name": "researcher",
                                   "input": {"task": "Lisbon's weather, hour by hour"}}], "tool_use")(handler, body)
        return message_reply([{"type": "text", "text": "Done."}])(handler, body)
    if turns < LONG_CHILD_STEPS:
        return message_reply([{"type": "tool_use", "id": f"toolu_child{turns:02d}", "name": "lookup",
                               "input": {"city": "Lisbon"}}], "tool_use")(handler, body)
    return message_reply([{"type": "text", "text": "Lisbon is dry all day."}])(handler, body)


def test_a_cancel_of_the_parent_stops_its_child_run_too(tmp_path):
    """``dayflow cancel PARENT`` while its subagent's child run works: the child (driven by the same process)
    stops at its next commit, cancelled, and the parent ends cancelled: at most the call in flight is paid
    after the cancel, over the whole tree. (The child used to go on to its last step, paying every call.)"""
    ref, db = _setup(tmp_path)
    with LoopbackAPI() as api:
        api.planned = {n: long_script for n in range(1, 30)}
        child_asked = threading.Event()
        api.on_request = lambda number: child_asked.set() if number == 3 else None  # the child's second call
        env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0")
        api.delay = 0.5
        proc = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        try:
            assert child_asked.wait(90)
            runs = _runs(db)
            (parent_id,) = [i for i, r in runs.items() if r[1] is None]
            cancelled = subprocess.run(dayflow_cmd("cancel", parent_id, "--db", str(db)), env=env,
                                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
            assert cancelled.returncode == 0, cancelled.stderr
            calls_at_cancel = api.calls
            _out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        runs = _runs(db)
        (child_id,) = [i for i, r in runs.items() if r[1] == parent_id]
        assert runs[parent_id][0] == "cancelled", (runs, err)
        assert runs[child_id][0] == "cancelled", (runs, err)
        assert runs[child_id][3] < LONG_CHILD_STEPS  # it stopped short of its answer
        assert api.calls <= calls_at_cancel + 1, (api.calls, calls_at_cancel)  # the call in flight, at most
        assert api.calls == runs[parent_id][3] + runs[child_id][3]  # every paid reply committed


def test_a_call_made_after_its_run_was_asked_to_cancel_starts_no_child(tmp_path, monkeypatch):
    """The cancel was asked while the step's tools ran: the subagent call answers so, and no child run is made
    (a cancel reaches only the children that exist when it is made)."""
    ref, db = _setup(tmp_path)
    with LoopbackAPI() as api:
        for name, value in api.env().items():
            monkeypatch.setenv(name, value)
        store = open_store(db)
        try:
            store.create_run("Should I take an umbrella?", model=MODEL, run_id="cancwriter01")
            lease = store.claim("cancwriter01")
            assert store.cancel_run("cancwriter01", by="ana@desk", reason="enough").asked
            tool = load_agent(ref).tool_named("researcher")
            ctx = ToolContext(store=store, run_id="cancwriter01", today=datetime.date.today(), agent=load_agent(ref),
                              call_id="toolu_parent01", hand_over=runs.hand_over)
            payload, is_error = tool.run(ctx, {"task": "Lisbon's weather today"})
            assert is_error and "not started" in json.dumps(payload) and "cancelled by ana@desk: enough" in \
                json.dumps(payload)
            assert [r.id for r in store.list_runs()] == ["cancwriter01"] and api.calls == 0
            store.release(lease)
        finally:
            store.close()
