"""One dashboard measurement in a fresh process: ``python -m bench.dashboard_probe SPEC_JSON``.

Run by ``bench_dashboard`` so every figure includes a cold start and the peak
RSS belongs to one scenario only. The app runs headless at a fixed size:
Textual composes every frame (``render_line`` on every visible row) but writes
no bytes to a terminal. Prints one JSON object of wall-clock marks (seconds
since the parent spawned this process) and measurements.

SPEC keys: ``db``; ``t0`` (the parent's ``time.time()`` just before spawning);
``app`` (``"dayflow"``, or ``"minimal"`` for a bare Textual app: the floor);
``open_run`` (open this run's transcript once the list is usable, then jump to
its last step); ``live`` (``{"briefs": N, "delay": S}``: run N ``dayflow
brief`` processes one after another against the database while the list is
on screen, and time each step from its commit to the list showing it).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

SIZE = (140, 40)


def peak_rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


async def _until(pilot, condition, timeout: float = 120.0, step: float = 0.002) -> float:
    """Wait (letting the app run) until ``condition()``; return the time it first held."""
    from dayflow_tui.tui.pilot_support import wait_until  # here: the probe times its own imports

    return await wait_until(pilot, condition, timeout=timeout, step=step)


async def minimal(spec: dict) -> dict:
    """The floor: a bare Textual app with one Static, first frame composed."""
    from textual.app import App
    from textual.widgets import Static

    painted: dict = {}

    class Probe(Static):
        def render(self):
            painted.setdefault("at", time.time())
            return super().render()

    class Minimal(App):
        def compose(self):
            yield Probe("hello")

    imported = time.time()
    async with Minimal().run_test(headless=True, size=SIZE) as pilot:
        await _until(pilot, lambda: "at" in painted)
    return {"imported": imported - spec["t0"], "first_paint": painted["at"] - spec["t0"],
            "peak_rss": peak_rss_bytes()}


async def dashboard(spec: dict) -> dict:
    from dayflow_tui.store import open_store
    from dayflow_tui.tui.app import DayflowApp
    from dayflow_tui.tui.widgets.run_table import RunTable

    t0 = spec["t0"]
    imported = time.time()
    painted: dict = {}
    original = RunTable.render_line

    def render_line(self, y):
        strip = original(self, y)
        painted.setdefault("first", time.time())
        painted["last"] = time.time()
        return strip

    RunTable.render_line = render_line
    out: dict = {"imported": imported - t0, "sys_modules_anthropic": None}
    store = open_store(spec["db"], create=False)
    app = DayflowApp(store)
    async with app.run_test(headless=True, size=SIZE) as pilot:
        await _until(pilot, lambda: "first" in painted)
        out["first_paint"] = painted["first"] - t0
        table = app.screen.query_one(RunTable)
        # Usable: a key moves the cursor and the moved row is drawn again.
        pressed = time.time()
        await pilot.press("down")
        await _until(pilot, lambda: table.cursor == 1 and painted["last"] > pressed)
        out["usable"] = painted["last"] - t0
        out["key_to_redraw"] = painted["last"] - pressed
        out["rows_total"] = table.total
        out["rows_loaded"] = len(table.rows)
        out["sys_modules_anthropic"] = "anthropic" in sys.modules
        if spec.get("open_run"):
            out.update(await _open_transcript(app, pilot, spec["open_run"]))
        if spec.get("live"):
            out.update(await _live(app, pilot, table, spec))
        out["peak_rss"] = peak_rss_bytes()
    store.close()
    return out


async def _open_transcript(app, pilot, run_id: str) -> dict:
    from textual.widgets import OptionList

    from dayflow_tui.tui.screens.transcript import TranscriptScreen
    from dayflow_tui.tui.widgets.step_detail import StepDetail

    started = time.time()
    app.open_transcript(run_id)
    await _until(pilot, lambda: isinstance(app.screen, TranscriptScreen) and app.screen.is_mounted
                 and app.screen.query_one("#steps", OptionList).option_count > 0)
    await pilot.pause()  # the frame after the step list is filled
    opened = time.time()
    screen = app.screen
    steps = screen.query_one("#steps", OptionList)
    count = steps.option_count
    jumped = time.time()
    await pilot.press("end")
    await _until(pilot, lambda: steps.highlighted == count - 1)
    await pilot.pause()
    landed = time.time()
    detail = screen.query_one(StepDetail)
    return {"transcript_open": opened - started, "transcript_last_step": landed - jumped,
            "transcript_entries": count, "detail_widgets": len(list(detail.query("*")))}


async def _live(app, pilot, table, spec: dict) -> dict:
    """Cross-process: steps committed by `dayflow brief` processes, seen in this dashboard's list."""
    dayflow = str(Path(sys.executable).parent / "dayflow")
    seen: dict[tuple[str, int], float] = {}
    ids: list[str] = []
    for _ in range(spec["live"]["briefs"]):
        proc = subprocess.Popen([dayflow, "brief", "--db", spec["db"], "--delay", str(spec["live"]["delay"])],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while True:
            done = proc.poll() is not None
            for run in table.rows[:5]:
                if run.id.startswith("bench-"):
                    continue
                if run.id not in ids:
                    ids.append(run.id)
                for n in range(1, run.step_count + 1):
                    seen.setdefault((run.id, n), time.time())
            if done:
                break
            await pilot.pause(0.002)
        if proc.returncode != 0:
            raise RuntimeError(f"dayflow brief failed: {proc.stderr.read().decode()[-300:]}")
        # The last commit of a brief can land after its process is reaped; let one more poll see it.
        await pilot.pause(1.2)
        for run in table.rows[:5]:
            for n in range(1, run.step_count + 1):
                seen.setdefault((run.id, n), time.time())
    latencies = []
    for run_id in ids:
        for step in app.store.steps(run_id):
            if (run_id, step.n) in seen:
                latencies.append(seen[(run_id, step.n)] - _epoch(step.created_at))
    return {"live_latencies": latencies, "live_runs": len(ids)}


def main() -> None:
    spec = json.loads(sys.argv[1])
    runner = minimal if spec.get("app") == "minimal" else dashboard
    result = asyncio.run(runner(spec))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
