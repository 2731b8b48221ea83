"""5. Dashboard: first paint and time-to-usable with 10, 10,000 and 100,000 runs; transcripts; live latency.

Every figure comes from a fresh process (``bench.dashboard_probe``), so it
includes the cold start a user waits through; "in app" figures leave the
imports out (from the first line of app code to the frame). Fixture
databases are built by the dashboard's own ``demo_data`` helpers.

- List: first paint = the first frame with run rows; usable = a key moves the
  cursor and the row is drawn again. Target: 100,000 runs within 2x of 10.
- Transcript: opening a 10- and a 500-step run (step list filled and drawn),
  then jumping to the last step.
- Live: ``dayflow brief`` processes (offline model, 0.3 s per call) write to
  the database the list is showing; each step's latency is from its commit
  (the ``created_at`` written in the commit) to the list holding the new step
  count. Target: median under one polling interval.
- Also reported for item 4: the dashboard's cold first paint against a bare
  Textual app's, and whether it imported ``anthropic``.
"""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, Row, scale, median, ms, quiet_env, size

LIST_SIZES = scale((10, 10_000, 100_000), (10, 100))
LONG_RUNS = scale({"bench-long-00010": 10, "bench-long-00500": 500},
                  {"bench-long-00010": 10, "bench-long-00500": 20})

_fixtures: dict[int, Path] = {}
_dir: Path | None = None


def fixture(n_runs: int) -> Path:
    """A database of ``n_runs`` runs, two of them the 10- and 500-step transcripts (built once per process)."""
    global _dir
    if n_runs in _fixtures:
        return _fixtures[n_runs]
    from dayflow_tui.store import open_store
    from dayflow_tui.tui import demo_data

    if _dir is None:
        _dir = Path(tempfile.mkdtemp(prefix="dayflow-bench-dashboard-"))
        atexit.register(shutil.rmtree, _dir, True)
    path = _dir / f"runs-{n_runs}.db"
    store = open_store(path)
    demo_data.many_runs(store, n_runs - len(LONG_RUNS), prefix="bench")
    for run_id, steps in LONG_RUNS.items():
        demo_data.long_run(store, run_id, steps)
    store.close()
    _fixtures[n_runs] = path
    return path


