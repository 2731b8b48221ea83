"""Concurrency: racing resumes, a reader beside a writer, stale owners, all with real processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta

import pytest

from dayflow_tui import clock
from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..reliability_helpers import assert_one_error_line, call_count, cli_env, dayflow, dead_pid, text

HOST = socket.gethostname()


def interrupted_run(db, log, *, after: int = 1) -> str:
    """A run whose process died after committing ``after`` steps (owner gone, lease released)."""
    result = dayflow("brief", "--crash-after", str(after), db=db, env=cli_env(DAYFLOW_CALL_LOG=str(log)))
    assert result.returncode != 0 and f"simulated crash after step {after}" in text(result.stderr)
    [run] = json.loads(dayflow("runs", "--json", db=db).stdout)
    return run["id"]


def set_owner(db, run_id: str, *, host: str, pid: int, heartbeat_age_s: float) -> None:
    """Record an owner for ``run_id`` as if a process there held it (what a crash leaves behind)."""
    store = open_store(db)
    try:
        beat = clock.iso(clock.now() - timedelta(seconds=heartbeat_age_s))
        from dayflow_tui.store.models import Run

        Run.update(owner_host=host, owner_pid=pid, lease_token="f" * 32, heartbeat_at=beat,
                   status="running").where(Run.id == run_id).execute()
    finally:
        store.close()


def steps_of(db, run_id: str) -> list[int]:
    store = open_store(db)
    try:
        return [s.n for s in store.steps(run_id)]
    finally:
        store.close()


def test_two_resumes_at_the_same_moment_exactly_one_drives(db_target, tmp_path):
    log = tmp_path / "calls.log"
    run_id = interrupted_run(db_target, log)
    assert call_count(log) == 1
    # A slow model keeps the winner busy long after the loser has tried to claim.
    env = cli_env(DAYFLOW_CALL_LOG=str(log), DAYFLOW_OFFLINE_DELAY="1.0")
    procs = [subprocess.Popen(dayflow_cmd("resume", run_id, "--db", db_target), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
             for _ in range(2)]
    outcomes = [(p, *p.communicate(timeout=120)) for p in procs]
    winners = [(p, out, err) for p, out, err in outcomes if p.returncode == 0]
    losers = [(p, out, err) for p, out, err in outcomes if p.returncode != 0]
    assert len(winners) == 1 and len(losers) == 1, [(p.returncode, text(err)) for p, _o, err in outcomes]
    (winner, won_out, _), (loser, _, lost_err) = winners[0], losers[0]
    assert loser.returncode == 4
    line = text(lost_err).strip()
    assert "Traceback" not in line and len(line.splitlines()) == 1, line
    assert f"run {run_id} is being driven by pid {winner.pid} on {HOST}" in line
    assert "## Today" in text(won_out)
    assert steps_of(db_target, run_id) == [1, 2, 3]
    assert call_count(log) == 3  # 1 before the crash + the 2 remaining steps, once


def test_claims_racing_from_many_processes_have_one_winner_per_run(db_target):
    store = open_store(db_target)
    run_ids = [store.create_run("race", model="offline", status="running").id for _ in range(8)]
    store.close()
    start_at = time.time() + 3.0  # every claimant starts on the same tick, after its imports
    script = textwrap.dedent(f"""
        import sys, time
        from dayflow_tui.config.errors import RunBusy
        from dayflow_tui.store import open_store
        store = open_store({db_target!r})
        for i, run_id in enumerate({run_ids!r}):
            time.sleep(max(0.0, {start_at} + 0.2 * i - time.time()))
            try:
                store.claim(run_id)
                print("won", run_id, flush=True)
            except RunBusy as exc:
                print("busy", run_id, exc, flush=True)
        sys.stdin.read()  # hold every lease won until the test has counted
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    lines = []
    for proc in procs:
        for _ in run_ids:
            lines.append(proc.stdout.readline().split())
    for proc in procs:
        proc.communicate("", timeout=60)
        assert proc.returncode == 0, proc.stderr
    for run_id in run_ids:
        outcomes = [line[0] for line in lines if line[1] == run_id]
        assert sorted(outcomes) == ["busy", "busy", "busy", "won"], (run_id, lines)
    busy = [line for line in lines if line[0] == "busy"]
    assert all("is being driven by pid" in " ".join(line) for line in busy)


