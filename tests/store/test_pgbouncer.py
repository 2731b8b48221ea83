"""The ``schema`` setting behind a real PgBouncer in transaction pooling (tests/pgbouncer.py).

PgBouncer drops a URL's ``options=-csearch_path``, and in transaction pooling each transaction may run on
another server session, so the schema is set inside every transaction (``SET LOCAL search_path``). The pool
here is 2 server sessions shared by every client, and one client first leaves a session-level search_path
pointing at the other schema on them: a store that relied on the session would write to the wrong place.
Skipped without ``DAYFLOW_TEST_PG_URL`` or without the pgbouncer binary (the reason says how to install it).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.store.schema import DAYFLOW_TABLES, SCHEMA_VERSION

from ..conftest import PG_SKIP_REASON, PG_URL, dayflow_cmd
from ..pgbouncer import PgBouncer

pytestmark = pytest.mark.postgres


@contextlib.contextmanager
def schemas(count: int):
    """``count`` fresh schemas on the test server (made and dropped directly, not through the pooler)."""
    if not PG_URL:
        pytest.skip(PG_SKIP_REASON)
    import psycopg

    names = [f"dayflow_bouncer_{uuid.uuid4().hex[:10]}" for _ in range(count)]
    with psycopg.connect(PG_URL, autocommit=True, connect_timeout=10) as admin:
        admin.execute("SET lock_timeout = '20s'")
        for name in names:
            admin.execute(f'CREATE SCHEMA "{name}"')
        try:
            yield names
        finally:
            for name in names:
                admin.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture
def bouncer():
    if not PG_URL:
        pytest.skip(PG_SKIP_REASON)
    with PgBouncer(PG_URL, pool_size=2) as running:
        yield running


def admin_rows(sql: str, *params) -> list[tuple]:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True, connect_timeout=10) as admin:
        return admin.execute(sql, params).fetchall()


def poison_sessions(url: str, schema: str) -> None:
    """Leave ``search_path`` at ``schema`` on the pool's server sessions (a session SET in transaction
    pooling stays on the server session for whoever gets it next)."""
    import psycopg

    held = [psycopg.connect(url, autocommit=True, connect_timeout=10) for _ in range(2)]
    try:
        for conn in held:
            conn.execute("BEGIN")  # hold a server session each, so the two SETs land on both
        for conn in held:
            conn.execute(f'SET search_path TO "{schema}"')
            conn.execute("COMMIT")
    finally:
        for conn in held:
            conn.close()


def dayflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(dayflow_cmd(*args), capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=180, stdin=subprocess.DEVNULL)


def test_two_schemas_through_pgbouncer_keep_their_own_runs(bouncer):
    url = bouncer.url + "?application_name=dayflow-test-bouncer"
    with schemas(2) as (first, second):
        made: dict[str, list[str]] = {first: [], second: []}
        for round_ in range(3):
            for schema in (first, second):
                if round_:  # every pooled session now points at the other schema
                    poison_sessions(url, second if schema == first else first)
                done = dayflow("brief", "--db", url, "--schema", schema)
                assert done.returncode == 0, done.stderr
                listed = dayflow("runs", "--json", "--db", url, env={"DAYFLOW_SCHEMA": schema})
                assert listed.returncode == 0, listed.stderr
                ids = [row["id"] for row in json.loads(listed.stdout)]
                assert len(ids) == round_ + 1, (schema, ids)
                made[schema] = ids
        for schema, other in ((first, second), (second, first)):
            stored = {row[0] for row in admin_rows(f'SELECT id FROM "{schema}".runs')}
            assert stored == set(made[schema])
            assert not stored & set(made[other])
            statuses = {row[0] for row in admin_rows(f'SELECT status FROM "{schema}".runs')}
            assert statuses == {"done"}
            steps = admin_rows(f'SELECT run_id, count(*) FROM "{schema}".steps GROUP BY run_id')
            assert {run_id for run_id, _n in steps} == stored
            assert all(n >= 1 for _run_id, n in steps)
        # Nothing landed in public through a session that pointed elsewhere.
        assert not admin_rows("SELECT 1 FROM pg_tables WHERE schemaname = 'public' AND tablename = 'runs'") or \
            not admin_rows("SELECT 1 FROM public.runs WHERE id = ANY(%s)", made[first] + made[second])


def test_a_worker_drives_runs_through_pgbouncer(bouncer, api, monkeypatch):
    url = bouncer.url + "?application_name=dayflow-test-bouncer-worker"
    with schemas(2) as (schema, decoy):
        env = {"DAYFLOW_SCHEMA": schema}
        monkeypatch.setenv("DAYFLOW_SCHEMA", decoy)
        open_store(url).close()  # the decoy has its tables: a session left pointing there would see them
        monkeypatch.delenv("DAYFLOW_SCHEMA")
        ids = []
        for _ in range(4):
            queued = dayflow("brief", "--queue", "--db", url, "--model", "claude-loopback", env=env)
            assert queued.returncode == 0, queued.stderr
            ids.append(queued.stdout.strip())
        poison_sessions(url, decoy)
        worker = dayflow("worker", "--once", "--db", url, "--concurrency", "2", env=env)
        assert worker.returncode == 0, worker.stderr
        runs = dict(admin_rows(f'SELECT id, status FROM "{schema}".runs'))
        assert runs == {run_id: "done" for run_id in ids}
        steps = admin_rows(f'SELECT run_id, n FROM "{schema}".steps ORDER BY run_id, n')
        assert len(steps) == len(set(steps))  # no step twice
        assert api.calls == len(steps)  # every paid call committed once, none bought twice
        assert admin_rows(f'SELECT count(*) FROM "{decoy}".runs') == [(0,)]


def test_migrations_apply_in_the_schema_through_pgbouncer(bouncer, monkeypatch):
    url = bouncer.url + "?application_name=dayflow-test-bouncer-migrate"
    with schemas(2) as (schema, decoy):
        monkeypatch.setenv("DAYFLOW_SCHEMA", decoy)
        open_store(url).close()  # the decoy has its tables: a session left pointing there would see them
        poison_sessions(url, decoy)
        monkeypatch.setenv("DAYFLOW_SCHEMA", schema)
        store = open_store(url)
        try:
            assert store.dialect.schema_version(store.db) == SCHEMA_VERSION
            run = store.create_run("hello", model="offline")
        finally:
            store.close()
        tables = {row[0] for row in admin_rows("SELECT tablename FROM pg_tables WHERE schemaname = %s", schema)}
        assert DAYFLOW_TABLES <= tables
        assert admin_rows(f'SELECT value FROM "{schema}".dayflow_meta WHERE key = %s', "schema_version") == \
            [(SCHEMA_VERSION,)]
        assert admin_rows(f'SELECT id FROM "{schema}".runs') == [(run.id,)]
        assert admin_rows(f'SELECT count(*) FROM "{decoy}".runs') == [(0,)]


def test_a_bad_schema_name_is_one_line():
    done = dayflow("runs", "--schema", 'x"; DROP TABLE runs; --')
    assert done.returncode == 64
    assert "--schema" in done.stderr and "Traceback" not in done.stderr
    done = dayflow("runs", env={"DAYFLOW_SCHEMA": "1abc"})
    assert done.returncode == 64
    assert done.stderr.strip().splitlines() == [
        "dayflow: error: DAYFLOW_SCHEMA must be a schema name (letters, digits and _), got '1abc'"]


def test_the_change_feed_behind_pgbouncer_is_never_live(bouncer, monkeypatch):
    """LISTEN runs on a server session PgBouncer then gives to others: the feed's probe, sent on a second
    connection as other sessions' notices are, never comes back, so it never claims to be live and readers keep
    polling the change marker."""
    import time

    url = bouncer.url + "?application_name=dayflow-test-bouncer-feed"
    with schemas(1) as (schema,):
        monkeypatch.setenv("DAYFLOW_SCHEMA", schema)
        store = open_store(url)
        feed = store.change_feed().start()
        try:
            deadline = time.monotonic() + 60
            seen_live = False
            while feed.drops < 1:  # its first probe was not heard back, and the feed started over
                assert time.monotonic() < deadline, "the feed neither went live nor gave up"
                seen_live |= feed.live
                store.create_run("a commit it should hear", model="offline")
                time.sleep(0.2)
            assert not seen_live and not feed.live
            assert feed.notices == 0 and feed.connects >= 1
            assert "did not come back" in feed.last_error
        finally:
            feed.stop()
            store.close()
