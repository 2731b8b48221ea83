"""Crash anywhere: SIGKILL real ``dayflow`` processes at seeded random moments, then resume until done.

``DAYFLOW_CRASH_SEED`` replays a schedule (the seed is printed, and named in
every failure); ``DAYFLOW_CRASH_TRIALS`` changes the number of trials
(default 10, split between the offline model and the real SDK against the
loopback stub; the brief of trial i is killed aiming at the API wait, the
tools, a commit and anywhere in turn, so every phase is hit in any run of 10
or more; raise it for breadth, e.g. 50 before a release);
``DAYFLOW_CRASH_WORKERS`` how many trials run at once.
``DAYFLOW_CRASH_REPORT=FILE`` writes the figures as JSON (docs/reliability.md
quotes them).
"""

from __future__ import annotations

import json
import os
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from ..crash_harness import Trial, summarise
from ..loopback_api import LoopbackAPI

SDK_SHARE = 0.3  # of the trials, how many drive the real SDK against the loopback stub


@pytest.fixture(scope="module")
def loopback():
    """One loopback API for the module's SDK trials (a lane each)."""
    with LoopbackAPI() as server:
        yield server


# CPU-bound (the SDK trials' processes import the SDK): 10 trials take about 25 s on 2 busy cores; the timeout
# leaves room for DAYFLOW_CRASH_TRIALS=50 on a busier machine.
@pytest.mark.slow  # runs by default; `-m "not slow"` skips it for a quick loop
@pytest.mark.timeout(1200)
def test_kill_anywhere_then_resume_finishes_the_same_run(tmp_path, capsys, loopback):
    seed = int(os.environ.get("DAYFLOW_CRASH_SEED") or random.SystemRandom().randrange(10**6))
    count = int(os.environ.get("DAYFLOW_CRASH_TRIALS", "10"))
    workers = int(os.environ.get("DAYFLOW_CRASH_WORKERS", "4"))
    only = os.environ.get("DAYFLOW_CRASH_TRIAL")  # replay one trial of the seed
    indexes = [int(only)] if only else list(range(count))
    sdk_every = max(round(1 / SDK_SHARE), 1)
    with capsys.disabled():
        print(f"\ncrash trials: seed {seed} (replay with DAYFLOW_CRASH_SEED={seed}), {len(indexes)} trial(s)")

    def one(index: int):
        backend = "sdk" if index % sdk_every == sdk_every - 1 else "offline"
        return Trial(index, seed, backend, tmp_path / f"trial{index:03d}", server=loopback).run()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, indexes))
    figures = summarise(results)
    with capsys.disabled():
        print(f"crash trials: {json.dumps(figures)}")
    if os.environ.get("DAYFLOW_CRASH_REPORT"):
        with open(os.environ["DAYFLOW_CRASH_REPORT"], "w") as fh:
            json.dump({"seed": seed, **figures}, fh, indent=2)
    failures = [f"trial {r.index} ({r.backend}, run {r.run_id}, kills "
                f"{[(k.process, k.phase, k.lost_calls) for k in r.kills]}): {p} "
                f"[replay: DAYFLOW_CRASH_SEED={seed} DAYFLOW_CRASH_TRIAL={r.index}]"
                for r in results for p in r.problems]
    assert not failures, "\n".join(failures)
    assert len(indexes) < 10 or figures["kills"] >= len(indexes), figures
    # Every phase the issue names must have been hit at least once in a full run (the briefs' kills aim
    # at each in turn: at least twice each in 10 trials).
    if len(indexes) >= 10:
        for phase in ("waiting on the API", "running tools", "committing"):
            assert figures["kills_by_phase"][phase] > 0, figures
