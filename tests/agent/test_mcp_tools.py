"""Tools from a real stdio MCP server (issue #27): the annotations decide what may run again after a kill,
through the real console script, the real SDK and a loopback model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dayflow_tui.agent.define import IDEMPOTENT, PLAIN, READ_ONLY
from dayflow_tui.agent.registry import load_agent
from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI, message_reply
from ..reliability_helpers import cli_env

SERVER = Path(__file__).parent / "mcp_fixtures" / "counting_server.py"
SECRET = "mcp-secret-token-7f3a9c"
MODEL = "claude-loopback-1"


def agent_file(tmp_path: Path, *, slow: float = 0.0, timeout: float = 20) -> tuple[str, Path]:
    count = tmp_path / "calls.txt"
    path = tmp_path / "mcp_agent.py"
    path.write_text(f'''
from dayflow_tui import Agent, mcp

agent = Agent(name="mcpdemo", system="Use the tools.", task="What's the weather in Lisbon?", mcp_servers=[
    mcp.stdio("counting", {sys.executable!r}, {str(SERVER)!r}, timeout_s={timeout},
              env={{"COUNT_FILE": {str(count)!r}, "SLOW_S": "{slow}"}}, secrets={{"COUNTING_TOKEN": {SECRET!r}}},
              auto_approve=["send"])])
''')
    return f"{path}:agent", count


def bodies(count: Path) -> list[str]:
    return [" ".join(line.split()[:2]) for line in count.read_text().splitlines()] if count.exists() else []


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return cli_env(DAYFLOW_STATE_DIR=str(tmp_path / "state"), **extra)


def test_the_servers_annotations_decide_each_tools_kind_and_approval(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYFLOW_STATE_DIR", str(tmp_path / "state"))
    ref, _count = agent_file(tmp_path)
    agent = load_agent(ref)
    found = {t.name: (t.kind, bool(t.needs_approval), t.server) for t in agent.tools}
    assert found == {
        "counting__look": (READ_ONLY, False, "counting"),  # readOnlyHint
        "counting__radar": (READ_ONLY, False, "counting"),
        "counting__put": (IDEMPOTENT, False, "counting"),  # idempotentHint, destructiveHint false
        "counting__send": (PLAIN, False, "counting"),  # no annotations: plain; auto_approve lets it go
        "counting__wipe": (PLAIN, True, "counting"),  # destructive: a person decides
    }
    shape = json.dumps(agent.describe())
    assert "COUNTING_TOKEN" in shape and SECRET not in shape  # a secret's name is recorded, never its value
    assert agent.schemas[0]["input_schema"]["properties"]["city"]["type"] == "string"  # as the server gave it


def test_an_offline_run_calls_the_read_only_tools_once_with_images_and_keeps_secrets_out(tmp_path):
    ref, count = agent_file(tmp_path)
    db = tmp_path / "dayflow.db"
    done = subprocess.run(dayflow_cmd("run", ref, "--db", str(db)), env=env_for(tmp_path), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert sorted(bodies(count)) == ["end look", "end radar", "start look", "start radar"]
    assert "counting server up" not in done.stderr + done.stdout  # the server's stderr went to its log
    assert "counting server up" in (tmp_path / "state" / "mcp" / "counting.log").read_text()
    store = open_store(db)
    try:
        (run,) = store.list_runs()
        results = [b for s in store.steps(run.id) for b in json.loads(s.tool_results or "[]")]
        radar = next(r for r in results if isinstance(r["content"], list))
        assert [part["type"] for part in radar["content"]] == ["text", "image"]
        assert radar["content"][1]["source"]["media_type"] == "image/png"
    finally:
        store.close()
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "mcp_agent.py":
            assert SECRET.encode() not in path.read_bytes(), path


def _calls_then_answers(tool: str, arguments: dict):
    """The model calls ``tool`` once, then answers."""
    def plan(handler, body):
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turns == 0:
            return message_reply([{"type": "tool_use", "id": "toolu_mcp01", "name": tool, "input": arguments}],
                                 "tool_use")(handler, body)
        return message_reply([{"type": "text", "text": "Done."}])(handler, body)
    return plan


def _killed_mid_call(tmp_path, tool: str, arguments: dict, body: str):
    """``dayflow run`` against the loopback model, SIGKILLed while the MCP tool's body sleeps; then resumed."""
    ref, count = agent_file(tmp_path, slow=30)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: _calls_then_answers(tool, arguments) for n in range(1, 10)}
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0")
        proc = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while f"start {body}" not in bodies(count) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert f"start {body}" in bodies(count), proc.communicate(timeout=5)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        (tmp_path / "calls.txt.fast").touch()  # the resumed (fresh) server answers at once
        resumed = subprocess.run(dayflow_cmd("resume", _only_run(db), "--db", str(db)), env=env,
                                 capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        return api, db, count, resumed


def _only_run(db: Path) -> str:
    store = open_store(db)
    try:
        (run,) = store.list_runs()
        return run.id
    finally:
        store.close()


def _results(db: Path) -> list[dict]:
    store = open_store(db)
    try:
        (run,) = store.list_runs()
        assert run.status == "done", (run.status, run.error)
        return [b for s in store.steps(run.id) for b in json.loads(s.tool_results or "[]")]
    finally:
        store.close()


def test_a_plain_mcp_tool_killed_mid_call_is_never_run_again(tmp_path):
    api, db, count, resumed = _killed_mid_call(tmp_path, "counting__send", {"text": "hello"}, "send")
    assert resumed.returncode == 0, resumed.stderr
    assert bodies(count).count("start send") == 1  # the side effect that must not happen twice did not
    (result,) = _results(db)
    assert result["is_error"] is True and "outcome_unknown" in result["content"]
    assert api.calls == 2  # one paid reply per step: the kill lost no call


def test_an_idempotent_mcp_tool_killed_mid_call_runs_again(tmp_path):
    api, db, count, resumed = _killed_mid_call(tmp_path, "counting__put", {"key": "k", "value": "v"}, "put")
    assert resumed.returncode == 0, resumed.stderr
    assert bodies(count).count("start put") == 2 and bodies(count).count("end put") == 1
    (result,) = _results(db)
    assert "stored k" in json.dumps(result) and not result.get("is_error")
    assert api.calls == 2


def test_a_server_that_dies_mid_call_is_a_failed_attempt_not_the_tools_outcome(tmp_path):
    ref, count = agent_file(tmp_path)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: _calls_then_answers("counting__send", {"text": "crash"}) for n in range(1, 10)}
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0")
        first = subprocess.run(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                               capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert first.returncode == 75, first.stderr
        assert "MCP server counting" in first.stderr and "Traceback" not in first.stderr
        store = open_store(db)
        try:
            (run,) = store.list_runs()
            # The step was committed in this attempt (progress), so no attempt is counted against the run.
            assert run.status not in ("failed", "done") and run.step_count == 1
            (step,) = store.steps(run.id)
            assert step.tool_results is None  # no outcome was made up for the call
        finally:
            store.close()
        resumed = subprocess.run(dayflow_cmd("resume", run.id, "--db", str(db)), env=env, capture_output=True,
                                 text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert resumed.returncode == 0, resumed.stderr
        assert bodies(count).count("start send") == 1  # it started once; the resume did not start it again
        (result,) = _results(db)
        assert "outcome_unknown" in result["content"]
        assert api.calls == 2


def test_a_tool_list_that_changed_between_a_crash_and_a_resume_is_a_changed_agent(tmp_path):
    ref, count = agent_file(tmp_path)
    db = tmp_path / "dayflow.db"
    started = subprocess.run(dayflow_cmd("run", ref, "--max-steps", "1", "--db", str(db)), env=env_for(tmp_path),
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert started.returncode in (0, 3), started.stderr
    run_id = _only_run(db)
    before = db.read_bytes()
    Path(str(count) + ".v2").touch()  # the server now lists one more tool
    refused = subprocess.run(dayflow_cmd("resume", run_id, "--db", str(db)), env=env_for(tmp_path),
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert refused.returncode == 1 and "changed" in refused.stderr and "counting__extra" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert db.read_bytes() == before


def test_a_server_that_hangs_is_cut_at_its_per_call_timeout(tmp_path):
    ref, count = agent_file(tmp_path, slow=60, timeout=2)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: _calls_then_answers("counting__put", {"key": "k", "value": "v"}) for n in range(1, 10)}
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0")
        started = time.monotonic()
        hung = subprocess.run(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert hung.returncode == 75 and "did not answer within 2 s" in hung.stderr
        assert time.monotonic() - started < 30
        assert api.calls == 1


def test_a_destructive_mcp_tool_waits_for_a_person_and_runs_once_approved(tmp_path):
    ref, count = agent_file(tmp_path)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: _calls_then_answers("counting__wipe", {"key": "k"}) for n in range(1, 10)}
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0")
        waiting = subprocess.run(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                                 capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert waiting.returncode == 0 and "[waiting" in waiting.stderr and "start wipe" not in bodies(count)
        run_id = _only_run(db)
        approved = subprocess.run(dayflow_cmd("approve", run_id, "--all", "--db", str(db)), env=env,
                                  capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert approved.returncode == 0, approved.stderr
        assert bodies(count).count("start wipe") == 1
        assert "wiped k" in json.dumps(_results(db)) and api.calls == 2


def test_the_example_mcp_agent_runs_offline(tmp_path):
    example = Path(__file__).parents[2] / "examples" / "mcp_agent.py"
    done = subprocess.run(dayflow_cmd("run", f"{example}:agent", "--db", str(tmp_path / "x.db")),
                          env=env_for(tmp_path), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "weather__forecast" in done.stdout and "21 °C" in done.stdout
