"""The PostgreSQL change feed through the fault proxy (tests/fault_proxy.py): a cut connection, and a network
that stops answering. While the feed is down it is not ``live`` (readers poll the change marker, which still
moves); it connects again with back-off and hears commits again. Counted: connects, drops, notices."""

from __future__ import annotations

import time

from dayflow_tui.store import open_store


def wait_until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_cut_feed_falls_back_to_the_marker_and_recovers(pg_url, pg_proxy):
    direct = open_store(pg_url)
    through = open_store(pg_proxy.url(pg_url))
    feed = through.change_feed().start()
    try:
        wait_until(lambda: feed.live)
        direct.create_run("before", model="offline")
        wait_until(lambda: feed.notices == 1)
        pg_proxy.outage(30)  # every connection reset, new ones refused
        wait_until(lambda: not feed.live)
        assert feed.drops == 1
        marker = direct.change_marker()
        direct.create_run("while it is down", model="offline")
        assert direct.change_marker() != marker  # what a reader polls meanwhile moved
        time.sleep(1.0)  # the feed tries again meanwhile (refused, backing off), never live
        assert not feed.live and feed.connects == 1
        pg_proxy.end_faults()
        wait_until(lambda: feed.live)
        assert feed.connects == 2 and feed.drops == 1
        heard = feed.notices
        direct.create_run("after", model="offline")
        wait_until(lambda: feed.notices == heard + 1)
    finally:
        feed.stop()
        through.close()
        direct.close()


def test_a_feed_into_a_blackhole_stops_being_live_and_recovers(pg_url, pg_proxy):
    direct = open_store(pg_url)
    through = open_store(pg_proxy.url(pg_url))
    feed = through.change_feed().start()
    try:
        wait_until(lambda: feed.live)
        pg_proxy.stall(60)  # nothing in either direction, and no reset: only the feed's own probe can tell
        wait_until(lambda: not feed.live)  # its probe (after 5 s of silence) not heard back within 3 s
        pg_proxy.end_faults()
        wait_until(lambda: feed.live)
        heard = feed.notices
        direct.create_run("after the blackhole", model="offline")
        wait_until(lambda: feed.notices == heard + 1)
    finally:
        feed.stop()
        through.close()
        direct.close()
