"""Chaos: pools of real `dayflow worker` processes drain queued runs while the database misbehaves and
workers are SIGKILLed (the pool and what it checks: tests/chaos_pool.py).

- PostgreSQL through the fault proxy: every connection cut every 1-2 s (now and then the server away
  for up to a second), 3 workers killed mid-run;
- SQLite: another process holds the write lock longer than the busy timeout (set to 2 time units,
  tests/timing.py), again and again, and 2 workers are killed mid-run.

Each ends with every run done with steps 1..3, totals equal to the sums of the steps, every task once,
and model calls <= committed steps + kills. Bounded: the pool gives up after its deadline and reports.
``DAYFLOW_CHAOS_SEED`` replays a schedule; ``DAYFLOW_CHAOS_REPORT=FILE`` writes the figures (JSON).
"""

from __future__ import annotations

import os
import random

import pytest

from ..chaos_pool import ChaosPool, LockHolder, ProxyCuts, sqlite_busy_timeout_s
from ..timing import units

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _seed() -> int:
    return int(os.environ.get("DAYFLOW_CHAOS_SEED") or random.randrange(1_000_000))


def _publish(report) -> None:
    print(report.as_json())
    target = os.environ.get("DAYFLOW_CHAOS_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(report.as_json() + "\n")


@pytest.mark.postgres
def test_a_worker_pool_on_postgresql_with_connections_cut_and_workers_killed(pg_url, pg_proxy, tmp_path):
    seed = _seed()
    pool = ChaosPool(backend="postgres", worker_db=pg_proxy.url(pg_url), check_db=pg_url, workdir=tmp_path,
                     disturber=ProxyCuts(pg_proxy, random.Random(seed)), seed=seed,
                     runs=30, workers=4, kills=3)
    report = pool.run()
    _publish(report)
    assert report.problems == [], f"seed {seed}: {report.problems}"
    assert report.kills == 3, f"seed {seed}: only {report.kills} worker(s) were caught mid-run"
    assert report.faults.get("cuts", 0) + report.faults.get("outages", 0) >= 4, report.faults
    assert report.faults.get("connections cut", 0) >= 4, report.faults


def test_a_worker_pool_on_sqlite_with_the_write_lock_held_past_the_busy_timeout(db_path, tmp_path, monkeypatch):
    seed = _seed()
    # The workers' busy timeout is set short (DAYFLOW_SQLITE_BUSY_TIMEOUT, 2 time units), so the lock can
    # outlast it again and again without the pool waiting out the 10 s default each time.
    busy = f"{units(2):g}"
    monkeypatch.setenv("DAYFLOW_SQLITE_BUSY_TIMEOUT", busy)
    busy_s = sqlite_busy_timeout_s(db_path)  # read from a store opened as the workers open it; creates the file
    assert busy_s == units(2)
    holder = LockHolder(db_path, busy_s + units(1.5), random.Random(seed))
    pool = ChaosPool(backend="sqlite", worker_db=str(db_path), check_db=str(db_path), workdir=tmp_path,
                     disturber=holder, seed=seed, runs=16, workers=3, kills=2,
                     worker_env={"DAYFLOW_SQLITE_BUSY_TIMEOUT": busy})
    report = pool.run()
    _publish(report)
    assert report.problems == [], f"seed {seed}: {report.problems}"
    assert report.kills == 2, f"seed {seed}: only {report.kills} worker(s) were caught mid-run"
    assert report.faults.get("holds", 0) >= 2, report.faults
