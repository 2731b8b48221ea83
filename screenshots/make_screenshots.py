"""Regenerate the README's screenshots by driving the real dashboard with Pilot.

    .venv/bin/python screenshots/make_screenshots.py

Builds a demo database with the real loop on the offline model (one run per
status, a run with hostile content), then saves SVGs of the run list, a
transcript, its JSON view, the tasks screen, a search, a resume in progress and the run list
on an 80x24 terminal into this folder.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from dayflow_tui.agent.offline import OfflineClient  # noqa: E402
from dayflow_tui.store import open_store  # noqa: E402
from dayflow_tui.tui import demo_data  # noqa: E402
from dayflow_tui.tui.app import DayflowApp  # noqa: E402
from dayflow_tui.tui.pilot_support import wait_until  # noqa: E402
from dayflow_tui.tui.screens.transcript import TranscriptScreen  # noqa: E402
from dayflow_tui.tui.widgets.run_table import RunTable  # noqa: E402

SIZE = (120, 34)


async def until(pilot, condition, timeout: float = 60.0) -> None:
    try:
        await wait_until(pilot, condition, timeout=timeout)
    except TimeoutError:
        raise SystemExit("the dashboard did not get there in time") from None


async def open_run(pilot, run_id: str) -> TranscriptScreen:
    pilot.app.screen.query_one(RunTable).select_run(run_id)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, TranscriptScreen) and pilot.app.screen.views)
    await pilot.pause(0.3)
    return pilot.app.screen


def save(app, name: str) -> None:
    app.save_screenshot(filename=name, path=str(HERE))
    print(f"wrote screenshots/{name}")


async def main() -> None:
    os.environ["DAYFLOW_OFFLINE_DELAY"] = "0"
    with tempfile.TemporaryDirectory(prefix="dayflow-shots-") as tmp:
        store = open_store(Path(tmp) / "dayflow.db")
        lease = demo_data.every_status(store)
        demo_data.hostile_run(store, "run-hostile-1", demo_data.BASE_TIME + timedelta(minutes=5))
        demo_data.done_run(store, "3bd67bee3b7f", demo_data.BASE_TIME + timedelta(minutes=55))
        os.environ["DAYFLOW_FAKE_NOW"] = demo_data.SCREEN_TIME
        # Slow enough that the resumed steps visibly arrive one by one.
        app = DayflowApp(store, client_factory=lambda model: OfflineClient(delay=1.5))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.5)
            save(app, "run-list.svg")

            await pilot.press("slash", *"priya")
            await until(pilot, lambda: "hits in" in str(app.screen.query_one("#search-status").content))
            await pilot.pause(0.3)
            save(app, "search.svg")
            await pilot.press("escape")
            await pilot.pause(0.2)

            await open_run(pilot, "3bd67bee3b7f")
            await pilot.press("j")
            await pilot.pause(0.3)
            save(app, "transcript.svg")
            await pilot.press("v", "right_square_bracket", "enter")
            await pilot.pause(0.3)
            save(app, "json-view.svg")
            await pilot.press("v", "escape")
            await pilot.pause(0.2)

            await pilot.press("t")
            await until(pilot, lambda: getattr(app.screen, "loaded", False))
            await pilot.pause(0.3)
            save(app, "tasks.svg")
            await pilot.press("escape")
            await pilot.pause(0.2)

            screen = await open_run(pilot, "run-crash-001")
            await pilot.press("r")
            await until(pilot, lambda: len(screen.views) == 2 and screen.steps[-1][1])
            await pilot.pause(0.3)
            save(app, "resume.svg")
            await until(pilot, lambda: not app.is_driving)
            await pilot.press("q")
        # The same database on an 80x24 terminal: the task or error of the highlighted run below the list.
        app = DayflowApp(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.5)
            app.screen.query_one(RunTable).select_run("run-failed-01")
            await pilot.pause(0.3)
            save(app, "run-list-80x24.svg")
            await pilot.press("q")
        store.release(lease)
        store.close()


if __name__ == "__main__":
    asyncio.run(main())
