"""Durable subagents as a tree (issue #27): ``Agent(subagents=...)``, the summary handback, children side by
side through a kill -9, the tree's dollar budget, approvals inside a child, and a parent's cancel.

Calls are counted at the loopback API; crashes are kill -9 of the real ``dayflow`` process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from decimal import Decimal

import pytest

from dayflow_tui.agent.define import Agent, ToolDefinitionError, tool
from dayflow_tui.agent.subagents import tool_from_agent
from dayflow_tui.money.cost import run_cost, step_cost
from dayflow_tui.store import open_store, step_blocks

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI, message_reply
from ..reliability_helpers import cli_env

MODEL = "claude-loopback-1"

TREE_FILE = '''
import json
import time
from pathlib import Path

from dayflow_tui import Agent, tool

HERE = Path(__file__).parent


@tool(read_only=True)
def lookup(city: str) -> dict:
    """Today's weather in a city."""
    # A barrier: the first lookup of each child waits (up to 60 s) until the other child has looked up too,
    # so the answer says whether the two children were running at the same time.
    (HERE / f"arrived-{city}").write_text("1")
    deadline = time.monotonic() + 60
    while not all((HERE / f"arrived-{c}").exists() for c in ("Lisbon", "Porto")):
        if time.monotonic() > deadline:
            return {"ok": True, "city": city, "together": False}
        time.sleep(0.05)
    return {"ok": True, "city": city, "sky": "dry", "together": True}


@tool
def note(text: str) -> dict:
    """Write a note down."""
    with open(HERE / "notes.txt", "a") as fh:
        fh.write(text + "\\n")
    return {"ok": True, "noted": text}


researcher = Agent(name="researcher", system="Find the facts with lookup.", tools=(lookup,), max_steps=8)
critic = Agent(name="critic", system="Check the facts with lookup.", tools=(lookup,), max_steps=8,
               handback="summary")
agent = Agent(name="writer", system="Write the answer; ask the researcher and the critic at once.",
              tools=(note,), subagents=[researcher, critic], task="Should I take an umbrella?")
