"""The dashboard on PostgreSQL: another process's commit reaches the run list by the database's push (LISTEN/
NOTIFY; the poll timer is made hourly while the feed is live, so nothing else could bring it), and with the
feed's connection cut (the fault proxy) the list falls back to polling the change marker, then the feed
reconnects."""

from __future__ import annotations

import os
import subprocess

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import app as app_module
from dayflow_tui.tui.app import DayflowApp

from ..conftest import dayflow_cmd
from ..tui_helpers import SIZE, select_loaded, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def queue_run(db: str) -> str:
    done = subprocess.run(dayflow_cmd("brief", "--queue", "--db", db), capture_output=True, text=True,
                          env=os.environ, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_another_process_commit_arrives_by_push_and_by_polling_while_the_feed_is_cut(pg_url, pg_proxy,
                                                                                          monkeypatch):
    monkeypatch.setattr(app_module, "LIVE_SAFETY_POLL_S", 3600.0)
    store = open_store(pg_url)
    proxied = open_store(pg_proxy.url(pg_url))  # the feed's connection goes through the proxy; reads do not
    app = DayflowApp(store)
    app.change_feed = proxied.change_feed(on_change=app._changes_pushed)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.change_feed.live and app.screen._polled_at > 0)
            pushed = queue_run(pg_url)
            await select_loaded(pilot, pushed)
            assert app.change_feed.notices >= 1
            pg_proxy.outage(60)
            await wait_for(pilot, lambda: not app.change_feed.live)
            polled = queue_run(pg_url)
            await select_loaded(pilot, polled)  # the 0.5 s marker poll, back while the feed is down
            pg_proxy.end_faults()
            await wait_for(pilot, lambda: app.change_feed.live and app.change_feed.connects == 2)
            again = queue_run(pg_url)
            await select_loaded(pilot, again)
    finally:
        proxied.close()
        store.close()
