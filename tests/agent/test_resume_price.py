"""`dayflow resume --dry-run`: the next call's size, cache state and price, with no call made and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta
from decimal import Decimal

from dayflow_tui.money.cost import format_usd

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI

MODEL = "claude-sonnet-4-5"
# Claude Sonnet 4.5's published rates, dollars per million tokens: cache write (5 minutes), cache read, output.
WRITE, READ, OUTPUT = Decimal("3.75"), Decimal("0.3"), Decimal("15")


def run(*args: str, env: dict, db) -> subprocess.CompletedProcess:
    return subprocess.run(dayflow_cmd(*args, "--db", str(db)), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DAYFLOW_OFFLINE_DELAY": "0", **env}, stdin=subprocess.DEVNULL)


def at(iso: str, seconds: int) -> str:
    return (datetime.fromisoformat(iso.replace("Z", "+00:00")) + timedelta(seconds=seconds)).isoformat()


def steps_of(db, run_id: str, env: dict) -> list[dict]:
    """The stored steps as `show --raw` would read them: via the store, in a subprocess-free way."""
    from dayflow_tui.store import open_store

    store = open_store(db, create=False)
    try:
        return [{"input": s.input_tokens, "output": s.output_tokens, "created_at": s.created_at}
                for s in store.steps(run_id)]
    finally:
        store.close()


def test_dry_run_counts_through_the_api_makes_no_call_and_judges_the_cache_by_time(db_path):
    with LoopbackAPI() as api:
        env = api.env()
        crashed = run("brief", "--model", MODEL, "--crash-after", "2", env=env, db=db_path)
        assert crashed.returncode != 0 and api.calls == 2
        [row] = json.loads(run("runs", "--json", env=env, db=db_path).stdout)
        steps = steps_of(db_path, row["id"], env)
        api.count_offset = 1000  # so a size from the endpoint cannot be mistaken for a local estimate
        before = run("runs", "--json", env=env, db=db_path).stdout
        prefix, largest = steps[-1]["input"], max(s["output"] for s in steps)

        # Idle times around the 5-minute lifetime the requests ask for.
        for number, (idle, warm) in enumerate([(60, True), (299, True), (301, False), (3600, False)], 1):
            dry = run("resume", row["id"], "--dry-run",
                      env={**env, "DAYFLOW_FAKE_NOW": at(steps[-1]["created_at"], idle)}, db=db_path)
            assert dry.returncode == 0, dry.stderr
            assert api.calls == 2 and len(api.count_requests) == number  # counted (free), never called
            counted = api.count(api.count_requests[-1])
            warm_cost = (prefix * READ + (counted - prefix) * WRITE + largest * OUTPUT) / 1_000_000
            cold_cost = (counted * WRITE + largest * OUTPUT) / 1_000_000
            out, state = dry.stdout, "warm" if warm else "cold"
            assert f"next request: 5 messages, {counted:,} input tokens (counted by the API)" in out
            assert f"prompt cache: {state}: last call " in out and ", lifetime 5m" in out, (idle, out)
            assert (f"next call: {format_usd(warm_cost)} with a warm cache, {format_usd(cold_cost)} cold "
                    f"(likely: {state};") in out
            assert f"already paid: {format_usd(Decimal(str(row['cost_usd'])))} for 2 committed step(s)" in out
        assert run("runs", "--json", env=env, db=db_path).stdout == before  # nothing written

        # The count asked about exactly the request the resume then sends.
        resumed = run("resume", row["id"], env=env, db=db_path)
        assert resumed.returncode == 0, resumed.stderr
        assert api.calls == 3
        sent = api.requests[-1]
        assert {k: sent[k] for k in ("model", "system", "tools", "messages")} == api.count_requests[0]
        assert "the 2 committed step(s) (" in resumed.stderr and "were not paid again" in resumed.stderr


def test_dry_run_without_a_key_estimates_and_calls_nothing(db_path, tmp_path):
    log = tmp_path / "calls.log"
    env = {"DAYFLOW_CALL_LOG": str(log)}
    assert run("brief", "--crash-after", "2", env=env, db=db_path).returncode != 0
    assert len(log.read_text().splitlines()) == 2
    dry = run("resume", "--dry-run", env=env, db=db_path)
    assert dry.returncode == 0, dry.stderr
    assert len(log.read_text().splitlines()) == 2
    assert "input tokens (estimated)" in dry.stdout
    assert "next call: $0.00 with a warm cache, $0.00 cold" in dry.stdout  # the offline model is free
    # The estimate is the size the next call then reports (the offline model counts as the estimate does).
    predicted = int(dry.stdout.split("next request: 5 messages, ")[1].split(" input")[0].replace(",", ""))
    [before] = json.loads(run("runs", "--json", env=env, db=db_path).stdout)
    assert run("resume", env=env, db=db_path).returncode == 0
    [row] = json.loads(run("runs", "--json", env=env, db=db_path).stdout)
    assert row["input_tokens"] - before["input_tokens"] == predicted


def test_dry_run_of_a_done_run_and_of_a_model_without_a_price(db_path):
    assert run("brief", env={}, db=db_path).returncode == 0
    done = run("resume", "--dry-run", json.loads(run("runs", "--json", env={}, db=db_path).stdout)[0]["id"],
               env={}, db=db_path)
    assert done.returncode == 0 and "a resume makes no call" in done.stdout
    with LoopbackAPI() as api:
        env = api.env()
        assert run("brief", "--model", "mystery-model", "--crash-after", "1", env=env, db=db_path).returncode != 0
        dry = run("resume", "--dry-run", env=env, db=db_path)
        assert dry.returncode == 0, dry.stderr
        assert "next call: price unknown (no price for model mystery-model" in dry.stdout
        assert api.calls == 1
        listed = run("runs", env=env, db=db_path).stdout
        assert "cost=unknown" in listed
