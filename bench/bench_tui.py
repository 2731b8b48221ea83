"""Dashboard benchmark: time to a usable run list and to an open transcript, as ratios in one run.

- Run list: from creating the app to the first key handled on a drawn list
  (the cursor moved down one row), on databases of 10, 10,000 and 100,000
  runs. The list is keyset-paged, so the ratio against 10 runs should stay
  near 1 (a ``DataTable`` holding every row blocks ~1 s at 10k, ~10 s at 100k).
- Transcript: from Enter on the run to the first step drawn, and then to the
  last step after ``G``, for runs of 10 and 500 agent-like steps (the shared
  workload in ``bench.common``, ~2 KB of tool payload per step). Only the
  selected step is rendered, so 500 steps should cost little more than 10.

Each measurement alternates the sizes round by round (noise hits all alike)
and reports the median. ``python bench/bench_tui.py`` runs this item alone.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # ``python bench/bench_tui.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, scale, build_run, median, ms, workdir  # noqa: E402
from dayflow_tui.tui.pilot_support import wait_until  # noqa: E402

SIZE = (120, 36)
LIST_SIZES = scale((10, 10_000, 100_000), (10, 100))
TRANSCRIPT_STEPS = scale((10, 500), (5, 20))


async def _until(pilot, condition, timeout: float = 120.0) -> None:
    await wait_until(pilot, condition, timeout=timeout, step=0.001)


def time_run_list(path: Path) -> float:
    """Seconds from creating the app to the first key handled on a drawn run list."""
    from dayflow_tui.store import open_store
    from dayflow_tui.tui.app import DayflowApp
    from dayflow_tui.tui.widgets.run_table import RunTable

    store = open_store(path, create=False)
    result: list[float] = []

    async def measure() -> None:
        started = time.perf_counter()
        app = DayflowApp(store)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.screen.query(RunTable) and app.screen.query_one(RunTable).total)
            table = app.screen.query_one(RunTable)
            await pilot.press("down")
            await _until(pilot, lambda: table.cursor == 1)
            result.append(time.perf_counter() - started)

    try:
        asyncio.run(measure())
    finally:
        store.close()
    return result[0]


def time_transcript(path: Path, run_id: str) -> tuple[float, float]:
    """Seconds from Enter to the first step drawn, and from ``G`` to the last step drawn."""
    from dayflow_tui.store import open_store
    from dayflow_tui.tui.app import DayflowApp
    from dayflow_tui.tui.screens.transcript import TranscriptScreen
    from dayflow_tui.tui.widgets.run_table import RunTable
    from dayflow_tui.tui.widgets.step_detail import StepDetail

    store = open_store(path, create=False)
    result: list[float] = []

    def detail_shows(screen, text: str) -> bool:
        detail = screen.query_one(StepDetail)
        return bool(detail.children) and text in str(detail.children[0].render())

    async def measure() -> None:
        app = DayflowApp(store)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.screen.query(RunTable)
                         and run_id in app.screen.query_one(RunTable).window.positions)
            app.screen.query_one(RunTable).select_run(run_id)
            await pilot.pause()
            started = time.perf_counter()
            await pilot.press("enter")
            await _until(pilot, lambda: isinstance(app.screen, TranscriptScreen) and app.screen.views
                         and detail_shows(app.screen, "Step 1 "))
            result.append(time.perf_counter() - started)
            screen = app.screen
            last = screen.views[-1].n
            started = time.perf_counter()
            await pilot.press("G")  # the run is interrupted (no brief): G lands on its last step
            await _until(pilot, lambda: detail_shows(screen, f"Step {last} "))
            result.append(time.perf_counter() - started)

    try:
        asyncio.run(measure())
    finally:
        store.close()
    return result[0], result[1]


def build_fixtures(tmp: Path, list_sizes, transcript_steps) -> tuple[dict, dict]:
    from dayflow_tui.store import open_store
    from dayflow_tui.tui import demo_data

    lists = {}
    for n in list_sizes:
        path = tmp / f"runs-{n}.db"
        store = open_store(path)
        demo_data.many_runs(store, n)
        store.close()
        lists[n] = path
    transcripts = {}
    for n in transcript_steps:
        path = tmp / f"steps-{n}.db"
        store = open_store(path)
        transcripts[n] = (path, build_run(store, n))
        store.close()
    return lists, transcripts


def run(quick: bool = False) -> list[Row]:
    os.environ.setdefault("DAYFLOW_OFFLINE_DELAY", "0")
    rounds = scale(3 if quick else 7, 1)
    list_sizes = LIST_SIZES[:2] if quick else LIST_SIZES
    rows: list[Row] = []
    with workdir("tui") as tmp:
        started = time.perf_counter()
        lists, transcripts = build_fixtures(tmp, list_sizes, TRANSCRIPT_STEPS)
        print(f"  fixtures built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        list_times: dict[int, list[float]] = {n: [] for n in list_sizes}
        open_times: dict[int, list[float]] = {n: [] for n in TRANSCRIPT_STEPS}
        last_times: dict[int, list[float]] = {n: [] for n in TRANSCRIPT_STEPS}
        for r in range(rounds + 1):  # round 0 warms imports and the page cache
            order = list(list_sizes) if r % 2 else list(reversed(list_sizes))
            for n in order:
                elapsed = time_run_list(lists[n])
                if r:
                    list_times[n].append(elapsed)
            for n in (TRANSCRIPT_STEPS if r % 2 else tuple(reversed(TRANSCRIPT_STEPS))):
                opened, to_last = time_transcript(*transcripts[n])
                if r:
                    open_times[n].append(opened)
                    last_times[n].append(to_last)
    base = median(list_times[list_sizes[0]])
    for n in list_sizes:
        value = median(list_times[n])
        rows.append(Row("dashboard", f"run list usable, {n:,} runs", ms(value),
                        f"{ms(base)} (10 runs)" if n != list_sizes[0] else "", value / base if n != list_sizes[0] else None,
                        "< 2x at 10k" if n == 10_000 else "", (value / base < 2) if n == 10_000 else None,
                        "app start to first key handled"))
    base_open, base_last = median(open_times[10]), median(last_times[10])
    for n in TRANSCRIPT_STEPS:
        opened, to_last = median(open_times[n]), median(last_times[n])
        big = n != TRANSCRIPT_STEPS[0]
        rows.append(Row("dashboard", f"transcript open, {n} steps", ms(opened),
                        f"{ms(base_open)} (10 steps)" if big else "", opened / base_open if big else None,
                        "< 2x at 500" if big else "", (opened / base_open < 2) if big else None,
                        "Enter to first step drawn"))
        rows.append(Row("dashboard", f"transcript jump to last, {n} steps", ms(to_last),
                        f"{ms(base_last)} (10 steps)" if big else "", to_last / base_last if big else None,
                        "", None, "G to last step drawn"))
    return rows


if __name__ == "__main__":
    from bench.run_all import table

    print(table(run(quick="--quick" in sys.argv)))
