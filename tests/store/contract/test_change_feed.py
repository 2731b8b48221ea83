"""change_feed, both backends: PostgreSQL pushes every commit of another process (LISTEN/NOTIFY, counted here:
notices, not time); SQLite's feed is never live (its readers poll the change marker)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from dayflow_tui.store import open_store

from ...conftest import dayflow_cmd, pg_schema


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_second_process_commits_and_the_feed_hears_each_commit(store, db_target, backend):
    heard = []
    feed = store.change_feed(on_change=lambda: heard.append(1)).start()
    try:
        if backend == "sqlite":
            assert feed.live is False and feed.wait(0.05) is False
        else:
            wait_until(lambda: feed.live)
            assert feed.connects == 1 and feed.notices == 0
        done = subprocess.run(dayflow_cmd("brief", "--db", db_target), capture_output=True, text=True,
                              env=os.environ, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        steps = sum(len(store.steps(run.id)) for run in store.list_runs(limit=10))
        assert steps >= 3
        if backend == "sqlite":
            assert feed.notices == 0 and feed.live is False
            return
        # Each step is a commit of its own (and the tool results, the finish...): at least one notice each.
        wait_until(lambda: feed.notices >= steps)
        assert feed.live and feed.drops == 0
        assert len(heard) >= feed.notices  # every notice reached the callback (plus one at connect)
    finally:
        feed.stop()


def test_commits_in_another_schema_of_the_database_are_not_heard(store, backend):
    if backend == "sqlite":
        pytest.skip("one SQLite file holds one Dayflow: there is no other schema")
    feed = store.change_feed().start()
    try:
        wait_until(lambda: feed.live)
        with pg_schema() as other_url:
            other = open_store(other_url)
            try:
                for i in range(5):
                    other.create_run(f"elsewhere {i}", model="offline")
            finally:
                other.close()
        store.create_run("here", model="offline")
        # A listener gets notices in commit order: had the other schema's five been heard, they came first.
        wait_until(lambda: feed.notices >= 1)
        assert feed.notices == 1
    finally:
        feed.stop()
