"""A rolling upgrade: ``dayflow migrate`` by a newer Dayflow while real workers of this code drive runs.

"The next Dayflow" is this code plus one additive migration (``DAYFLOW_TEST_SCHEMA_AHEAD=1``, see
``testhook.schema_ahead``): its ``dayflow migrate`` takes the database one schema past the running
workers', as a real upgrade would. The workers must stop claiming, say why in one line, release the runs
they drive at a step boundary and exit 78; a worker of the new code then finishes every run. The loopback
API counts the calls: no step is lost (a call without its commit) or bought twice.
"""

from __future__ import annotations

import os
import subprocess
import time

from dayflow_tui.store import SCHEMA_VERSION

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI
from ..worker_process import WorkerProcess

NEXT = {"DAYFLOW_TEST_SCHEMA_AHEAD": "1"}


def dayflow(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(dayflow_cmd(*args), capture_output=True, text=True, env={**os.environ, **env},
                          timeout=120, stdin=subprocess.DEVNULL)


def rows(db: str, sql: str) -> list[tuple]:
    """Read the database directly: this test's own code is the old version, which refuses the new schema."""
    if "://" in db:
        import psycopg

        with psycopg.connect(db, autocommit=True, connect_timeout=10) as conn:
            return [tuple(row) for row in conn.execute(sql).fetchall()]
    import sqlite3

    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def stored_steps(db: str) -> list[tuple[str, int]]:
    return rows(db, "SELECT run_id, n FROM steps")


def statuses(db: str) -> dict[str, str]:
    return dict(rows(db, "SELECT id, status FROM runs WHERE id IN (SELECT run_id FROM steps) OR status <> 'done'"))


def test_migrate_under_running_workers_loses_and_doubles_no_step(db_target):
    with LoopbackAPI(delay=0.25) as api:  # each call takes a while: the migration lands mid-run
        env = {**api.env(), "DAYFLOW_API_MAX_RETRIES": "0"}
        ids = []
        for _ in range(8):
            queued = dayflow("brief", "--queue", "--db", db_target, "--model", "claude-loopback", env=env)
            assert queued.returncode == 0, queued.stderr
            ids.append(queued.stdout.strip())
        old = [WorkerProcess("--db", db_target, "--concurrency", "2", "--poll", "0.2", env=env) for _ in range(2)]
        try:
            deadline = time.monotonic() + 60
            while len(stored_steps(db_target)) < 3:  # the workers are mid-run
                assert time.monotonic() < deadline, "the workers committed nothing"
                time.sleep(0.1)
            migrated = dayflow("migrate", "--db", db_target, env={**env, **NEXT})
            assert migrated.returncode == 0, migrated.stderr
            assert f"schema {SCHEMA_VERSION + 1}, up to date" in migrated.stderr
            codes = [worker.proc.wait(timeout=60) for worker in old]
        finally:
            for worker in old:
                worker.stop()
        for worker, code in zip(old, codes):
            said = [line for line in worker.lines if "newer than this Dayflow" in line]
            assert code == 78, "\n".join(worker.lines)
            assert len(said) == 1, worker.lines  # one line, not one per thread or per poll
            assert f"at schema {SCHEMA_VERSION + 1}, newer than this Dayflow's {SCHEMA_VERSION}" in said[0]
            assert not any("Traceback" in line for line in worker.lines)
        calls_by_old = api.calls
        left = [run_id for run_id, status in statuses(db_target).items() if status != "done"]
        assert left, "the migration landed after every run was done: nothing was tested"
        # The new code's worker finishes them.
        new = dayflow("worker", "--once", "--db", db_target, "--concurrency", "2", env={**env, **NEXT})
        assert new.returncode == 0, new.stderr
        assert statuses(db_target) == {run_id: "done" for run_id in ids}
        steps = stored_steps(db_target)
        assert len(steps) == len(set(steps))
        for run_id in ids:
            numbers = sorted(n for found, n in steps if found == run_id)
            assert numbers == list(range(1, len(numbers) + 1)), (run_id, numbers)
        assert api.calls == len(steps), (api.calls, len(steps), calls_by_old)


def test_a_worker_older_than_the_database_exits_78_before_claiming(db_target):
    with LoopbackAPI() as api:
        env = {**api.env(), "DAYFLOW_API_MAX_RETRIES": "0"}
        queued = dayflow("brief", "--queue", "--db", db_target, "--model", "claude-loopback", env={**env, **NEXT})
        assert queued.returncode == 0, queued.stderr
        old = dayflow("worker", "--once", "--db", db_target, env=env)
        assert old.returncode == 78, old.stderr
        lines = old.stderr.strip().splitlines()
        assert len(lines) == 1 and "newer Dayflow (schema" in lines[0] and "not started" in lines[0], lines
        assert api.calls == 0
        assert statuses(db_target) == {queued.stdout.strip(): "queued"}
        # Any other command refuses it too, as it always did (exit 2, one line).
        listed = dayflow("runs", "--db", db_target, env=env)
        assert listed.returncode == 2 and "newer Dayflow" in listed.stderr
