"""15. A live 5,000-step run on screen: the longest the dashboard's UI thread is blocked while steps arrive.

The dashboard shows a run's transcript while another process commits a step
to it every 100 ms (``append_step`` then ``set_tool_results``, as a driver
does). A 5 ms timer on the app's event loop notes when it fires; the longest
gap between two firings, less the 5 ms, is the longest the UI thread was
busy (a read, a decode, a layout). The baseline is the same with a 10-step
run in the same process order, rounds alternating. Also the transcript's
step count when the writer stops (it must have kept up). Target (issue #17):
the longest block under 50 ms.

``python bench/bench_live.py`` runs this item alone (``--quick``: fewer steps).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # ``python bench/bench_live.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, Row, scale, median, ms, quiet_env  # noqa: E402

TICK_S = 0.005
EVERY_S = 0.1

WRITER = r"""
import json, sys, time
from dayflow_tui.store import open_store, StepRecord
db, run_id, first, count, every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
store = open_store(db, create=False)
print("ready", flush=True)
sys.stdin.readline()
for n in range(first, first + count):
    started = time.perf_counter()
    blocks = [{"type": "text", "text": f"step {n}: " + "reading the calendar again. " * 8},
              {"type": "tool_use", "id": f"toolu_{n:05d}", "name": "read_calendar", "input": {"range": "week"}}]
    store.append_step(run_id, StepRecord(n=n, stop_reason="tool_use", assistant=blocks, input_tokens=1000 + n,
                                         output_tokens=50 + n % 7))
    payload = json.dumps({"ok": True, "count": 3, "events": [{"title": f"event {k}"} for k in range(3)]})
    store.set_tool_results(run_id, n, [{"type": "tool_result", "tool_use_id": f"toolu_{n:05d}", "content": payload}])
    time.sleep(max(every - (time.perf_counter() - started), 0))
store.close()
print("done", flush=True)
"""


def fixture(steps: int, folder: Path) -> Path:
    """A running run of ``steps`` steps (its last one waiting on the next call)."""
    from dayflow_tui.store import StepRecord, open_store

    path = folder / f"live-{steps}.db"
    store = open_store(path)
    run_id = "live-run"
    with store.db.atomic():
        store.create_run(f"live run of {steps} steps", model="offline", run_id=run_id, status="running")
        for n in range(1, steps + 1):
            blocks = [{"type": "text", "text": f"step {n}: " + "reading the calendar again. " * 8},
                      {"type": "tool_use", "id": f"toolu_{n:05d}", "name": "read_calendar", "input": {"range": "week"}}]
            store.append_step(run_id, StepRecord(n=n, stop_reason="tool_use", assistant=blocks,
                                                 input_tokens=1000 + n, output_tokens=50 + n % 7))
            payload = json.dumps({"ok": True, "count": 3, "events": [{"title": f"event {k}"} for k in range(3)]})
            store.set_tool_results(run_id, n, [{"type": "tool_result", "tool_use_id": f"toolu_{n:05d}",
                                                "content": payload}])
    store.close()
    return path


def probe(db: Path, steps: int, added: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "bench.bench_live", "--probe", str(db), str(steps), str(added)],
                          cwd=REPO, env=quiet_env(), capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"live probe failed: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


async def _probe(db: str, steps: int, added: int) -> dict:
    from textual.widgets import OptionList

    from dayflow_tui.store import open_store
    from dayflow_tui.tui.app import DayflowApp
    from dayflow_tui.tui.pilot_support import wait_until
    from dayflow_tui.tui.screens.transcript import TranscriptScreen
    from dayflow_tui.tui.widgets.run_table import RunTable

    store = open_store(db, create=False)
    app = DayflowApp(store)
    fired: list[float] = []
    async with app.run_test(headless=True, size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: app.screen.query(RunTable) and app.screen.query_one(RunTable).current,
                         timeout=120)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TranscriptScreen)
                         and app.screen.query_one("#steps", OptionList).option_count >= steps, timeout=120)
        await pilot.press("G")  # following the newest step, as someone watching would
        writer = subprocess.Popen([sys.executable, "-c", WRITER, db, "live-run", str(steps + 1), str(added),
                                   str(EVERY_S)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "ready"
        measuring = [True]
        app.set_interval(TICK_S, lambda: measuring[0] and fired.append(time.perf_counter()))
        writer.stdin.write("go\n")
        writer.stdin.flush()
        while writer.poll() is None:
            await asyncio.sleep(0.05)
        shown = app.screen.query_one("#steps", OptionList)
        while shown.option_count < steps + added:  # the last step on screen ends the measurement
            await asyncio.sleep(0.01)
        measuring[0] = False
        caught_up = time.perf_counter()
    store.close()
    gaps = sorted(b - a for a, b in zip(fired, fired[1:]))
    return {"longest_block": max(gaps[-1] - TICK_S, 0.0), "p99_block": max(gaps[int(len(gaps) * 0.99)] - TICK_S, 0.0),
            "ticks": len(fired), "caught_up_after": caught_up - fired[-1] if fired else None}


def run(quick: bool = False) -> list[Row]:
    sizes = scale((10, 1_000) if quick else (10, 5_000), (5, 40))
    added = scale(30 if quick else 100, 5)
    rounds = scale(2 if quick else 3, 1)
    folder = Path(tempfile.mkdtemp(prefix="dayflow-bench-live-"))
    dbs = {n: fixture(n, folder) for n in sizes}
    results: dict[int, list[dict]] = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            fresh = folder / f"round-{n}.db"
            fresh.write_bytes(dbs[n].read_bytes())  # every round starts from the same run
            results[n].append(probe(fresh, n, added))
    base, ours = results[sizes[0]], results[sizes[1]]
    rows = []
    for key, what in (("longest_block", "longest UI-thread block"), ("p99_block", "p99 UI-thread block")):
        floor, mine = median([r[key] for r in base]), median([r[key] for r in ours])
        rows.append(Row("15 live", f"{what}, {sizes[1]:,}-step run taking a step every 100 ms ({added} steps)",
                        ms(mine), f"{sizes[0]}-step run {ms(floor)}", mine / floor if floor else None,
                        "< 50 ms" if key == "longest_block" else "",
                        (mine < 0.05) if key == "longest_block" else None,
                        f"worst round {ms(max(r[key] for r in ours))}"))
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--probe":
        print(json.dumps(asyncio.run(_probe(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))))
    else:
        from bench.run_all import table

        print(table(run(quick="--quick" in sys.argv)))
