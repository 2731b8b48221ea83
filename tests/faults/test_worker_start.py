"""A worker that cannot reach PostgreSQL at start (the server down, or full) waits with back-off, saying so each
time, and drives its runs once the server takes it: it never exits for a busy server (issue #29)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from dayflow_tui.store.retry import RETRY_FOR_S

from ..conftest import PG_URL, dayflow_cmd
from ..loopback_api import LoopbackAPI
from ..worker_process import WorkerProcess

pytestmark = pytest.mark.postgres


def queue_runs(db: str, count: int, env: dict[str, str]) -> list[str]:
    ids = []
    for _ in range(count):
        done = subprocess.run(dayflow_cmd("brief", "--queue", "--db", db, "--model", "claude-loopback"),
                              capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    return ids


def statuses(url: str, ids: list[str]) -> dict[str, str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return dict(conn.execute("SELECT id, status FROM runs WHERE id = ANY(%s)", (ids,)).fetchall())


def wait_done(url: str, ids: list[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while set(statuses(url, ids).values()) != {"done"}:
        assert time.monotonic() < deadline, statuses(url, ids)
        time.sleep(0.3)


def test_a_refused_server_is_waited_for_then_the_runs_are_driven(pg_url, pg_proxy):
    with LoopbackAPI() as api:
        ids = queue_runs(pg_url, 2, api.env())
        pg_proxy.refuse(4.0)  # the server is away for 4 s: every connection refused
        worker = WorkerProcess("--db", pg_proxy.url(pg_url), "--log-format", "json", "--poll", "0.2", env=api.env())
        try:
            worker.wait_for(r'"event":"db\.wait"', timeout=30)
            wait_done(pg_url, ids)  # once the proxy takes connections again
            calls = api.calls
        finally:
            code = worker.stop()
    assert code == 0, "\n".join(worker.lines)
    waits = [json.loads(line) for line in worker.lines if '"event":"db.wait"' in line]
    assert waits[0]["level"] == "warning" and waits[0]["wait_s"] > 0 and "refused" in waits[0]["reason"].lower()
    assert [w["attempt"] for w in waits] == list(range(1, len(waits) + 1))
    assert calls == 6  # 2 runs x 3 steps, each bought once
    assert any('"event":"worker.started"' in line for line in worker.lines)


def grant(owner_url: str, role: str) -> None:
    import psycopg

    with psycopg.connect(owner_url, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        conn.execute(f'GRANT ALL ON SCHEMA "{schema}" TO "{role}"')
        conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        conn.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"')


@pytest.fixture
def full_role(pg_url):
    """A role admitted to no connection at all (CONNECTION LIMIT 0: the server answers "too many connections
    for role"), dropped after. Yields (its name, its URL to the test's schema, a function that admits it)."""
    import psycopg
    from urllib.parse import urlsplit, urlunsplit

    role = f"dayflow_full_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 0')
    parts = urlsplit(pg_url)
    url = urlunsplit((parts.scheme, f"{role}@{parts.netloc.rpartition('@')[2]}", parts.path, parts.query,
                      parts.fragment))

    def admit() -> None:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT -1')

    try:
        yield role, url, admit
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def test_a_full_server_is_waited_for_not_a_reason_to_exit(pg_url, full_role):
    role, url, admit = full_role
    with LoopbackAPI() as api:
        ids = queue_runs(pg_url, 1, api.env())  # the tables exist (made by the test's own role)
        grant(pg_url, role)
        worker = WorkerProcess("--db", url, "--poll", "0.2", env=api.env())
        try:
            first = worker.wait_for(r"^dayflow worker: cannot reach the database \((.*)\); trying again in", 30)
            # It keeps waiting past the store's usual window (where a worker used to exit 2), never exits.
            full_since = time.monotonic()
            worker.wait_for(r"\(attempt 2\)$", 30)
            time.sleep(max(RETRY_FOR_S + 1 - (time.monotonic() - full_since), 0))
            assert worker.proc.poll() is None
            admit()
            wait_done(pg_url, ids)
        finally:
            code = worker.stop()
    assert code == 0, "\n".join(worker.lines)
    assert "too many connections" in first.group(1)
    assert api.calls == 3


def test_a_wrong_database_is_not_waited_for(pg_url, tmp_path):
    """What no wait cures (no such database) ends the worker at once, one line, exit 2."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(pg_url)
    missing = urlunsplit((parts.scheme, parts.netloc, "/no_such_db_" + uuid.uuid4().hex[:8], parts.query, ""))
    started = time.monotonic()
    done = subprocess.run(dayflow_cmd("worker", "--db", missing), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "does not exist" in done.stderr, done.stderr
    assert "cannot reach the database" not in done.stderr and time.monotonic() - started < RETRY_FOR_S


def test_sigterm_while_waiting_for_the_server_stops_it(pg_url, pg_proxy):
    pg_proxy.refuse(60.0)
    worker = WorkerProcess("--db", pg_proxy.url(pg_url))
    try:
        worker.wait_for(r"^dayflow worker: cannot reach the database", 30)
    finally:
        code = worker.stop()
        pg_proxy.end_faults()
    assert code == 0 and worker.lines[-1] == "dayflow worker: stopped before it reached the database; it held no run"
