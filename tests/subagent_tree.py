"""A parent agent with subagents, for the tests of the tree's front ends (`dayflow show`, `runs --tree`, the dashboard).

The writer asks the researcher (who asks the checker in turn: a grandchild), then asks the checker itself
with a task the loopback API refuses (a child that fails), then answers: a parent done while a child failed.
The runs are made by really driving the agents on the loopback API (``LoopbackAPI`` with ``tree_script``):
in this process (``drive_tree``: fixed parent id, pinned clock, for the snapshots) or through `dayflow run`.
"""

from __future__ import annotations

import json
from pathlib import Path

from .loopback_api import error_reply, message_reply

MODEL = "claude-sonnet-4-5"  # priced (genai-prices), so the tree has dollars; the loopback answers any name
PARENT_ID = "tree-parent-01"

AGENT_FILE = '''
from dayflow_tui import Agent, tool
from dayflow_tui.agent.subagents import tool_from_agent


@tool(read_only=True)
def lookup(city: str) -> dict:
    """Today's weather in a city."""
    return {"ok": True, "city": city, "sky": "dry", "high": 21}


checker = Agent(name="checker", system="Check the facts you are given.", tools=(lookup,))
researcher = Agent(name="researcher", system="Find the facts with lookup.",
                   tools=(lookup, tool_from_agent(checker)))
agent = Agent(name="writer", system="Write the answer; ask the researcher first.",
              tools=(tool_from_agent(researcher), tool_from_agent(checker)),
              task="Should I take an umbrella in Lisbon?")


@tool(needs_approval=True)
def publish(text: str) -> dict:
    """Publish the text."""
    return {"ok": True, "published": text}


publisher = Agent(name="publisher", system="Publish what you are given.", tools=(publish,))
planner = Agent(name="planner", system="Plan with both helpers at once.",
                tools=(tool_from_agent(researcher), tool_from_agent(checker)), task="Plan a day in Lisbon.")
editor = Agent(name="editor", system="Edit, then have it published.", tools=(tool_from_agent(publisher),),
               task="Publish the Lisbon note.")
'''

# Untrusted text in a child's answer: shown literally everywhere, never as markup or a terminal escape.
HOSTILE_ANSWER = "Lisbon is dry [bold]21 C[/] \x1b[31mred\x1b[0m."


def write_agent(directory: Path, name: str = "agent") -> str:
    """The agent file in ``directory``; its reference for `dayflow run` / ``load_agent`` (``name``: the
    writer, ``agent``, or the ``editor`` whose child waits for a person's decision)."""
    path = Path(directory) / "writer_tree.py"
    path.write_text(AGENT_FILE)
    return f"{path}:{name}"


def _system(body: dict) -> str:
    system = body.get("system")
    if isinstance(system, list):
        return " ".join(str(block.get("text", "")) for block in system if isinstance(block, dict))
    return str(system or "")


def _last_result(body: dict) -> str:
    content = body["messages"][-1]["content"]
    block = next(b for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
    inner = block.get("content")
    if isinstance(inner, list):
        return " ".join(str(b.get("text", "")) for b in inner if isinstance(b, dict))
    return str(inner)


def _call(call_id: str, name: str, task: str):
    return message_reply([{"type": "text", "text": f"Asking the {name}."},
                          {"type": "tool_use", "id": call_id, "name": name, "input": {"task": task}}], "tool_use")


def tree_script(handler, body):
    """Every agent of the tree, told apart by its system prompt and how far its conversation is."""
    system = _system(body)
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    task = json.dumps(body["messages"][0]["content"])
    if "Plan with both helpers at once" in system:  # one reply, two subagent calls
        if turns == 0:
            return message_reply([
                {"type": "tool_use", "id": "toolu_plan_r", "name": "researcher", "input": {"task": "Weather?"}},
                {"type": "tool_use", "id": "toolu_plan_c", "name": "checker", "input": {"task": "Museums open?"}},
            ], "tool_use")(handler, body)
        return message_reply([{"type": "text", "text": "Go: dry, museums open."}])(handler, body)
    if "Edit, then have it published" in system:  # the editor: its publisher's call waits for a person
        if turns == 0:
            return _call("toolu_publish01", "publisher", "Publish: Lisbon is dry")(handler, body)
        return message_reply([{"type": "text", "text": "Sent for publishing."}])(handler, body)
    if "Publish what you are given" in system:
        if turns == 0:
            return message_reply([{"type": "tool_use", "id": "toolu_pub01", "name": "publish",
                                   "input": {"text": "Lisbon is dry"}}], "tool_use")(handler, body)
        return message_reply([{"type": "text", "text": "Published."}])(handler, body)
    if "Write the answer" in system:  # the writer (the parent)
        if turns == 0:
            return _call("toolu_research01", "researcher", "Lisbon's weather today")(handler, body)
        if turns == 1:
            return _call("toolu_check01", "checker", "Check the forecast (REFUSE this one)")(handler, body)
        return message_reply([{"type": "text", "text": "No umbrella: dry all day."}])(handler, body)
    if "Find the facts" in system:  # the researcher (a child)
        if turns == 0:
            return _call("toolu_verify01", "checker", "Is Lisbon dry today?")(handler, body)
        return message_reply([{"type": "text", "text": HOSTILE_ANSWER}])(handler, body)
    if "REFUSE" in task:  # the writer's checker: the API refuses it, so that child fails
        return error_reply(400, "loopback refuses this task")
    return message_reply([{"type": "text", "text": "Checked: dry."}])(handler, body)  # the grandchild


def drive_tree(store, directory: Path, api, *, run_id: str = PARENT_ID, at=None, name: str = "agent"):
    """Drive the writer and its subagents in this process (``api``: a ``LoopbackAPI`` whose env is set),
    at a pinned clock when ``at`` is given. Returns the parent's run id."""
    import contextlib

    from dayflow_tui.agent import runs
    from dayflow_tui.agent.registry import load_agent
    from dayflow_tui.tui import demo_data

    api.planned = {n: tree_script for n in range(1, 50)}
    ref = write_agent(directory, name)
    agent = load_agent(ref)
    with demo_data.clock_at(at) if at is not None else contextlib.nullcontext():
        runs.run_brief(store, agent=agent, agent_ref=ref, model=MODEL, run_id=run_id)
    return run_id
