"""`dayflow workers` and the dashboard's workers screen (issue #29): a real worker process registers, beats
with the runs it holds, and reads as stopped after SIGTERM; the screen lists it and opens a run it holds."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui.app import DayflowApp

from ..conftest import dayflow_cmd
from ..reliability_helpers import cli_env
from ..tui_helpers import SIZE, wait_for


def workers(db) -> list[dict]:
    out = subprocess.run(dayflow_cmd("workers", "--json", "--db", str(db)), env=cli_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_worker_shows_alive_with_the_runs_it_holds_then_stopped(tmp_path):
    db = tmp_path / "dayflow.db"
    ids = [subprocess.run(dayflow_cmd("brief", "--queue", "--db", str(db)), env=cli_env(), capture_output=True,
                          text=True, timeout=60).stdout.strip() for _ in range(2)]
    assert workers(db) == []
    proc = subprocess.Popen(dayflow_cmd("worker", "--concurrency", "2", "--db", str(db)),
                            env=cli_env(DAYFLOW_OFFLINE_DELAY="3"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        seen: list[dict] = []
        while time.monotonic() < deadline:
            seen = workers(db)
            if seen and sorted(seen[0]["runs"]) == sorted(ids):
                break
            time.sleep(0.3)
        (row,) = seen
        assert (row["state"], row["pid"], row["concurrency"], sorted(row["runs"])) == ("alive", proc.pid, 2,
                                                                                       sorted(ids))
        plain = subprocess.run(dayflow_cmd("workers", "--db", str(db)), env=cli_env(), capture_output=True,
                               text=True, timeout=60).stdout
        assert f"pid {proc.pid}" in plain and "alive" in plain and "runs 2/2" in plain
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    (row,) = workers(db)
    assert row["state"] == "stopped" and row["runs"] == []


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_the_workers_screen_lists_them_and_opens_a_held_run(store):
    from dayflow_tui.tui.screens.transcript import TranscriptScreen

    run = store.create_run("held by a worker", model="offline", run_id="held00000001")
    worker = store.register_worker(host="host-\x1b[31m-red", pid=777, version="0.1.0", concurrency=4)
    store.worker_beat(worker, [run.id], 3)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("w")
        await wait_for(pilot, lambda: getattr(app.screen, "loaded", False))
        shown = str(app.screen.query_one("#worker-list").get_option_at_index(0).prompt)
        assert "pid 777" in shown and "held00000001" in shown and "1/4" in shown
        assert "\x1b" not in shown and "\\x1b" in shown  # a host name from the database, shown as text
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TranscriptScreen))
        assert app.screen.run_id == "held00000001"
