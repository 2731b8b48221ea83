"""The database-derived gauges: read from the store when Prometheus scrapes, one query set per scrape.

A ``StoreGauges`` is a prometheus-client collector. At a scrape it asks the
store for ``fleet_stats()`` once (every gauge below comes from that one read,
shared by scrapes within ``CACHE_S``), on the scraping thread's own
connection, closed again after the read: the worker's threads never wait for
a scrape, and an idle scraper holds no server backend. A database that does
not answer within ``PATIENCE_S`` leaves the last numbers and sets
``dayflow_store_up`` to 0 rather than hang the scrape.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

from ..store import spool_files
from ..store.retry import patience

CACHE_S = 1.0
PATIENCE_S = 2.0


class StoreGauges:
    """A collector of the fleet's numbers as the database holds them (and this host's spool)."""

    def __init__(self, store: Any, *, cache_s: float = CACHE_S, patience_s: float = PATIENCE_S):
        self.store = store
        self.cache_s = cache_s
        self.patience_s = patience_s
        self.reads = 0  # database reads made (the tests count them: one per scrape, never one per metric)
        self._lock = threading.Lock()
        self._stats = None
        self._read_at = -1e9
        self._up = False
        self._took = 0.0

    def _read(self) -> None:
        with self._lock:
            if time.monotonic() - self._read_at < self.cache_s:
                return
            started = time.monotonic()
            try:
                with patience(self.patience_s):
                    self._stats = self.store.fleet_stats()
                self._up = True
            except Exception:  # noqa: BLE001 - a scrape reports the database as down, it never fails
                self._up = False
            finally:
                self.reads += 1
                self._took = time.monotonic() - started
                self._read_at = time.monotonic()
                self.store.close_thread_connection()  # each scrape is a new thread: no connection left behind

    def describe(self) -> list:
        return []  # the names are fixed below; an empty describe keeps registration from reading the database

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        self._read()
        stats = self._stats
        yield GaugeMetricFamily("dayflow_store_up", "1 when the last read of the fleet's numbers succeeded",
                                value=1 if self._up else 0)
        yield GaugeMetricFamily("dayflow_store_read_seconds", "How long the last read of the fleet's numbers took",
                                value=self._took)
        yield GaugeMetricFamily("dayflow_spool_files", "Paid replies waiting in this host's spool for a resume",
                                value=spool_files())
        if stats is None:
            return
        runs = GaugeMetricFamily("dayflow_runs", "Runs by stored status", labels=["status"])
        for status, count in sorted(stats.by_status.items()):
            runs.add_metric([status], count)
        yield runs
        yield GaugeMetricFamily("dayflow_queue_depth", "Queued runs a worker may take now", value=stats.queue_ready)
        yield GaugeMetricFamily("dayflow_queue_oldest_age_seconds",
                                "Age of the oldest queued run a worker may take now (0: none)",
                                value=stats.oldest_ready_age_s or 0.0)
        yield GaugeMetricFamily("dayflow_runs_backing_off", "Runs waiting out a back-off (failed attempt, 429/529)",
                                value=stats.queue_backing_off)
        yield GaugeMetricFamily("dayflow_runs_held", "Running runs held under a lease", value=stats.held)
        yield GaugeMetricFamily("dayflow_heartbeat_lag_seconds",
                                "Age of the stalest heartbeat among the runs held (0: none held); past 60 s the "
                                "run is taken over", value=stats.oldest_heartbeat_age_s or 0.0)


def text_exposition(store: Any) -> tuple[str, bool]:
    """The database-derived gauges once, in Prometheus' text format (``dayflow metrics``), and whether the
    database answered."""
    from prometheus_client import CollectorRegistry, generate_latest

    gauges = StoreGauges(store, cache_s=0.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(gauges)
    return generate_latest(registry).decode("utf-8"), gauges._up
