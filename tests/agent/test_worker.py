"""Workers: `dayflow brief --queue`, `dayflow worker`, and many workers sharing one database safely."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from dayflow_tui.agent.runs import run_brief
from dayflow_tui.store.models import Run, Step, Task
from dayflow_tui.store import open_store
from dayflow_tui.agent.worker import work

from ..conftest import CountingClient, dayflow_cmd

ACTION_MAILS = 6  # mails in the sample inbox that ask for something: one task key each


def dayflow(*args: str, db: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0", **(env or {})}
    return subprocess.run(dayflow_cmd(*args, "--db", db), capture_output=True, text=True, env=full_env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_worker_once_drives_queued_runs_and_an_interrupted_one_without_repeating_calls(store):
    crashed = CountingClient()
    with pytest.raises(SystemExit):
        run_brief(store, client=crashed, crash_after_step=2, run_id="crashed00000")
    queued = [store.create_run("brief", model="offline", run_id=f"queued{i:06d}").id for i in range(3)]
    clients: list[CountingClient] = []

    def new_client() -> CountingClient:
        clients.append(CountingClient())
        return clients[-1]

    report = work(store, concurrency=2, once=True, client_factory=new_client)
    assert sorted(r.run_id for r in report.finished) == sorted(["crashed00000", *queued])
    assert all(r.status == "done" and r.steps == 3 for r in report.finished)
    assert sum(c.calls for c in clients) == 1 + 3 * 3  # the crashed run needed only its last step
    assert all(r.status == "done" and r.lease_token is None for r in store.list_runs())
    assert report.failed == [] and report.store_errors == []


def test_worker_with_nothing_waiting_returns_at_once(store):
    store.create_run("held", model="offline", status="failed")
    report = work(store, concurrency=3, once=True)
    assert report.finished == [] and store.list_runs()[0].status == "failed"


def test_cli_brief_queue_then_worker(db_target, tmp_path):
    log = tmp_path / "calls.log"
    ids = []
    for _ in range(3):
        queued = dayflow("brief", "--queue", "--max-steps", "5", db=db_target)
        assert queued.returncode == 0, queued.stderr
        ids.append(queued.stdout.strip())
        assert f"[queued {ids[-1]}]" in queued.stderr
    runs = json.loads(dayflow("runs", "--json", db=db_target).stdout)
    assert sorted(r["id"] for r in runs) == sorted(ids) and {r["status"] for r in runs} == {"queued"}

    worked = dayflow("worker", "--once", "--concurrency", "2", db=db_target, env={"DAYFLOW_CALL_LOG": str(log)})
    assert worked.returncode == 0, worked.stderr
    assert sorted(line.split()[1] for line in worked.stdout.splitlines()) == sorted(ids)
    assert all(line.endswith("done · 3 steps · 3 call(s)") for line in worked.stdout.splitlines())
    assert len(log.read_text().splitlines()) == 9
    runs = json.loads(dayflow("runs", "--json", db=db_target).stdout)
    assert {r["status"] for r in runs} == {"done"}


def test_sigterm_releases_the_run_at_a_step_boundary_for_another_worker(db_target, tmp_path):
    log = tmp_path / "calls.log"
    run_id = dayflow("brief", "--queue", db=db_target).stdout.strip()
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0.5", "DAYFLOW_CALL_LOG": str(log)}
    worker = subprocess.Popen(dayflow_cmd("worker", "--db", db_target), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    store = open_store(db_target)
    try:
        deadline = time.monotonic() + 30
        while store.get_run(run_id).step_count < 1:
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        _out, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
    finally:
        if worker.poll() is None:
            worker.kill()
    run = store.get_run(run_id)
    assert (run.status, run.lease_token) == ("running", None) and 1 <= run.step_count < 3
    stopped_at = run.step_count
    assert len(log.read_text().splitlines()) == stopped_at  # the call in flight finished and was committed
    store.close()
    finished = dayflow("worker", "--once", db=db_target, env={"DAYFLOW_CALL_LOG": str(log)})
    assert finished.returncode == 0, finished.stderr
    assert f"run {run_id} done · 3 steps · {3 - stopped_at} call(s)" in finished.stdout
    assert len(log.read_text().splitlines()) == 3


RUNS, WORKERS, DELAY = 40, 4, 0.1


def test_four_workers_one_killed_every_run_finishes_once(db_target, tmp_path):
    """4 worker processes, 40 queued runs, a slowed model, one worker SIGKILLed while it drives a run."""
    store = open_store(db_target)
    for i in range(RUNS):
        store.create_run("brief", model="offline", run_id=f"many{i:08d}")
    log = tmp_path / "calls.log"
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": str(DELAY), "DAYFLOW_CALL_LOG": str(log)}
    workers = [subprocess.Popen(dayflow_cmd("worker", "--once", "--poll", "0.2", "--db", db_target), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL) for _ in range(WORKERS)]
    pids = {w.pid: w for w in workers}
    killed = None
    try:
        deadline = time.monotonic() + 90
        while killed is None:
            assert time.monotonic() < deadline, "workers made no progress"
            done = Run.select().where(Run.status == "done").count()
            # Midway, kill a worker while it holds a run that has committed a step but not finished.
            victim = (Run.select().where(Run.status == "running", Run.owner_pid.in_(list(pids)),
                                         Run.step_count >= 1).first() if done >= RUNS // 4 else None)
            if victim is not None:
                killed = pids[victim.owner_pid]
                killed.send_signal(signal.SIGKILL)
            time.sleep(0.02)
        outputs = {w.pid: w.communicate(timeout=90) for w in workers}
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for pid, (_out, err) in outputs.items():
        assert pids[pid].returncode == (-signal.SIGKILL if pids[pid] is killed else 0), err

    runs = list(Run.select())
    assert len(runs) == RUNS and {r.status for r in runs} == {"done"}, Counter(r.status for r in runs)
    assert all(r.step_count == 3 for r in runs)
    # Released by every live owner. The SIGKILL may land after the victim's final commit and before its
    # release (a loaded machine): that run keeps its dead owner's token, harmless on a finished run.
    assert all(r.lease_token is None for r in runs if r.owner_pid != killed.pid), \
        [(r.id, r.owner_pid) for r in runs if r.lease_token is not None]
    for r in runs:
        steps = list(Step.select().where(Step.run == r.id).order_by(Step.n))
        assert [s.n for s in steps] == [1, 2, 3] and steps[-1].stop_reason == "end_turn"
        assert sum(s.stop_reason == "end_turn" for s in steps) == 1  # finished exactly once
    # Each run reported finished by exactly one worker (the victim's last run by the one that took it over).
    reported = [line.split()[1] for out, _err in outputs.values() for line in out.splitlines()]
    assert sorted(reported) == sorted(r.id for r in runs)
    calls = len(log.read_text().splitlines())
    assert RUNS * 3 <= calls <= RUNS * 3 + 1, calls  # at most the one call in flight when the kill came
    keys = [t.idempotency_key for t in Task.select() if t.idempotency_key.startswith("mail-")]
    assert len(keys) == len(set(keys)) == ACTION_MAILS  # no task created twice across 40 runs
    store.close()


def test_a_paused_worker_on_another_host_loses_its_run_and_commits_nothing_more(db_target, tmp_path):
    """Host A stalls mid-run (SIGSTOP) past the stale time; host B takes the run over and finishes it.

    When A wakes, its paid response cannot be committed (its lease token is gone): it stops, and the
    run has exactly one of each step.
    """
    log = tmp_path / "calls.log"
    run_id = dayflow("brief", "--queue", db=db_target).stdout.strip()
    base = {**os.environ, "DAYFLOW_CALL_LOG": str(log)}
    host_a = subprocess.Popen(dayflow_cmd("worker", "--once", "--db", db_target), stdin=subprocess.DEVNULL,
                              env={**base, "DAYFLOW_HOSTNAME": "host-a", "DAYFLOW_OFFLINE_DELAY": "1.5"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = open_store(db_target)
    try:
        deadline = time.monotonic() + 60
        # Step 1's tool results committed: A is now inside call 2 (1.5 s), with no transaction open.
        while not (steps := store.steps(run_id)) or steps[0].tool_results is None:
            assert time.monotonic() < deadline and host_a.poll() is None
            time.sleep(0.02)
        host_a.send_signal(signal.SIGSTOP)  # mid-call 2: no heartbeat, no commit, not dead
        assert store.get_run(run_id).owner_host == "host-a"
        time.sleep(2.5)  # older than host B's --stale-after
        taken = dayflow("worker", "--once", "--stale-after", "2", db=db_target,
                        env={"DAYFLOW_HOSTNAME": "host-b", "DAYFLOW_CALL_LOG": str(log)})
        assert taken.returncode == 0, taken.stderr
        assert f"run {run_id} done · 3 steps" in taken.stdout
        host_a.send_signal(signal.SIGCONT)
        out_a, err_a = host_a.communicate(timeout=60)
    finally:
        if host_a.poll() is None:
            host_a.send_signal(signal.SIGCONT)
            host_a.kill()
            host_a.wait()
    assert host_a.returncode == 0, err_a
    assert f"run {run_id} lost" in err_a and run_id not in out_a
    steps = store.steps(run_id)
    assert [s.n for s in steps] == [1, 2, 3] and [s.stop_reason for s in steps].count("end_turn") == 1
    run = store.get_run(run_id)
    assert (run.status, run.step_count, run.lease_token) == ("done", 3, None)
    calls = log.read_text().splitlines()
    assert len(calls) == 4  # 3 steps + the one call A had in flight, paid and never committed
    keys = [t.idempotency_key for t in store.list_tasks() if t.idempotency_key.startswith("mail-")]
    assert len(keys) == len(set(keys)) == ACTION_MAILS
    store.close()
