"""``dayflow show --follow``: the real console script follows a run that a real worker drives, printing each step
once, whole (with its tool results), and exits 0 when the run ends; on PostgreSQL woken by LISTEN/NOTIFY."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI
from ..worker_process import WorkerProcess


def test_follow_prints_each_step_once_as_a_worker_commits_it(db_target):
    with LoopbackAPI(delay=0.3) as api:
        env = {**os.environ, **api.env(), "DAYFLOW_API_MAX_RETRIES": "0", "COLUMNS": "200"}
        queued = subprocess.run(dayflow_cmd("brief", "--queue", "--db", db_target, "--model", "claude-loopback"),
                                capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
        assert queued.returncode == 0, queued.stderr
        run_id = queued.stdout.strip()
        follow = subprocess.Popen(dayflow_cmd("show", "--follow", run_id, "--db", db_target), env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL)
        header = follow.stdout.readline()  # written (and flushed) before any step: the run is still queued
        worker = WorkerProcess("--db", db_target, "--poll", "0.2", env=env)
        try:
            out, err = follow.communicate(timeout=90)
            out = header + out
        finally:
            worker.stop()
            if follow.poll() is None:
                follow.kill()
    assert follow.returncode == 0, err
    rules = re.findall(r"step (\d+) · (\w+)", out)
    assert [int(n) for n, _reason in rules] == list(range(1, len(rules) + 1))  # each step once, in order
    assert len(rules) == api.calls >= 2 and rules[-1][1] == "end_turn"
    assert out.index("<- ok") < out.index("step 2 ·")  # step 1's tool results came with it
    assert header.startswith(f"run {run_id}  queued")  # followed from before the worker took it


def test_follow_with_raw_is_one_line_and_64(db_target):
    queued = subprocess.run(dayflow_cmd("brief", "--queue", "--db", db_target), capture_output=True, text=True,
                            env=os.environ, timeout=60, stdin=subprocess.DEVNULL)
    done = subprocess.run(dayflow_cmd("show", "--follow", "--raw", queued.stdout.strip(), "--db", db_target),
                          capture_output=True, text=True, env=os.environ, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 64 and done.stderr.count("\n") == 1 and "--follow" in done.stderr


def test_follow_on_postgres_is_woken_by_the_feed_alone(store, db_target, backend, monkeypatch):
    """With the safety poll made hourly while the feed is live, only LISTEN/NOTIFY can bring the steps a worker
    process commits: the follow reads them all and ends with the run."""
    import threading
    import time

    from dayflow_tui.views import transcript

    if backend == "sqlite":
        pytest.skip("SQLite pushes nothing: show --follow polls its marker (the test above)")
    monkeypatch.setattr(transcript, "FOLLOW_SAFETY_POLL_S", 3600.0)
    run = store.create_run("follow me", model="offline", status="queued")
    feed = store.change_feed().start()
    try:
        deadline = time.monotonic() + 30
        while not feed.live:
            assert time.monotonic() < deadline, "the feed did not go live"
            time.sleep(0.02)
        pages: list[list] = []
        follower = threading.Thread(target=lambda: pages.extend(transcript.follow_pages(store, run, feed)),
                                    daemon=True)
        follower.start()
        worker = subprocess.run(dayflow_cmd("worker", "--once", "--db", db_target), capture_output=True, text=True,
                                env={**os.environ, "DAYFLOW_OFFLINE_DELAY": "0.2"}, timeout=120,
                                stdin=subprocess.DEVNULL)
        assert worker.returncode == 0, worker.stderr
        follower.join(timeout=60)
        assert not follower.is_alive(), "the follow did not hear the run end"
        steps = [step.n for page in pages for step in page]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3
        assert run.status == "done" and run.final_text
        assert feed.notices >= len(steps)
    finally:
        feed.stop()