def test_a_reader_sees_every_commit_while_a_cli_process_writes(db_path, tmp_path):
    # Each commit is followed by >= 0.5 s of model or tool time: a reader polling every
    # 20 ms must see every intermediate state, and must never be told the database is locked.
    env = cli_env(DAYFLOW_OFFLINE_DELAY="0.5", DAYFLOW_TEST_PAUSE_IN="tools:0.2")
    writer = subprocess.Popen(dayflow_cmd("brief", "--db", str(db_path)), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    cli_reads: list[subprocess.CompletedProcess] = []

    def cli_reader() -> None:  # a second reader: the CLI, in its own processes, all along
        while writer.poll() is None:
            cli_reads.append(dayflow("runs", "--json", db=db_path))

    seen: list[tuple[int, bool]] = []
    deadline = time.monotonic() + 120
    while not db_path.exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    other = threading.Thread(target=cli_reader)
    other.start()
    reader = open_store(db_path)
    try:
        marker = None
        while writer.poll() is None or not seen or seen[-1] != (3, False):
            assert time.monotonic() < deadline, seen
            current = reader.change_marker()
            if current != marker:
                marker = current
                runs = reader.list_runs(limit=1)
                steps = reader.steps(runs[0].id) if runs else []
                if steps and (not seen or seen[-1] != (steps[-1].n, steps[-1].tool_results is not None)):
                    seen.append((steps[-1].n, steps[-1].tool_results is not None))
            time.sleep(0.02)
    finally:
        reader.close()
        other.join(timeout=120)
    writer.communicate(timeout=120)
    assert writer.returncode == 0
    assert seen == [(1, False), (1, True), (2, False), (2, True), (3, False)]
    assert cli_reads
    for result in cli_reads:
        assert result.returncode == 0 and "locked" not in text(result.stderr), text(result.stderr)


def test_a_dead_owner_on_this_host_is_taken_over_at_once(db_target, tmp_path):
    log = tmp_path / "calls.log"
    run_id = interrupted_run(db_target, log)
    gone = dead_pid()
    set_owner(db_target, run_id, host=HOST, pid=gone, heartbeat_age_s=0)  # heartbeat fresh: the pid decides
    listed = json.loads(dayflow("runs", "--json", db=db_target).stdout)[0]
    assert listed["status"] == "interrupted"
    result = dayflow("resume", run_id, db=db_target, env=cli_env(DAYFLOW_CALL_LOG=str(log)))
    assert result.returncode == 0, text(result.stderr)
    assert steps_of(db_target, run_id) == [1, 2, 3] and call_count(log) == 3


def test_a_live_owner_on_this_host_keeps_the_run(db_target, tmp_path):
    log = tmp_path / "calls.log"
    run_id = interrupted_run(db_target, log)
    holder = subprocess.Popen(["sleep", "60"])
    try:
        set_owner(db_target, run_id, host=HOST, pid=holder.pid, heartbeat_age_s=5)  # beating, live pid
        result = dayflow("resume", run_id, db=db_target, env=cli_env(DAYFLOW_CALL_LOG=str(log)))
        assert result.returncode == 4
        assert_one_error_line(result, f"run {run_id} is being driven by pid {holder.pid} on {HOST}")
    finally:
        holder.kill()
        holder.wait()
    assert steps_of(db_target, run_id) == [1] and call_count(log) == 1


@pytest.mark.parametrize("age_s, taken_over", [(5, False), (61, True)])
def test_another_hosts_owner_is_taken_over_only_after_the_heartbeat_timeout(db_target, tmp_path, age_s,
                                                                           taken_over):
    log = tmp_path / "calls.log"
    run_id = interrupted_run(db_target, log)
    set_owner(db_target, run_id, host="worker-7.elsewhere", pid=4242, heartbeat_age_s=age_s)
    result = dayflow("resume", run_id, db=db_target, env=cli_env(DAYFLOW_CALL_LOG=str(log)))
    if taken_over:
        assert result.returncode == 0, text(result.stderr)
        assert steps_of(db_target, run_id) == [1, 2, 3] and call_count(log) == 3
    else:
        assert result.returncode == 4
        assert_one_error_line(result, "is being driven by pid 4242 on worker-7.elsewhere")
        assert steps_of(db_target, run_id) == [1] and call_count(log) == 1
