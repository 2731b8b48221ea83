"""Kill the dashboard (the real ``dayflow-tui`` in a tmux pane) while its worker drives a run.

First the worker drives a new run (``n``) and is SIGKILLed in the middle of
its tools; then a second dashboard resumes that run (``r``) and is killed
while it waits on the model; then ``dayflow resume`` finishes it. The run
must be the same one, steps 1..N without a gap, totals equal to the sum of
the steps, every task once, and at most one paid call lost per kill.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from datetime import date

import pytest

from ..crash_harness import check_invariants, expected_task_keys, read_db
from ..reliability_helpers import call_count, cli_env, dayflow, text
from ..tui_helpers import TUI_BIN

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


class Dashboard:
    """One ``dayflow-tui`` process in a private tmux server (its own socket: nobody else's sessions)."""

    def __init__(self, db, env: dict[str, str]):
        self.socket = f"dayflow-crash-{os.getpid()}-{time.monotonic_ns()}"
        assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
        command = f"exec env -i {assignments} {shlex.quote(str(TUI_BIN))} --db {shlex.quote(str(db))}"
        self.tmux("new-session", "-d", "-s", "dash", "-x", "120", "-y", "36", command)
        self.pid = int(self.tmux("display-message", "-p", "-t", "dash", "#{pane_pid}").strip())

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], check=True,
                              capture_output=True, text=True, timeout=30).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "dash")

    def wait_for_screen(self, fragment: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while fragment not in self.screen():
            assert time.monotonic() < deadline, f"{fragment!r} never appeared:\n{self.screen()}"
            time.sleep(0.1)

    def press(self, key: str) -> None:
        self.tmux("send-keys", "-t", "dash", key)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(self.pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def wait_for_trace(trace, phase: str, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (trace.exists() and trace.read_text().split().count(phase) >= count):
        assert time.monotonic() < deadline, trace.read_text() if trace.exists() else "no trace"
        time.sleep(0.01)


def test_killing_the_dashboard_mid_worker_loses_nothing_and_the_run_resumes(tmp_path):
    db, log, trace = tmp_path / "dayflow.db", tmp_path / "calls.log", tmp_path / "trace.log"
    env = cli_env(DAYFLOW_CALL_LOG=str(log), DAYFLOW_TEST_TRACE=str(trace), DAYFLOW_OFFLINE_DELAY="0.4",
                  DAYFLOW_TEST_PAUSE_IN="tools:0.3", TERM="xterm-256color")
    env.pop("PYTEST_XDIST_WORKER", None)

    # 1. A new run from the dashboard, killed while its worker runs the first step's tools.
    first = Dashboard(db, env)
    try:
        first.wait_for_screen("New run")
        first.press("n")
        wait_for_trace(trace, "tools", 2)
    finally:
        first.kill()
    state = read_db(db)
    [run] = state.runs
    steps_after_first = len(state.steps)
    assert check_invariants(state, run["id"], expected_task_keys(date.today())) == []
    assert steps_after_first == 1 and state.steps[0]["tool_results"] is None  # killed mid-tools

    # 2. A second dashboard resumes it from the run list and is killed while waiting on the model.
    before = len(trace.read_text().split())
    second = Dashboard(db, env)
    try:
        second.wait_for_screen(run["id"])
        second.wait_for_screen("Resume")
        second.press("r")
        deadline = time.monotonic() + 120
        while trace.read_text().split()[before:].count("api") < 1:
            assert time.monotonic() < deadline, second.screen()
            time.sleep(0.01)
        time.sleep(0.2)  # inside the 0.4 s model call
    finally:
        second.kill()
    state = read_db(db)
    assert [r["id"] for r in state.runs] == [run["id"]]
    assert check_invariants(state, run["id"], expected_task_keys(date.today())) == []
    assert state.steps[0]["tool_results"] is not None  # the pending tools ran, without a new call

    # 3. The CLI finishes the same run.
    finished = dayflow("resume", run["id"], db=db, env=env)
    assert finished.returncode == 0, text(finished.stderr)
    state = read_db(db)
    assert check_invariants(state, run["id"], expected_task_keys(date.today())) == []
    [done] = state.runs
    assert (done["id"], done["status"], len(state.steps)) == (run["id"], "done", 3)
    keys = {t["idempotency_key"] for t in state.tasks if t["run_id"] == run["id"]}
    assert keys == expected_task_keys(date.today())
    assert 0 <= call_count(log) - 3 <= 2  # at most one call in flight per kill