'''

CALLS_IN_ORDER = ["toolu_research", "toolu_note", "toolu_critic"]


def who(body: dict) -> str:
    system = json.dumps(body.get("system"))
    return "researcher" if "Find the facts" in system else "critic" if "Check the facts" in system else "writer"


def turns(body: dict) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def tree_script(handler, body):
    """The writer asks both children and notes in one reply, then answers with their results in order; each
    child looks up twice, then answers."""
    name, turn = who(body), turns(body)
    if name == "writer":
        if turn == 0:
            return message_reply([
                {"type": "text", "text": "Asking both."},
                {"type": "tool_use", "id": "toolu_research", "name": "researcher", "input": {"task": "Lisbon"}},
                {"type": "tool_use", "id": "toolu_note", "name": "note", "input": {"text": "asked"}},
                {"type": "tool_use", "id": "toolu_critic", "name": "critic", "input": {"task": "Porto"}}],
                "tool_use")(handler, body)
        results = body["messages"][-1]["content"]
        order = ",".join(r["tool_use_id"] for r in results)
        return message_reply([{"type": "text", "text": f"order={order}"}])(handler, body)
    city = "Lisbon" if name == "researcher" else "Porto"
    if turn < 2:
        return message_reply([{"type": "tool_use", "id": f"toolu_{name}_{turn}", "name": "lookup",
                               "input": {"city": city}}], "tool_use")(handler, body)
    together = all(json.loads(r["content"])["together"] for m in body["messages"] if m["role"] == "user"
                   and isinstance(m["content"], list) for r in m["content"] if r.get("type") == "tool_result")
    return message_reply([{"type": "text", "text": f"{city} is dry (together={together})."}])(handler, body)


def _tree(db_target):
    store = open_store(db_target)
    try:
        runs = [store.get_run(r.id) for r in store.list_runs(limit=100)]
        by_id = {r.id: r for r in runs}
        (root,) = [r for r in runs if r.parent_id is None]
        children = {r.agent: r for r in runs if r.parent_id == root.id}
        steps = {r.id: store.steps(r.id) for r in runs}
        costs = {r.id: run_cost(store, r.id).total for r in runs}
        return root, children, steps, costs, by_id
    finally:
        store.close()


def _run(args, env, timeout=120):
    return subprocess.run(dayflow_cmd(*args), env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


# -- 1. Agent(subagents=...) and the handback ---------------------------------------------------------------

def _lookup_tool():
    @tool(read_only=True)
    def lookup(city: str) -> dict:
        """Weather."""
        return {"ok": True}

    return lookup


def test_subagents_are_tools_named_after_them_the_same_as_tool_from_agent_and_in_the_fingerprint():
    researcher = Agent(name="researcher", system="Find facts.", tools=(_lookup_tool(),))
    writer = Agent(name="writer", system="Write.", subagents=[researcher])
    by_hand = Agent(name="writer", system="Write.", tools=(tool_from_agent(researcher),))
    assert [t.name for t in writer.tools] == ["researcher"] and writer.tools[0].subagent is researcher
    assert writer.fingerprint() == by_hand.fingerprint()
    summary = Agent(name="writer", system="Write.", subagents=[Agent(name="researcher", system="Find facts.",
                                                                     tools=(_lookup_tool(),), handback="summary")])
    assert summary.fingerprint() != writer.fingerprint()  # what the parent is told is part of what a resume checks
    assert summary.fingerprint() == Agent(name="writer", system="Write.", tools=(
        tool_from_agent(researcher, handback="summary"),)).fingerprint()
    with pytest.raises(ToolDefinitionError, match=r"two tools share a name \(researcher"):
        Agent(name="writer", system="Write.", subagents=[researcher, researcher])
    with pytest.raises(ToolDefinitionError, match="handback must be one of final, summary"):
        Agent(name="critic", system="Check.", handback="everything")
    with pytest.raises(ToolDefinitionError, match="is not a dayflow Agent"):
        Agent(name="writer", system="Write.", subagents=["researcher"])


# -- 2. children side by side, through a kill -9 ---------------------------------------------------------

def test_two_children_run_side_by_side_and_a_kill_resumes_both_with_results_in_call_order(tmp_path, db_target):
    (tmp_path / "writer.py").write_text(TREE_FILE)
    ref, db = f"{tmp_path / 'writer.py'}:agent", db_target
    with LoopbackAPI() as api:
        api.planned = {n: tree_script for n in range(1, 40)}
        child_calls = []
        killed = threading.Event()

        def on_request(number: int) -> None:
            if who(api.requests[number - 1]) != "writer":
                child_calls.append(number)
                if len(child_calls) == 3:  # both children exist, neither can be done: the kill lands here
                    killed.set()

        api.on_request = on_request
        api.delay = 1.0  # each call in flight long enough for the kill to land inside it
        env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0")
        proc = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            assert killed.wait(90), proc.communicate(timeout=5)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        api.delay = 0.0
        calls_at_kill = api.calls
        root, children, steps, _costs, _runs = _tree(db)
        assert set(children) == {"researcher", "critic"}
        assert all(c.status == "running" for c in children.values())  # both interrupted mid-way
        steps_at_kill = sum(len(s) for s in steps.values())
        assert calls_at_kill == steps_at_kill + 1  # the one call in flight (the tree's calls take turns)

        resumed = _run(["resume", root.id, "--db", str(db)], env)
        assert resumed.returncode == 0, resumed.stderr
        root2, children2, steps2, _costs, runs2 = _tree(db)
        assert len(runs2) == 3 and {c.id for c in children2.values()} == {c.id for c in children.values()}
        assert root2.status == "done" and all(c.status == "done" for c in children2.values())
        # The results went back in the reply's tool_use order; the plain note ran once.
        assert root2.final_text == "order=" + ",".join(CALLS_IN_ORDER)
        first = step_blocks(steps2[root2.id][0], "tool_results")
        assert [r["tool_use_id"] for r in first] == CALLS_IN_ORDER
        assert (tmp_path / "notes.txt").read_text() == "asked\n"
        # Each child's first lookup waited for the other's: they ran at the same time.
        assert "together=True" in children2["researcher"].final_text
        critic_result = first[2]["content"]  # handback="summary": the critic's transcript, compacted
        assert critic_result.startswith(f"The critic agent's run {children2['critic'].id} (3 step(s)), compacted:")
        assert 'Step 1:\n- called lookup {"city":"Porto"} -> ok' in critic_result
        assert "Porto is dry (together=True)." in critic_result
        assert first[0]["content"] == "Lisbon is dry (together=True)."  # handback="final"
        steps_total = sum(len(s) for s in steps2.values())
        assert steps_total == 2 + 3 + 3
        assert api.calls == steps_total + 1  # over the tree: calls <= committed steps + deaths, deaths = 1
        print(f"\nMEASURED side-by-side kill: calls={api.calls} steps={steps_total} deaths=1 "
              f"(at the kill: calls={calls_at_kill} steps={steps_at_kill})")


# -- 4. approvals inside a child make the tree wait -------------------------------------------------------

WAIT_FILE = '''
from pathlib import Path

