"""Run titles (issue #30): given by the agent (``Agent(title=...)``), set by its model (``set_title``), or made
from the task and the answer; shown by ``dayflow runs`` and ``show`` as text.

The crash test runs the real console script, kills it (SIGKILL) after ``set_title`` wrote the title and
before the call's result was kept, and resumes it: the call runs again and changes nothing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
import time

from ..conftest import dayflow_cmd
from ..reliability_helpers import cli_env, dayflow, text

AGENT_FILE = '''
from dayflow_tui.agent.define import Agent, tool
from dayflow_tui.agent.titles import set_title

@tool(read_only=True)
def look() -> dict:
    """Look things up."""
    return {"ok": True, "found": ["a"]}

titled = Agent(name="titled", system="You look things up.", tools=(look, set_title), task="Look it up.")
templated = Agent(name="templated", system="You look things up.", tools=(look,), task="Look it up.",
                  title="Lookup: {task}")
'''


def write_agents(tmp_path) -> str:
    path = tmp_path / "title_agents.py"
    path.write_text(textwrap.dedent(AGENT_FILE))
    return str(path)


def titling_api(title: str):
    """A loopback API whose model calls set_title, then answers."""
    from ..loopback_api import LoopbackAPI, message_reply

    api = LoopbackAPI()
    api.planned[1] = message_reply([{"type": "tool_use", "id": "toolu_title", "name": "set_title",
                                     "input": {"title": title}}], "tool_use")
    api.planned[2] = message_reply([{"type": "text", "text": "Done looking."}], "end_turn")
    return api


def runs_json(db, env) -> list[dict]:
    return json.loads(dayflow("runs", "--json", db=db, env=env).stdout)


def test_set_title_killed_before_its_result_was_kept_runs_again_and_changes_nothing(backend, db_target, tmp_path):
    agents = write_agents(tmp_path)
    trace = tmp_path / "trace"
    with titling_api("Weekly lookup") as api:
        env = cli_env(**api.env(), DAYFLOW_TEST_TRACE=str(trace), DAYFLOW_TEST_PAUSE_IN="answer:30")
        victim = subprocess.Popen(dayflow_cmd("run", f"{agents}:titled", "--model", "claude-loopback-1",
                                              "--db", db_target),
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        # "answer" is inside the transaction that keeps the call's result: the title was committed before it.
        while not (trace.exists() and "answer" in trace.read_text().split()):
            assert victim.poll() is None, victim.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        [run] = runs_json(db_target, cli_env())
        assert run["title"] == "Weekly lookup" and run["title_given"] is True and run["status"] == "interrupted"
        resumed = dayflow("resume", run["id"], db=db_target, env=cli_env(**api.env()))
        assert resumed.returncode == 0, text(resumed.stderr)
        assert api.calls == 2  # the committed step was not bought again
    [run] = runs_json(db_target, cli_env())
    assert run["status"] == "done" and run["title"] == "Weekly lookup"
    shown = json.loads(dayflow("show", run["id"], "--jsonl", db=db_target).stdout.splitlines()[0])
    [result] = [json.loads(r["content"]) for r in shown["tool_results"]]
    # Either the result was kept before the kill (the call is not run again) or it was not, and the call ran
    # again: then the store found the title it had and changed nothing.
    assert result["ok"] is True and result["title"] == "Weekly lookup"


def test_a_title_from_the_agent_a_made_one_and_markup_shown_as_text(tmp_path):
    agents = write_agents(tmp_path)
    db = tmp_path / "t.db"
    made = dayflow("brief", db=db)
    assert made.returncode == 0, text(made.stderr)
    # (How the offline model fares with this agent's tools is not the point: the run is titled at creation.)
    dayflow("run", f"{agents}:templated", "Find the [bold]red[/bold] \x1b[31mfile\nsecond line", db=db, env=cli_env())
    rows = {r["agent"]: r for r in runs_json(db, cli_env())}
    assert rows["templated"]["title"] == "Lookup: Find the [bold]red[/bold] \\x1b[31mfile"
    assert rows["templated"]["title_given"] is True
    brief = rows["brief"]
    assert brief["status"] == "done" and brief["title_given"] is False
    assert brief["title"].startswith("Read my inbox") and " → " in brief["title"]
    listing = dayflow("runs", db=db).stdout.decode()
    assert "· Lookup: Find the [bold]red[/bold] \\x1b[31mfile" in listing and "\x1b" not in listing
    shown = dayflow("show", rows["templated"]["id"], db=db, env=cli_env(COLUMNS="200")).stdout.decode()
    assert "title Lookup: Find the [bold]red[/bold] \\x1b[31mfile" in shown and "\x1b[31m" not in shown
