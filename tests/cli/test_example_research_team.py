"""examples/research_team.py through the real CLI on the offline model: a parent hands its task to two
subagents side by side (the offline model calls a subagent's tool as it calls read-only tools), one hands
back its compacted transcript; killed while the children work, a resume pays no committed step again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from ..conftest import dayflow_cmd

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "research_team.py"


def _env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "DAYFLOW_DB")}
    env.update({"DAYFLOW_DB": str(tmp_path / "team.db"), "DAYFLOW_CALL_LOG": str(tmp_path / "calls.log"),
                "DAYFLOW_OFFLINE_DELAY": "0", **extra})
    return env


def _run(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(dayflow_cmd(*args), capture_output=True, text=True, env=_env(tmp_path, **extra),
                          timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)


def _tree(tmp_path: Path) -> list[dict]:
    done = _run(tmp_path, "runs", "--tree", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _calls(tmp_path: Path) -> int:
    log = tmp_path / "calls.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_the_example_runs_offline_as_a_tree_of_three(tmp_path):
    done = _run(tmp_path, "run", f"{EXAMPLE}:agent", "What does the README say about crashes?")
    assert done.returncode == 0, done.stderr
    rows = _tree(tmp_path)
    assert [(r["agent"], r["depth"], r["status"]) for r in rows] == [
        ("research-team", 0, "done"), ("researcher", 1, "done"), ("critic", 1, "done")]
    assert "critic agent's run" in done.stdout and "compacted" in done.stdout  # handback="summary"
    assert "find_in_docs" in done.stdout  # the children's own tools ran
    steps = sum(r["steps"] for r in rows)
    assert _calls(tmp_path) == steps == 6


def test_killed_while_the_children_work_the_resume_pays_no_committed_step_again(tmp_path):
    slow = {"DAYFLOW_OFFLINE_DELAY": "0.6"}
    proc = subprocess.Popen(dayflow_cmd("run", f"{EXAMPLE}:agent", "crashes?"), env=_env(tmp_path, **slow),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            cwd=tmp_path, start_new_session=True)
    deadline = time.monotonic() + 60
    while _calls(tmp_path) < 3 and time.monotonic() < deadline:  # the parent's call, then a child's
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert _calls(tmp_path) >= 3
    parent = _tree(tmp_path)[0]
    resumed = _run(tmp_path, "resume", parent["id"])
    assert resumed.returncode == 0, resumed.stderr
    rows = _tree(tmp_path)
    assert [r["status"] for r in rows] == ["done", "done", "done"]
    assert len(rows) == 3  # the same two children resumed, no third
    assert _calls(tmp_path) <= sum(r["steps"] for r in rows) + 1  # calls <= committed steps + 1 death
