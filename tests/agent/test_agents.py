"""Agents as code (#12): ``@tool``, ``Agent``, ``dayflow run``, agent versions and the per-call journal.

The crash test defines its agent in a file outside the package, runs it through the real console
script, kills it with SIGKILL while its tools run, and resumes it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Annotated, Literal

import pytest

from dayflow_tui.agent.define import IDEMPOTENT, PLAIN, READ_ONLY, Agent, Param, ToolDefinitionError, tool
from dayflow_tui.agent.tools import ToolContext

from ..conftest import dayflow_cmd
from ..crash_harness import read_db
from ..reliability_helpers import call_count, cli_env, dayflow, fingerprint, text

# The brief's schemas as they were written by hand before tools were code: the derived ones must be these bytes.
BRIEF_SCHEMAS = [
    {"name": "read_inbox",
     "description": "Read the newest mails in the user's inbox (sender, subject, received time, snippet).",
     "input_schema": {"type": "object", "properties": {"limit": {
         "type": "integer", "minimum": 1, "maximum": 50, "description": "How many mails, newest first (default 20)."}},
         "additionalProperties": False}},
    {"name": "read_calendar", "description": "Read the user's calendar events for today or for the coming week.",
     "input_schema": {"type": "object", "properties": {"range": {"type": "string", "enum": ["today", "week"]}},
                      "required": ["range"], "additionalProperties": False}},
    {"name": "read_tasks", "description": "Read the user's task list.",
     "input_schema": {"type": "object", "properties": {"include_done": {
         "type": "boolean", "description": "Also list finished tasks."}}, "additionalProperties": False}},
    {"name": "create_task",
     "description": ("Create a follow-up task. idempotency_key must be stable for the thing the task is about (for "
                     "example 'mail-<mail id>'): a key that exists returns the existing task."),
     "input_schema": {"type": "object", "properties": {
         "title": {"type": "string", "minLength": 1, "maxLength": 200},
         "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 200},
         "due": {"type": "string", "format": "date", "description": "YYYY-MM-DD"},
         "notes": {"type": "string", "maxLength": 2000}},
         "required": ["title", "idempotency_key"], "additionalProperties": False}},
]


def test_the_built_in_brief_sends_the_same_bytes_as_before_tools_were_code():
    from dayflow_tui.agent.brief import AGENT

    assert json.dumps(AGENT.schemas) == json.dumps(BRIEF_SCHEMAS)
    assert [t.kind for t in AGENT.tools] == [READ_ONLY, READ_ONLY, READ_ONLY, IDEMPOTENT]


def test_a_schema_is_derived_from_the_signature_and_the_docstring():
    @tool
    def book(ctx: ToolContext, room: Literal["A", "B"], seats: Annotated[int, Param(minimum=1, maximum=9)],
             note: str | None = None, tags: list[str] = (), ratio: float = 1.0, urgent: bool = False,
             extra: dict | None = None) -> dict:
        """Book a room.

        More words that are not the description.

        Args:
            room: Which room.
            note: Anything to tell the desk,
                over two lines.
        """
        return {"ok": True}

    assert book.kind == PLAIN and book.takes_context and book.description == "Book a room."
    schema = book.input_schema
    assert schema["required"] == ["room", "seats"] and schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["room"] == {"type": "string", "enum": ["A", "B"], "description": "Which room."}
    assert props["seats"] == {"type": "integer", "minimum": 1, "maximum": 9}
    assert props["note"] == {"type": "string", "description": "Anything to tell the desk, over two lines."}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["ratio"] == {"type": "number"} and props["urgent"] == {"type": "boolean"}
    assert props["extra"] == {"type": "object"}
    assert "ctx" not in props


def test_arguments_are_checked_before_the_function_runs_and_failures_are_results():
    ran = []

    @tool(idempotent="key")
    def send(key: str, count: Annotated[int, Param(minimum=1)]) -> dict:
        """Send it."""
        ran.append((key, count))
        if count == 99:
            raise RuntimeError("the mail server said no")
        return {"ok": True}

    assert send.kind == IDEMPOTENT and send.key == "key"
    for bad in ([], {"key": "k"}, {"key": "k", "count": 0}, {"key": "k", "count": "2"}, {"key": 1, "count": 2},
                {"key": "k", "count": 2, "other": 1}, {"key": "a\x00b", "count": 1}):
        payload, is_error = send.run(None, bad)
        assert is_error and payload["error"]["code"] == "invalid_input", bad
    assert ran == []
    payload, is_error = send.run(None, {"key": "k", "count": 99})
    assert is_error and payload["error"]["code"] == "tool_error" and "said no" in payload["error"]["message"]
    assert send.run(None, {"key": "k", "count": 2}) == ({"ok": True}, False)


def test_functions_that_cannot_be_tools_and_agents_that_cannot_be_agents_are_refused():
    with pytest.raises(ToolDefinitionError):
        @tool
        def spread(*args: str) -> None:
            """No."""

    with pytest.raises(ToolDefinitionError):
        @tool
        def odd(when: complex) -> None:
            """No."""

    with pytest.raises(ToolDefinitionError):
        tool(idempotent="missing")(lambda key: None)

    @tool
    def one(x: int) -> int:
        """One."""
        return x

    with pytest.raises(ToolDefinitionError):
        Agent(name="twice", system="s", tools=(one, one))
    with pytest.raises(ToolDefinitionError):
        Agent(name="bad name!", system="s")


AGENT_FILE = '''
import os, time
from typing import Annotated
from dayflow_tui.agent.define import Agent, Param, tool

LOG = os.environ["AGENT_TEST_LOG"]

def note(line):
    with open(LOG, "a") as fh:
        fh.write(line + "\\n")

@tool(read_only=True)
def look(topic: str = "all") -> dict:
    """Look things up."""
    note("look")
    return {"ok": True, "found": ["a", "b", "c"]}

@tool(idempotent="key")
def file_task(ctx, key: str, title: str) -> dict:
    """File a task once per key."""
    task, created = ctx.store.create_task(idempotency_key=key, title=title, run_id=ctx.run_id)
    note(f"file {key} {created}")
    time.sleep(float(os.environ.get("AGENT_TEST_SLOW", "0")))
    return {"ok": True, "created": created}

@tool
def ring_bell(times: Annotated[int, Param(minimum=1, maximum=3)] = 1) -> dict:
    """Ring the office bell (a side effect that must never happen twice)."""
    note("bell start")
    time.sleep(float(os.environ.get("AGENT_TEST_SLOW", "0")))
    note("bell done")
    return {"ok": True, "rang": times}

agent = Agent(name="office", system="SYSTEM_TEXT", tools=(look, file_task, ring_bell), max_steps=6,
              task="Do the office chores.")
'''


def write_agent(path: Path, system: str = "You do office chores.") -> str:
    path.write_text(textwrap.dedent(AGENT_FILE).replace("SYSTEM_TEXT", system))
    return f"{path}:agent"


def scripted_api():
    """A loopback API whose replies call: look; then file_task x3 and ring_bell; then end."""
    from ..loopback_api import LoopbackAPI, message_reply

    api = LoopbackAPI()
    api.planned[1] = message_reply([{"type": "tool_use", "id": "toolu_look", "name": "look", "input": {}}],
                                   "tool_use")
    api.planned[2] = message_reply(
        [{"type": "tool_use", "id": f"toolu_file{i}", "name": "file_task",
          "input": {"key": f"chore-{i}", "title": f"Chore {i}"}} for i in range(3)]
        + [{"type": "tool_use", "id": "toolu_bell", "name": "ring_bell", "input": {"times": 2}}], "tool_use")
    api.planned[3] = message_reply([{"type": "text", "text": "All chores filed; the bell rang."}], "end_turn")
    return api


@pytest.mark.parametrize("kill_at", ["file chore-2", "bell start"])
def test_an_agent_from_a_file_killed_while_its_tools_run_resumes_exact_to_the_call(backend, db_target, tmp_path,
                                                                                  kill_at):
    log = tmp_path / "tools.log"
    ref = write_agent(tmp_path / "office_agent.py")
    with scripted_api() as api:
        env = cli_env(**api.env(), AGENT_TEST_LOG=str(log), AGENT_TEST_SLOW="1.5")
        victim = subprocess.Popen(dayflow_cmd("run", ref, "--model", "claude-loopback-1", "--db", db_target),
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not (log.exists() and any(line.startswith(kill_at) for line in log.read_text().splitlines())):
            assert victim.poll() is None, victim.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        [run] = json.loads(dayflow("runs", "--json", db=db_target, env=env).stdout)
        assert run["agent"] == "office" and run["status"] == "interrupted"
        resumed = dayflow("resume", run["id"], db=db_target, env=cli_env(**api.env(), AGENT_TEST_LOG=str(log)))
        assert resumed.returncode == 0, text(resumed.stderr)
        assert api.calls == 3  # committed steps never bought again: 3 calls for 3 steps, after a kill
    lines = log.read_text().splitlines()
    state = read_db(db_target)
    assert state.runs[0]["status"] == "done"
    keys = [t["idempotency_key"] for t in state.tasks if t["run_id"] == run["id"]]
    assert sorted(keys) == ["chore-0", "chore-1", "chore-2"]  # each side effect once
    results = {r["tool_use_id"]: json.loads(r["content"]) for r in json.loads(state.steps[1]["tool_results"])}
    # The calls that completed before the kill were not run again (their kept results were reused).
    assert lines.count("file chore-0 True") == 1 and lines.count("file chore-1 True") == 1
    assert "file chore-0 False" not in lines and "file chore-1 False" not in lines
    assert not any(result.get("created") is False for result in results.values() if "created" in result
                   and kill_at == "bell start")  # every file_task result was kept before the bell started
    if kill_at == "bell start":
        # The plain tool was started and never finished: not run again, answered "outcome unknown".
        assert lines.count("bell start") == 1 and "bell done" not in lines
        assert results["toolu_bell"]["error"]["code"] == "outcome_unknown"
    else:
        assert lines.count("bell start") == 1 and lines.count("bell done") == 1
        assert results["toolu_bell"] == {"ok": True, "rang": 2}


def test_a_changed_agent_is_refused_on_resume_unless_allowed(db_path, tmp_path):
    db = str(db_path)
    log = tmp_path / "tools.log"
    ref = write_agent(tmp_path / "office_agent.py")
    env = cli_env(AGENT_TEST_LOG=str(log), DAYFLOW_CALL_LOG=str(tmp_path / "calls.log"))
    crashed = dayflow("run", ref, "--crash-after", "1", db=db, env=env)
    assert "simulated crash" in text(crashed.stderr)
    run_id = json.loads(dayflow("runs", "--json", db=db, env=env).stdout)[0]["id"]
    write_agent(tmp_path / "office_agent.py", system="You do office chores, politely.")
    before = fingerprint(db_path)
    refused = dayflow("resume", run_id, db=db, env=env)
    err = text(refused.stderr)
    assert refused.returncode == 1 and "changed" in err and "system prompt" in err and "--allow-changed-agent" in err
    assert len(err.strip().splitlines()) == 1 and fingerprint(db_path) == before  # nothing written
    assert dayflow("worker", "--once", db=db, env=env).returncode == 0  # a worker does not go on silently
    assert json.loads(dayflow("runs", "--json", db=db, env=env).stdout)[0]["status"] != "done"
    allowed = dayflow("resume", run_id, "--allow-changed-agent", db=db, env=env)
    assert allowed.returncode == 0, text(allowed.stderr)
    assert call_count(tmp_path / "calls.log") == 2  # step 1 (before the crash), step 2 (after): none repeated
    with_new = [r for r in read_db(db).runs if r["id"] == run_id][0]
    assert "politely" in with_new["agent_shape"]  # the run records the definition it went on with


def test_an_agent_that_cannot_be_loaded_is_one_line_and_changes_nothing(db_path, tmp_path):
    db = str(db_path)
    env = cli_env()
    assert dayflow("brief", db=db, env=env).returncode == 0
    before = fingerprint(db_path)
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('this agent file is broken')\n")
    for spec in (f"{broken}:agent", f"{tmp_path}/missing.py:agent", "no_such_module_xyz:agent", "nocolon",
                 "json:loads"):
        result = dayflow("run", spec, "do it", db=db, env=env)
        err = text(result.stderr)
        missing = spec.startswith(f"{tmp_path}/missing.py")  # a missing file is 64 for every command (issue #30)
        assert result.returncode == (64 if missing else 1), (spec, result.returncode, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (spec, err)
    assert fingerprint(db_path) == before


def test_the_example_agent_runs_offline_and_shows_in_the_run_list(db_path, tmp_path):
    db = str(db_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("x = 1  # TODO: drop this\n")
    example = Path(__file__).resolve().parents[2] / "examples" / "todo_triage.py"
    result = subprocess.run(dayflow_cmd("run", f"{example}:agent", "Triage the TODOs", "--db", db), env=cli_env(),
                            capture_output=True, text=True, cwd=repo, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert "drop this" in result.stdout
    listing = dayflow("runs", db=db, env=cli_env()).stdout.decode()
    assert "agent=todo-triage" in listing


def test_the_example_agents_gated_tool_waits_for_approval_and_runs_once(db_path, tmp_path):
    from ..loopback_api import LoopbackAPI, message_reply

    db = str(db_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    example = Path(__file__).resolve().parents[2] / "examples" / "todo_triage.py"
    with LoopbackAPI() as api:
        api.planned[1] = message_reply([{"type": "tool_use", "id": "toolu_issue", "name": "open_issue",
                                         "input": {"title": "Redesign error handling", "body": "See FIXME."}}],
                                       "tool_use")
        api.planned[2] = message_reply([{"type": "text", "text": "Opened one issue."}], "end_turn")
        env = cli_env(**api.env())

        def cli(*args):
            return subprocess.run(dayflow_cmd(*args, "--db", db), env=env, capture_output=True, text=True,
                                  cwd=repo, timeout=120, stdin=subprocess.DEVNULL)

        started = cli("run", f"{example}:agent", "--model", "claude-loopback-1")
        assert started.returncode == 0 and "open_issue" in started.stderr, started.stderr
        assert not (repo / "ISSUES.md").exists() and api.calls == 1  # it waits: nothing written, nothing bought
        [waiting] = json.loads(cli("pending", "--json").stdout)
        assert waiting["tool"] == "open_issue"
        approved = cli("approve", waiting["run_id"], "--all")
        assert approved.returncode == 0, approved.stderr
        assert "Opened one issue." in approved.stdout and api.calls == 2
    assert (repo / "ISSUES.md").read_text().count("## Redesign error handling") == 1


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_the_dashboard_lists_and_resumes_a_run_of_the_example_agent(store, tmp_path, monkeypatch):
    from dayflow_tui.agent import runs
    from dayflow_tui.agent.offline import OfflineClient
    from dayflow_tui.agent.registry import load_agent, resolve_ref
    from dayflow_tui.tui.app import DayflowApp

    from ..conftest import CountingClient
    from ..tui_helpers import SIZE, open_run, screen_text, settle, wait_for

    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text("x = 1  # TODO: drop this\n")
    ref = resolve_ref(str(Path(__file__).resolve().parents[2] / "examples" / "todo_triage.py") + ":agent")
    agent = load_agent(ref)
    with pytest.raises(SystemExit):
        runs.run_brief(store, agent=agent, agent_ref=ref, client=OfflineClient(delay=0), crash_after_step=1)
    [run] = store.list_runs()
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "[todo-triage]" in screen_text(app)
        screen = await open_run(pilot, run.id)
        await pilot.press("r")
        await wait_for(pilot, lambda: screen.run is not None and screen.run.status == "done" and not app.is_driving)
    assert client.calls == 1  # the step after the crash only
    assert "drop this" in store.get_run(run.id).final_text
