"""Shared limits (#29) kept by real ``dayflow worker`` processes, measured at the loopback API: calls in flight at
once, calls started per window, a kill -9'd worker's slot reclaimed, a 429 slowing every worker.

Every test also checks the invariant: model calls <= committed steps + process deaths."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI, error_reply, hang
from ..worker_process import WorkerProcess

pytestmark = pytest.mark.slow
MODEL = "claude-loopback"


def dayflow(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(dayflow_cmd(*args), capture_output=True, text=True, env={**os.environ, **env},
                          timeout=120, stdin=subprocess.DEVNULL)


def limited_env(api: LoopbackAPI, limits: dict, **more: str) -> dict[str, str]:
    return {**api.env(), "DAYFLOW_API_MAX_RETRIES": "0", "DAYFLOW_RETRY_BACKOFF": "0.05",
            "DAYFLOW_LIMITS": json.dumps({MODEL: limits}), **more}


def queue_runs(db: str, count: int, env: dict[str, str]) -> list[str]:
    ids = []
    for _ in range(count):
        done = dayflow("brief", "--queue", "--db", db, "--model", MODEL, env=env)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    return ids


def steps_of(db: str, ids: list[str]) -> int:
    store = open_store(db)
    try:
        return sum(store.step_count(run_id) for run_id in ids)
    finally:
        store.close()


def wait_until_done(db: str, ids: list[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    store = open_store(db)
    try:
        while True:
            runs = [store.get_run(run_id) for run_id in ids]
            if all(run.status == "done" for run in runs):
                return
            assert time.monotonic() < deadline, [(r.id, r.status, r.error) for r in runs]
            time.sleep(0.2)
    finally:
        store.close()


def stop_all(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        assert worker.stop() == 0, "\n".join(worker.lines)


def test_max_concurrent_2_across_4_workers_never_has_more_than_2_calls_in_flight(db_target):
    with LoopbackAPI(delay=0.4) as api:
        env = limited_env(api, {"max_concurrent": 2})
        ids = queue_runs(db_target, 8, env)
        workers = [WorkerProcess("--db", db_target, "--poll", "0.1", env=env) for _ in range(4)]
        try:
            wait_until_done(db_target, ids)
        finally:
            stop_all(workers)
        # Measured at the server: each worker wanted a call most of the time, so without the limit 4 were in flight.
        print(f"measured: most in flight {api.most_in_flight}, {api.calls} calls")  # the README's figures (-s)
        assert api.most_in_flight == 2, api.most_in_flight
        assert api.calls <= steps_of(db_target, ids)  # no death: not one call more than the committed steps
    waited = [line for w in workers for line in w.lines if "waits for the shared limit" in line]
    assert waited and all("max_concurrent 2" in line for line in waited)


def test_requests_per_minute_is_kept_over_a_window(db_target):
    with LoopbackAPI() as api:
        env = limited_env(api, {"requests_per_minute": 6})  # a minute's worth (6) at once, then one per 10 s
        ids = queue_runs(db_target, 6, env)
        workers = [WorkerProcess("--db", db_target, "--poll", "0.1", env=env) for _ in range(3)]
        try:
            deadline = time.monotonic() + 60
            while not api.started and time.monotonic() < deadline:
                time.sleep(0.1)
            assert api.started, "no call started"
            first = api.started[0]
            time.sleep(max(first + 25.0 - time.monotonic(), 0))
            in_window = sum(1 for t in list(api.started) if t <= first + 25.0)
        finally:
            stop_all(workers)
        # Six runs of several steps each would make ~20 calls in these 25 s unlimited; the bucket allows
        # 6 + 25 s x (6 / 60 s) = 8.5.
        print(f"measured: {in_window} calls started in the first 25 s (rpm 6)")
        assert 6 <= in_window <= 8, in_window
        assert api.calls <= steps_of(db_target, ids)


def test_a_kill_9_workers_slot_is_reclaimed_after_its_expiry(db_target):
    with LoopbackAPI() as api:
        api.planned[1] = hang(300)  # the first call never answers: its worker dies holding the only slot
        env = limited_env(api, {"max_concurrent": 1}, DAYFLOW_LIMIT_SLOT_EXPIRY="15")
        ids = queue_runs(db_target, 2, env)
        doomed = WorkerProcess("--db", db_target, "--poll", "0.1", env=env)
        deadline = time.monotonic() + 60
        while api.calls < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert api.calls == 1
        os.kill(doomed.proc.pid, signal.SIGKILL)
        doomed.proc.wait()
        survivor = WorkerProcess("--db", db_target, "--poll", "0.1", env=env)
        try:
            # The dead worker's slot holds the limit until its beat is 15 s old; then it is taken, not leaked.
            survivor.wait_for(r"waits for the shared limit .*1 of max_concurrent 1", timeout=60)
            wait_until_done(db_target, ids)
        finally:
            stop_all([survivor])
        assert api.calls <= steps_of(db_target, ids) + 1  # one death: the hung call
    store = open_store(db_target)
    try:
        from dayflow_tui.store.models import LimitSlot

        assert LimitSlot.select().count() == 0  # every slot freed (the dead one reclaimed)
    finally:
        store.close()


def test_a_429_slows_every_worker_not_just_the_one_that_got_it(db_target):
    with LoopbackAPI(delay=0.1) as api:
        api.planned[4] = error_reply(429, "slow down", headers={"retry-after": "4"})
        env = limited_env(api, {"requests_per_minute": 10_000})
        ids = queue_runs(db_target, 6, env)
        workers = [WorkerProcess("--db", db_target, "--poll", "0.1", env=env) for _ in range(3)]
        try:
            wait_until_done(db_target, ids)
        finally:
            stop_all(workers)
        pushed_back = api.started[3]
        # The other workers were mid-run, a call every ~0.1 s each. Calls that passed their limit before the 429
        # was answered (0.1 s after it started) still arrive; from 0.5 s on, no worker starts one for the
        # server's wait of 4 s (a margin of 1 s), then they go on.
        after = [t - pushed_back for t in api.started[4:]]
        print(f"measured: next calls after the 429 at +{', '.join(f'{t:.2f}' for t in after[:6])} s")
        assert not [t for t in after if 0.5 < t < 3.0], after[:6]
        assert [t for t in after if t >= 3.0], after[:6]
        assert api.calls - 1 <= steps_of(db_target, ids)  # the 429 answered nothing: no step, nothing bought
