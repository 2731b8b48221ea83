"""Back-pressure from the model API (429 rate limited, 529 overloaded) never fails a run (issue 24, item 5).

The real SDK talks to a loopback server of ours (tests/loopback_api.py) that answers 429 or 529 with
``retry-after`` while a burst lasts; ``DAYFLOW_API_MAX_RETRIES=0`` hands each one to Dayflow at once.
Every request is counted where it arrives: calls answered 200 are the paid ones, and they must stay
<= committed steps + deaths (no process is killed here). What must hold: no run is set ``failed``
for back-pressure and its attempts are not counted; it waits queued with ``not_before`` and its
``error`` says why; a worker pauses and finishes every run once the burst ends; the CLI's own
``brief``/``resume`` wait and say so, within the ``rate_limit_wait_s`` bound, and past it exit 75
with one line, the run left queued for a worker or a later resume.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from datetime import date, datetime, timedelta, timezone

import pytest

from ..conftest import dayflow_cmd
from ..crash_harness import STUB_MODEL, expected_task_keys, read_db
from ..loopback_api import LoopbackAPI, error_reply
from ..reliability_helpers import cli_env, dayflow, text

OFFLINE_STEPS = 3  # the offline model's brief: read, create tasks, write the brief


class Burst(dict):
    """A lane's plan: while ``on``, every request is answered ``status`` with these headers.

    Counts what it answered, to tell paid calls (200) from pushed-back ones.
    """

    def __init__(self, status: int = 429, headers: dict | None = None, *, first: int = 0):
        super().__init__()
        self.status, self.headers = status, headers or {}
        self.on = threading.Event()
        self.first = first  # >0: push back the first N requests only, then let everything through
        self.pushed_back = 0
        self.lock = threading.Lock()

    def get(self, number, default=None):
        with self.lock:
            if self.on.is_set() or number <= self.first:
                self.pushed_back += 1
                return error_reply(self.status, "loopback: slow down", self.headers)
        return default


def api_env(api: LoopbackAPI, **extra: str) -> dict[str, str]:
    return cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0", DAYFLOW_MODEL=STUB_MODEL, **extra)


def paid_calls(api: LoopbackAPI, burst: Burst) -> int:
    return api.calls - burst.pushed_back


def task_keys_made(state) -> list[str]:
    return [t["idempotency_key"] for t in state.tasks if t["run_id"] is not None]


def test_twenty_runs_in_a_429_burst_none_failed_and_a_worker_finishes_them_after_it(db_target):
    db = db_target
    burst = Burst(429, {"retry-after": "1"})
    burst.on.set()
    with LoopbackAPI() as api:
        api.planned = burst
        env = api_env(api)
        for _ in range(20):
            queued = dayflow("brief", "--queue", db=db, env=env)
            assert queued.returncode == 0, text(queued.stderr)
        worker = subprocess.Popen(dayflow_cmd("worker", "--concurrency", "4", "--poll", "0.2", "--db", db),
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            started = time.monotonic()  # the worker's start-up (the SDK's import) takes a while on a busy host
            while burst.pushed_back < 4 and time.monotonic() - started < 60:
                time.sleep(0.05)
            time.sleep(3.0)  # the burst lasts 3 s more: every call the worker makes meanwhile is pushed back
            during = read_db(db)
            pushed_during = burst.pushed_back
            burst.on.clear()
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                state = read_db(db)
                if all(r["status"] == "done" for r in state.runs):
                    break
                time.sleep(0.3)
        finally:
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=60)
    # During the burst: nothing failed, no attempt counted, the runs that were tried wait queued and say why.
    failed = [(r["id"], r["attempts"], r["error"]) for r in during.runs if r["status"] == "failed"]
    assert failed == [], (failed, text(err)[-2000:])
    assert all(r["attempts"] == 0 for r in during.runs if r["status"] != "running"), [
        (r["status"], r["attempts"]) for r in during.runs]
    tried = [r for r in during.runs if r["error"]]
    assert tried and all(r["error"].startswith("rate limited (429), retry after ") for r in tried)
    assert all(r["status"] in ("queued", "running") and r["not_before"] for r in tried)
    assert during.steps == []  # nothing paid while pushed back
    # The worker paused instead of hammering: 4 threads, about 3 s, a 1 s wait each time (plus jitter).
    assert 4 <= pushed_during <= 4 * (4 + 1) + 4, pushed_during
    assert "paused: rate limited (429)" in text(err)
    # After the burst: every run done, none failed, every task once, no call paid twice.
    assert [r["status"] for r in state.runs] == ["done"] * 20, [(r["status"], r["error"]) for r in state.runs]
    assert len(state.steps) == 20 * OFFLINE_STEPS
    assert paid_calls(api, burst) <= len(state.steps)
    keys = task_keys_made(state)
    assert sorted(keys) == sorted(expected_task_keys(date.today()))  # each key once across all runs


def test_cli_resume_waits_out_a_rate_limit_and_says_so(tmp_path):
    db = tmp_path / "resume.db"
    burst = Burst(429, {"retry-after": "1"}, first=2)
    with LoopbackAPI() as api:
        api.planned = burst
        env = api_env(api, DAYFLOW_RATE_LIMIT_WAIT="30")
        run_id = text(dayflow("brief", "--queue", db=db, env=env).stdout).strip()
        started = time.monotonic()
        resumed = dayflow("resume", run_id, db=db, env=env)
        took = time.monotonic() - started
    err = text(resumed.stderr)
    assert resumed.returncode == 0, err
    waits = [line for line in err.splitlines() if line.startswith("[rate limited]")]
    assert len(waits) == 2 and all("429: waiting " in w and "before trying again (bound 30 s)" in w for w in waits)
    assert took >= 2.0  # it really waited, twice the server's second
    state = read_db(db)
    [run] = state.runs
    assert (run["status"], run["attempts"], run["error"]) == ("done", 0, None)
    assert len(state.steps) == OFFLINE_STEPS and paid_calls(api, burst) == OFFLINE_STEPS
    assert burst.pushed_back == 2


def test_cli_brief_past_the_wait_bound_exits_75_and_leaves_the_run_queued_for_a_worker(db_target):
    db = db_target
    burst = Burst(529, {"retry-after-ms": "2000"})
    burst.on.set()
    with LoopbackAPI() as api:
        api.planned = burst
        env = api_env(api, DAYFLOW_RATE_LIMIT_WAIT="3")
        started = time.monotonic()
        brief = dayflow("brief", db=db, env=env)
        took = time.monotonic() - started
        err = text(brief.stderr)
        assert brief.returncode == 75, err
        assert "Traceback" not in err
        waits = [line for line in err.splitlines() if line.startswith("[rate limited]")]
        assert waits == [w for w in waits if "529: waiting 3 s before trying again (bound 3 s)" in w] and len(waits) == 1
        errors = [line for line in err.splitlines() if line.startswith("dayflow: ")]
        assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0]
        assert "pushed back (529 overloaded)" in errors[0] and "wait bound" in errors[0]
        assert "queued, not failed" in errors[0] and "dayflow resume" in errors[0]
        assert 2.0 <= took < 30, took  # waited once (2 s and jitter), then stopped at the bound
        state = read_db(db)
        [run] = state.runs
        assert (run["status"], run["attempts"]) == ("queued", 0)
        assert run["not_before"] and run["lease_token"] is None
        assert run["error"].startswith("overloaded (529), retry after ")
        assert state.steps == [] and paid_calls(api, burst) == 0

        # A bound of 0 does not wait at all.
        again = dayflow("resume", run["id"], db=db, env=dict(env, DAYFLOW_RATE_LIMIT_WAIT="0"))
        assert again.returncode == 75 and "not waiting (rate_limit_wait_s is 0)" in text(again.stderr)
        assert "[rate limited]" not in text(again.stderr)
        assert read_db(db).runs[0]["status"] == "queued"

        # The burst ends: a worker takes the queued run after its not_before and finishes it.
        burst.on.clear()
        worked = dayflow("worker", "--once", "--poll", "0.2", db=db, env=env)
        assert worked.returncode == 0, text(worked.stderr)
    state = read_db(db)
    [run] = state.runs
    assert run["status"] == "done" and len(state.steps) == OFFLINE_STEPS
    assert paid_calls(api, burst) <= len(state.steps)


def test_the_wait_comes_from_the_headers_with_jitter_or_a_capped_default():
    from dayflow_tui.agent import backpressure

    class Response:
        def __init__(self, headers):
            self.headers = headers

    class Pushed(Exception):
        def __init__(self, headers):
            self.response = Response(headers)

    assert backpressure.retry_after_s(Pushed({"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    assert backpressure.retry_after_s(Pushed({"retry-after": "12"})) == 12.0
    later = (datetime.now(timezone.utc) + timedelta(seconds=30)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert 25 <= backpressure.retry_after_s(Pushed({"retry-after": later})) <= 31
    assert backpressure.retry_after_s(Pushed({"retry-after": "soon"})) is None
    assert backpressure.retry_after_s(Pushed({})) is None
    assert backpressure.retry_after_s(Exception("no response")) is None

    backpressure.call_went_through()
    waits = [backpressure.next_wait(12.0) for _ in range(50)]
    assert all(12.0 <= w <= 12.0 + 0.25 * 12 + 0.5 for w in waits) and len(set(waits)) > 1  # jittered
    assert backpressure.next_wait(10 ** 9) <= backpressure.HEADER_MOST_S + 30  # an absurd header is capped
    backpressure.call_went_through()
    defaults = [backpressure.next_wait(None) for _ in range(8)]
    assert 5.0 <= defaults[0] <= 6.25 and 10.0 <= defaults[1] <= 12.5  # doubling while pushed back
    assert all(w <= backpressure.DEFAULT_MOST_S * 1.25 for w in defaults)
    backpressure.call_went_through()
    assert backpressure.next_wait(None) <= 6.25  # an answered call starts the default again
    backpressure.call_went_through()


def test_approve_and_fork_run_wait_out_a_rate_limit_as_resume_does(tmp_path):
    db = tmp_path / "decide.db"
    with LoopbackAPI() as api:
        env = api_env(api, DAYFLOW_RATE_LIMIT_WAIT="30", DAYFLOW_REQUIRE_APPROVAL="create_task")
        started = dayflow("brief", db=db, env=env)
        assert started.returncode == 0, text(started.stderr)
        [run] = read_db(db).runs
        assert run["status"] == "waiting"
        # The continuation after the decision meets a 429 on its first call, and on the fork's first too.
        burst = Burst(429, {"retry-after": "1"}, first=api.calls + 1)
        api.planned = burst
        approved = dayflow("approve", run["id"], "--all", db=db, env=env)
        err = text(approved.stderr)
        assert approved.returncode == 0, err
        assert sum(line.startswith("[rate limited] 429: waiting") for line in err.splitlines()) == 1
        burst.first = api.calls + 1
        forked = dayflow("fork", run["id"], "--at", "1", "--run", db=db, env=env)
        err = text(forked.stderr)
        assert forked.returncode == 0, err
        assert sum(line.startswith("[rate limited] 429: waiting") for line in err.splitlines()) == 1
    state = read_db(db)
    assert sorted(r["status"] for r in state.runs) == ["done", "waiting"]  # the fork asks again for its calls
    assert all(r["attempts"] in (0, 1) and not (r["error"] or "").startswith("rate limited") for r in state.runs)