from dayflow_tui import Agent, tool

HERE = Path(__file__).parent


@tool(needs_approval=True)
def send(to: str) -> dict:
    """Send the forecast to someone."""
    with open(HERE / "sent.txt", "a") as fh:
        fh.write(to + "\\n")
    return {"ok": True, "sent": to}


researcher = Agent(name="researcher", system="Find the facts, then send them.", tools=(send,))
agent = Agent(name="writer", system="Write the answer; ask the researcher.", subagents=[researcher],
              task="Tell Ana the forecast.")
'''


def wait_script(handler, body):
    name, turn = ("writer" if "Write the answer" in json.dumps(body.get("system")) else "researcher"), turns(body)
    if name == "writer" and turn == 0:
        return message_reply([{"type": "tool_use", "id": "toolu_ask", "name": "researcher",
                               "input": {"task": "tell Ana"}}], "tool_use")(handler, body)
    if name == "researcher" and turn == 0:
        return message_reply([{"type": "tool_use", "id": "toolu_send", "name": "send",
                               "input": {"to": "ana@example.com"}}], "tool_use")(handler, body)
    last = body["messages"][-1]["content"][0]["content"]
    return message_reply([{"type": "text", "text": f"{name} done: {last}"}])(handler, body)


def test_a_child_waiting_for_approval_makes_the_tree_wait_and_resume_of_the_parent_drives_it_on(
        tmp_path, db_target):
    (tmp_path / "writer.py").write_text(WAIT_FILE)
    ref = f"{tmp_path / 'writer.py'}:agent"
    with LoopbackAPI() as api:
        api.planned = {n: wait_script for n in range(1, 20)}
        env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0")
        started = _run(["run", ref, "--model", MODEL, "--db", db_target], env)
        assert started.returncode == 0, started.stderr
        root, children, steps, _costs, _runs = _tree(db_target)
        child = children["researcher"]
        assert (root.status, child.status) == ("waiting", "waiting")  # the parent waits; not the tool's error
        assert steps[root.id][0].tool_results is None  # the parent's call has no answer yet
        assert f"its subagent researcher (run {child.id}) waits for a decision" in started.stderr
        assert api.calls == 2 and not (tmp_path / "sent.txt").exists()

        pending = _run(["pending", "--db", db_target], env)
        assert pending.returncode == 0, pending.stderr
        assert f"{child.id}  step 1  send  toolu_send" in pending.stdout
        assert f"in researcher (run {child.id}) under run {root.id}" in pending.stdout
        listed = json.loads(_run(["pending", "--json", "--db", db_target], env).stdout)
        assert [(p["run_id"], p["under"]) for p in listed] == [(child.id, [root.id])]

        refused = _run(["resume", root.id, "--db", db_target], env)  # nothing decided yet: nothing runs
        assert refused.returncode != 0 and "Traceback" not in refused.stderr and api.calls == 2
        assert f"waits on its subagent's run {child.id}" in refused.stderr
        assert f"dayflow approve {child.id}" in refused.stderr

        approved = _run(["approve", child.id, "--queue", "--db", db_target], env)
        assert approved.returncode == 0, approved.stderr
        root, children, _steps, _costs, _runs = _tree(db_target)
        assert (root.status, children["researcher"].status) == ("queued", "queued")

        resumed = _run(["resume", root.id, "--db", db_target], env)
        assert resumed.returncode == 0, resumed.stderr
        root, children, steps, _costs, runs = _tree(db_target)
        assert len(runs) == 2 and (root.status, children["researcher"].status) == ("done", "done")
        assert (tmp_path / "sent.txt").read_text() == "ana@example.com\n"  # the approved call ran once
        assert root.final_text.startswith("writer done: researcher done:")
        steps_total = sum(len(s) for s in steps.values())
        assert api.calls == steps_total == 4  # no committed step paid again


# -- 3. one dollar budget over the tree -------------------------------------------------------------------

BUDGET_FILE = '''
from dayflow_tui import Agent, tool


