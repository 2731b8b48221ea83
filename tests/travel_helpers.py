"""Helpers for the export / import / prune / OpenTelemetry tests: databases of either kind, and their rows as read
by plain SQL (not through the code under test)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.config.errors import ModelCallFailed
from dayflow_tui.store import open_store

from .conftest import CountingClient, dayflow_cmd, pg_schema
from .reliability_helpers import cli_env

TABLES = {"runs": "id", "steps": "run_id, n", "run_resumes": "id", "tasks": "id", "approvals": "id"}


@contextlib.contextmanager
def database(kind: str, tmp_path: Path, name: str) -> Iterator[str]:
    """An empty database as a ``--db`` value: a file under ``tmp_path``, or a PostgreSQL schema of its own."""
    if kind == "sqlite":
        yield str(tmp_path / f"{name}.db")
        return
    with pg_schema() as url:
        yield url


def rows(target: str, table: str) -> list[dict]:
    """Every row of ``table`` by plain SQL, booleans as 0/1 (SQLite's form), ordered by its key."""
    order = TABLES[table]
    if "://" in target:
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            cursor = conn.execute(f"SELECT * FROM {table} ORDER BY {order}")
            names = [c.name for c in cursor.description]
            found = [dict(zip(names, row)) for row in cursor.fetchall()]
    else:
        conn = sqlite3.connect(target)
        try:
            cursor = conn.execute(f"SELECT * FROM {table} ORDER BY {order}")
            names = [c[0] for c in cursor.description]
            found = [dict(zip(names, row)) for row in cursor.fetchall()]
        finally:
            conn.close()
    return [{k: int(v) if isinstance(v, bool) else v for k, v in row.items()} for row in found]


def run_rows(target: str, run_ids: set[str]) -> dict[str, list[dict]]:
    """The rows that belong to ``run_ids``, per table (tasks: those linked to them)."""
    return {
        "runs": [r for r in rows(target, "runs") if r["id"] in run_ids],
        "steps": [r for r in rows(target, "steps") if r["run_id"] in run_ids],
        "run_resumes": [r for r in rows(target, "run_resumes") if r["run_id"] in run_ids],
        "tasks": [r for r in rows(target, "tasks") if r["run_id"] in run_ids],
        "approvals": [r for r in rows(target, "approvals") if r["run_id"] in run_ids],  # the per-call journal
    }


def dayflow(*args: str, db: str | None = None, env: dict | None = None, timeout: float = 120
            ) -> subprocess.CompletedProcess:
    """The real console script, text output."""
    full = list(args) + (["--db", db] if db is not None else [])
    return subprocess.run(dayflow_cmd(*full), capture_output=True, text=True, env=env or cli_env(),
                          timeout=timeout, stdin=subprocess.DEVNULL)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def three_kinds_of_run(target: str, model: str = "offline") -> dict[str, str]:
    """A done run, a failed run resumed to done (a resume record), and an interrupted run (2 of 3 steps).

    Made in this process with a fake client; the interrupted run's owner is a
    process that has since died, as after a kill -9.
    """
    store = open_store(target)
    try:
        done = run_brief(store, client=CountingClient(), model=model).run_id
        failing = CountingClient(fail_on={2: RuntimeError("overloaded")})
        with new_run(store) as failed:
            with pytest.raises(ModelCallFailed):
                run_brief(store, client=failing, model=model)
        failed = failed[0]
        assert resume(failed, store=store, client=CountingClient()).status == "done"
        with new_run(store) as interrupted:
            with pytest.raises(SystemExit):
                run_brief(store, client=CountingClient(), model=model, crash_after_step=2)
        interrupted = interrupted[0]
    finally:
        store.close()
    dead = subprocess.Popen(["true"])
    dead.wait()
    _set(target, "UPDATE runs SET owner_host = %s, owner_pid = %s, lease_token = %s, heartbeat_at = created_at "
         "WHERE id = %s", (os.uname().nodename, dead.pid, "f" * 32, interrupted))
    return {"done": done, "resumed": failed, "interrupted": interrupted}


@contextlib.contextmanager
def new_run(store) -> Iterator[list[str]]:
    """``with new_run(store) as made:`` -> ``made[0]`` is the id of the one run created in the block.

    (Not the newest by ``created_at``: under a pinned clock every run is created at the same moment.)
    """
    before = {r.id for r in store.list_runs(limit=100_000)}
    made: list[str] = []
    yield made
    [created] = {r.id for r in store.list_runs(limit=100_000)} - before
    made.append(created)


def _set(target: str, sql: str, params: tuple) -> None:
    if "://" in target:
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(sql, params)
        return
    conn = sqlite3.connect(target)
    try:
        with conn:
            conn.execute(sql.replace("%s", "?"), params)
    finally:
        conn.close()


def killed_after_two_steps(db: Path, env: dict[str, str]) -> str:
    """``dayflow brief`` (real process, model behind ``env``) SIGKILLed while it waits on its third call."""
    proc = subprocess.Popen(dayflow_cmd("brief", "--model", "claude-sonnet-5-5", "--db", str(db)), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while True:
            assert proc.poll() is None, "the brief ended before it could be killed"
            assert time.monotonic() < deadline, "the brief never reached its third call"
            if db.exists():
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
                try:
                    found = conn.execute("SELECT run_id FROM steps WHERE n = 2 AND tools_done_at IS NOT NULL"
                                         ).fetchone()
                except sqlite3.Error:
                    found = None
                finally:
                    conn.close()
                if found:
                    time.sleep(0.2)  # into the third call (the loopback API holds every answer)
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(timeout=30)
                    return found[0]
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def searched(target: str, *words: str) -> list[tuple]:
    """``dayflow search WORDS --json``: (run, step, where) of each hit, in order."""
    found = dayflow("search", *words, "--json", "--limit", "500", db=target)
    assert found.returncode == 0, found.stderr
    return [(hit["run_id"], hit["step"], hit["where"]) for hit in json.loads(found.stdout)]


def search_index_is_whole(target: str, *words: str) -> list[tuple]:
    """The hits for ``words``, checked equal to the hits after the index is rebuilt from the rows.

    Compared as sorted lists: hits at the same moment (a pinned clock) may come in either order.
    """
    before = sorted(searched(target, *words))
    if "://" not in target:  # SQLite's FTS5 table keeps only words: a removed run must take its own out
        conn = sqlite3.connect(target)
        try:
            docs = {row[0] for row in conn.execute("SELECT id FROM search_docs")}
            for word in words:
                matched = {row[0] for row in conn.execute("SELECT rowid FROM search_fts WHERE search_fts MATCH ?",
                                                          (word,))}
                assert matched and matched <= docs, matched - docs  # no word left behind by a removed row
        finally:
            conn.close()
    rebuilt = dayflow("search", "--reindex", db=target)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert sorted(searched(target, *words)) == before
    return before
