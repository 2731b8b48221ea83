"""A reply is never bought on a lease in doubt (issue #29's finding at max_connections=5).

A holder whose heartbeats kept failing for longer than CONFIRM_AFTER_S confirms its lease with one write
before it pays; found taken over meanwhile, it makes no call. And the commit of a paid reply stops retrying
once the lease is in doubt, so the reply is spooled before another worker can take the run over (the
whole story, with real workers and a real server starved of connections, is
tests/faults/test_private_cluster.py)."""

from __future__ import annotations

import time

import pytest

from dayflow_tui.agent import brief, runs
from dayflow_tui.config.errors import RunBusy, StoreError
from dayflow_tui.store import CONFIRM_AFTER_S, Run
from dayflow_tui.store.retry import only_while

from ..conftest import CountingClient


def test_a_lease_unconfirmed_for_too_long_is_confirmed_before_a_call_and_a_lost_one_pays_nothing(store,
                                                                                                monkeypatch):
    run = store.create_run("brief me", model="offline")
    lease = store.claim(run.id)
    kept = store.set_tool_results

    def then_doubt_and_lose(*args, **kwargs):
        # Step 1's tool results land; then its heartbeats fail for longer than CONFIRM_AFTER_S, and meanwhile
        # another worker takes the run over: the next thing the driver does is step 2's call.
        kept(*args, **kwargs)
        lease.confirmed_at = time.monotonic() - CONFIRM_AFTER_S - 1
        Run.update(lease_token="x" * 32).where(Run.id == run.id).execute()

    monkeypatch.setattr(store, "set_tool_results", then_doubt_and_lose)
    client = CountingClient()
    with pytest.raises(RunBusy):
        runs.drive_claimed(store, run.id, lease, agent=brief.AGENT, client=client)
    assert client.calls == 1 == len(store.steps(run.id))  # step 2 was never bought


def test_a_lease_in_doubt_that_is_still_ours_is_confirmed_and_the_run_goes_on(store):
    run = store.create_run("brief me", model="offline")
    lease = store.claim(run.id)
    lease.confirmed_at = time.monotonic() - CONFIRM_AFTER_S - 1
    client = CountingClient()
    result = runs.drive_claimed(store, run.id, lease, agent=brief.AGENT, client=client)
    assert result.status == "done"
    assert client.calls == len(store.steps(run.id)) == 3
    assert lease.unconfirmed_for() < CONFIRM_AFTER_S  # the confirming write refreshed it


def test_only_while_stops_a_store_calls_retries_when_its_condition_turns(store, monkeypatch):
    """The retry loop asks the condition before each new try: a transient failure then ends the call."""
    import sqlite3

    import psycopg

    tries = {"n": 0}

    def failing(*args, **kwargs):
        tries["n"] += 1
        raise (sqlite3.OperationalError("database is locked") if store.dialect.name == "sqlite"
               else psycopg.OperationalError("server closed the connection unexpectedly"))

    monkeypatch.setattr(store.db, "execute_sql", failing)
    allowed = iter([True, True, False])
    with only_while(lambda: next(allowed, False)):
        with pytest.raises(StoreError):
            store.get_run("abcdef123456")
    assert tries["n"] == 3