def probe(spec: dict, db: Path | None = None) -> dict:
    """One measurement in a fresh process (see ``dashboard_probe``)."""
    spec = dict(spec, t0=time.time())
    if db is not None:
        spec["db"] = str(db)
    done = subprocess.run([sys.executable, "-m", "bench.dashboard_probe", json.dumps(spec)], cwd=REPO,
                          env=quiet_env(), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"dashboard probe {spec} failed: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_lists(rounds: int) -> dict:
    found: dict = {n: [] for n in LIST_SIZES}
    found["minimal"] = []
    for r in range(rounds):
        order = list(LIST_SIZES) if r % 2 == 0 else list(reversed(LIST_SIZES))
        for n in order:
            found[n].append(probe({}, fixture(n)))
        found["minimal"].append(probe({"app": "minimal"}))
    return found


def measure_transcripts(rounds: int) -> dict:
    found: dict = {run_id: [] for run_id in LONG_RUNS}
    for _ in range(rounds):
        for run_id in LONG_RUNS:
            found[run_id].append(probe({"open_run": run_id}, fixture(LIST_SIZES[0])))
    return found


def measure_live(briefs: int) -> dict:
    from dayflow_tui.tui.screens.run_list import POLL_EVERY_S

    live_db = fixture(LIST_SIZES[0]).with_name("live.db")
    shutil.copyfile(fixture(LIST_SIZES[0]), live_db)
    found = probe({"live": {"briefs": briefs, "delay": 0.3}}, live_db)
    found["poll_every"] = POLL_EVERY_S
    return found


def _m(results: list[dict], key: str, minus: str | None = None) -> float:
    return median([r[key] - (r[minus] if minus else 0) for r in results])


def run(quick: bool = False) -> list[Row]:
    rounds = 1 if quick else 3
    lists = measure_lists(1 if quick else 5)  # five: a load spike on a shared machine must not be the median
    transcripts = measure_transcripts(rounds)
    live = measure_live(scale(2 if quick else 5, 1))

    rows = []
    small = lists[LIST_SIZES[0]]
    for n in LIST_SIZES[1:]:
        big = lists[n]
        for key, label in (("first_paint", "first paint"), ("usable", "time to usable")):
            cold, cold_small = _m(big, key), _m(small, key)
            warm, warm_small = _m(big, key, "imported"), _m(small, key, "imported")
            at_target = n == LIST_SIZES[-1]
            rows.append(Row("5 dashboard", f"run list, {n:,} runs: {label}, in app (cold process)",
                            f"{ms(warm)} ({ms(cold)})", f"10 runs {ms(warm_small)} ({ms(cold_small)})",
                            warm / warm_small, "<= 2x" if at_target else "",
                            warm / warm_small <= 2 if at_target else None,
                            f"{big[0]['rows_loaded']:,} of {big[0]['rows_total']:,} rows read"))
    short, long_ = (transcripts[run_id] for run_id in LONG_RUNS)
    open_short, open_long = _m(short, "transcript_open"), _m(long_, "transcript_open")
    rows.append(Row("5 dashboard", "open a 500-step transcript (step list filled and drawn)", ms(open_long),
                    f"10-step transcript {ms(open_short)}", open_long / open_short, "", None,
                    f"{long_[0]['detail_widgets']} widgets in the step view: only the selected step is built"))
    last_short, last_long = _m(short, "transcript_last_step"), _m(long_, "transcript_last_step")
    rows.append(Row("5 dashboard", "jump to the last step (End) and draw it", ms(last_long),
                    f"10-step transcript {ms(last_short)}", last_long / last_short))
    latencies = live["live_latencies"]
    poll = live["poll_every"]
    rows.append(Row("5 dashboard", f"live: step commit in `dayflow brief` -> in the list (median of "
                    f"{len(latencies)} steps, {live['live_runs']} runs)", ms(median(latencies)),
                    f"polling interval {ms(poll)}", median(latencies) / poll, "< 1x", median(latencies) < poll,
                    f"max {ms(max(latencies))}"))
    floor = lists["minimal"]
    rows.append(Row("4 start-up", "dashboard first paint, 10 runs, cold process", ms(_m(small, "first_paint")),
                    f"bare Textual app {ms(_m(floor, 'first_paint'))}",
                    _m(small, "first_paint") / _m(floor, "first_paint"), "", None,
                    "headless, 140x40"))
    imported = any(r["sys_modules_anthropic"] for r in small + lists[LIST_SIZES[-1]])
    rows.append(Row("4 start-up", "dashboard (list, transcript) imports anthropic", "yes" if imported else "no",
                    "", None, "no", not imported, "also a test"))
    _memory_inputs.update(floor=floor, small_transcript=short, big=lists[LIST_SIZES[-1]])
    return rows


# Peak RSS figures from these same probes, for item 6 when both run in one invocation.
_memory_inputs: dict = {}


def memory_rows(quick: bool = False) -> list[Row]:
    """6. Peak RSS: 100,000 runs listed and the 500-step transcript open, against 10 runs and 10 steps."""
    rounds = 1 if quick else 2
    big = [probe({"open_run": "bench-long-00500"}, fixture(LIST_SIZES[-1])) for _ in range(rounds)]
    small = _memory_inputs.get("small_transcript") or [
        probe({"open_run": "bench-long-00010"}, fixture(LIST_SIZES[0])) for _ in range(rounds)]
    floor = _memory_inputs.get("floor") or [probe({"app": "minimal"}) for _ in range(rounds)]
    peak, peak_small = _m(big, "peak_rss"), _m(small, "peak_rss")
    return [
        Row("6 memory", "dashboard peak RSS, 100,000 runs + 500-step transcript open", size(peak),
            f"10 runs + 10-step transcript {size(peak_small)}", peak / peak_small, "", None,
            f"bare Textual app {size(_m(floor, 'peak_rss'))}"),
    ]