@tool(read_only=True)
def lookup(city: str) -> dict:
    """Today's weather in a city."""
    return {"ok": True, "city": city}


researcher = Agent(name="researcher", system="Find the facts with lookup.", tools=(lookup,), max_steps=200)
critic = Agent(name="critic", system="Check the facts with lookup.", tools=(lookup,), max_steps=200)
agent = Agent(name="writer", system="Write the answer; ask the researcher and the critic at once.",
              subagents=[researcher, critic], task="Should I take an umbrella?", max_steps=200)
'''


def budget_script(handler, body):
    """The children look up forever; only the budget ends them."""
    name, turn = who(body), turns(body)
    if name == "writer" and turn == 0:
        return message_reply([
            {"type": "tool_use", "id": "toolu_research", "name": "researcher", "input": {"task": "Lisbon"}},
            {"type": "tool_use", "id": "toolu_critic", "name": "critic", "input": {"task": "Porto"}}],
            "tool_use")(handler, body)
    if name == "writer":
        return message_reply([{"type": "text", "text": "an answer paid for past the budget"}])(handler, body)
    return message_reply([{"type": "tool_use", "id": f"toolu_{name}_{turn}", "name": "lookup",
                           "input": {"city": "Lisbon"}}], "tool_use")(handler, body)


def test_the_parents_dollar_budget_covers_the_tree_and_stops_it_without_another_parent_call(tmp_path, db_target):
    (tmp_path / "writer.py").write_text(BUDGET_FILE)
    ref = f"{tmp_path / 'writer.py'}:agent"
    budget = Decimal("0.05")
    with LoopbackAPI() as api:
        api.planned = {n: budget_script for n in range(1, 400)}
        env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0")
        done = _run(["run", ref, "--model", "claude-sonnet-4-5", "--budget-usd", str(budget), "--db", db_target],
                    env, timeout=300)
        assert done.returncode == 3, done.stderr
        root, children, steps, costs, runs = _tree(db_target)
        assert root.status == "budget" and "tree's dollar budget" in root.error
        assert len(steps[root.id]) == 1  # no parent call after its children ran out
        assert {c.status for c in children.values()} == {"budget"}
        assert all(len(steps[c.id]) > 3 for c in children.values())  # both spent from the shared budget
        tree_spend = sum(costs.values())
        dearest = max(step_cost(s, s.model).total for run_steps in steps.values() for s in run_steps)
        assert tree_spend <= budget + dearest  # never past the budget by more than one call's price
        assert tree_spend <= budget  # in one process the calls in flight are reserved: not past it at all
        assert api.calls == sum(len(s) for s in steps.values())
        print(f"\nMEASURED tree budget: budget=${budget} spent=${tree_spend} calls={api.calls} "
              f"(parent {len(steps[root.id])}, children {[len(steps[c.id]) for c in children.values()]})")


# -- a parent's cancel stops its tree ------------------------------------------------------------------------

def test_cancelling_the_parent_stops_its_children_side_by_side_before_their_next_call(tmp_path):
    (tmp_path / "writer.py").write_text(BUDGET_FILE)  # children that look up until something stops them
    ref, db = f"{tmp_path / 'writer.py'}:agent", tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: budget_script for n in range(1, 400)}
        both = threading.Event()
        api.on_request = lambda number: both.set() if sum(
            1 for body in api.requests if who(body) != "writer") >= 4 else None
        api.delay = 0.1
        env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0")
        proc = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        try:
            assert both.wait(90)
            root, _children, _steps, _costs, _runs = _tree(db)
            cancelled = _run(["cancel", root.id, "--reason", "enough", "--db", str(db)], env)
            assert cancelled.returncode == 0, cancelled.stderr
            _out, err = proc.communicate(timeout=120)  # the parent's heartbeat sees it; the tree stops
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 3, err
        root, children, steps, _costs, _runs = _tree(db)
        assert root.status == "cancelled" and {c.status for c in children.values()} == {"cancelled"}
        # Asked of each child with its parent (``cancel_below``), or seen through the parent's lease: either way
        # the child says who cancelled.
        assert all("cancelled by" in c.error and "enough" in c.error for c in children.values())
        assert len(steps[root.id]) == 1  # no parent call after the cancel
        assert api.calls == sum(len(s) for s in steps.values())  # every call made was committed


def test_a_reply_whose_own_call_needs_approval_runs_its_children_side_by_side_before_it_waits(tmp_path):
    (tmp_path / "writer.py").write_text(TREE_FILE.replace("@tool\ndef note", "@tool(needs_approval=True)\ndef note"))
    ref, db = f"{tmp_path / 'writer.py'}:agent", str(tmp_path / "dayflow.db")
    with LoopbackAPI() as api:
        api.planned = {n: tree_script for n in range(1, 40)}
        env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0")
        started = _run(["run", ref, "--model", MODEL, "--db", db], env)
        assert started.returncode == 0, started.stderr
        root, children, _steps, _costs, _runs = _tree(db)
        assert root.status == "waiting" and {c.status for c in children.values()} == {"done"}
        assert all("together=True" in c.final_text for c in children.values())  # they ran at the same time
        assert not (tmp_path / "notes.txt").exists()
        pending = _run(["pending", "--db", db], env).stdout
        assert f"{root.id}  step 1  note  toolu_note" in pending and " under run " not in pending
        approved = _run(["approve", root.id, "--db", db], env)
        assert approved.returncode == 0, approved.stderr
        root, children, steps, _costs, runs = _tree(db)
        assert root.status == "done" and root.final_text == "order=" + ",".join(CALLS_IN_ORDER)
        assert (tmp_path / "notes.txt").read_text() == "asked\n" and len(runs) == 3
        assert api.calls == sum(len(s) for s in steps.values()) == 2 + 3 + 3


def test_a_kill_after_both_children_finished_resumes_the_parent_alone_with_no_child_call(tmp_path):
    (tmp_path / "writer.py").write_text(TREE_FILE)
    ref, db = f"{tmp_path / 'writer.py'}:agent", str(tmp_path / "dayflow.db")
    with LoopbackAPI() as api:
        api.planned = {n: tree_script for n in range(1, 40)}
        last_call = threading.Event()
        api.on_request = lambda number: last_call.set() if (
            who(api.requests[number - 1]) == "writer" and turns(api.requests[number - 1]) == 1) else None
        api.delay = 1.0
        env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0")
        proc = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", db), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            assert last_call.wait(90)  # the parent's second call: both children are done, their answers kept
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        api.delay = 0.0
        child_calls = sum(1 for body in api.requests if who(body) != "writer")
        resumed = _run(["resume", _tree(db)[0].id, "--db", db], env)
        assert resumed.returncode == 0, resumed.stderr
        root, children, steps, _costs, runs = _tree(db)
        assert root.status == "done" and len(runs) == 3
        assert sum(1 for body in api.requests if who(body) != "writer") == child_calls == 6  # no child call again
        assert api.calls == sum(len(s) for s in steps.values()) + 1 == 9  # one death, one call lost
