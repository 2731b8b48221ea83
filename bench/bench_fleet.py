"""17. PostgreSQL fleet: what the ``schema`` setting costs per step, and how fast LISTEN/NOTIFY tells a reader.

- The schema setting: ``store.append_step`` (one write transaction) and ``store.get_run`` (a lone read) on two
  stores of one server, one choosing its schema with the ``schema`` setting (``SET LOCAL search_path`` in the
  BEGIN's round trip; a lone statement gets a transaction of its own) and one with the URL's
  ``options=-csearch_path`` (the session's, which PgBouncer drops), in interleaved blocks of 25, the order
  swapped every round. The same through a real PgBouncer in transaction pooling when the binary is there.
- The change feed: ``append_step`` commits in one store while ``store.change_feed`` listens on its own
  connection; the latency is from the commit's start to the feed's callback, over N commits, next to the
  dashboard's poll interval (0.5 s: a commit waits 0 to 0.5 s for the next poll, 0.25 s on average).

The server is ``$DAYFLOW_BENCH_PG_URL``, else ``$DAYFLOW_TEST_PG_URL``, else
postgresql://postgres@127.0.0.1:5432/test; schemas of its own, dropped after.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, agent_step, median, ms, pct, scale, step_record  # noqa: E402
from bench.bench_postgres import server_url  # noqa: E402

POLL_EVERY_S = 0.5  # the dashboard's and show --follow's poll of the change marker (tui/screens, views.transcript)


@contextlib.contextmanager
def schemas(count: int) -> Iterator[list[str]]:
    import psycopg

    names = [f"dayflow_bench_{uuid.uuid4().hex[:10]}" for _ in range(count)]
    with psycopg.connect(server_url(), autocommit=True, connect_timeout=10) as admin:
        for name in names:
            admin.execute(f'CREATE SCHEMA "{name}"')
        try:
            yield names
        finally:
            for name in names:
                admin.execute(f'DROP SCHEMA "{name}" CASCADE')


def _open(url: str, schema: str | None):
    """A store whose dialect read ``schema`` as its setting (the dialect reads it when made)."""
    from dayflow_tui.store import open_store

    if schema:
        os.environ["DAYFLOW_SCHEMA"] = schema
    try:
        return open_store(url)
    finally:
        os.environ.pop("DAYFLOW_SCHEMA", None)


def _with_options(url: str, schema: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}', safe='')}"


def schema_cost(stores: dict, rounds: int, block: int = 25) -> dict[str, list[float]]:
    """append_step and get_run durations per store, in interleaved blocks (the first round warms up)."""
    from dayflow_tui.store.models import database_proxy

    timings: dict[str, list[float]] = {}
    leased = {}
    for name, store in stores.items():
        database_proxy.initialize(store.db)
        run, lease = store.create_claimed_run("bench", model="offline", max_steps=10**6)
        leased[name] = (run.id, lease)
        timings[f"step {name}"], timings[f"read {name}"] = [], []
    n = {name: 0 for name in stores}
    for r in range(rounds // block + 1):
        order = list(stores) if r % 2 == 0 else list(reversed(stores))
        for name in order:
            store = stores[name]
            database_proxy.initialize(store.db)
            run_id, lease = leased[name]
            for _ in range(block):
                n[name] += 1
                step = step_record(n[name], agent_step(n[name])[0])
                started = time.perf_counter()
                store.append_step(run_id, step, lease=lease)
                middle = time.perf_counter()
                store.get_run(run_id)
                ended = time.perf_counter()
                if r > 0:
                    timings[f"step {name}"].append(middle - started)
                    timings[f"read {name}"].append(ended - middle)
    for name, store in stores.items():
        database_proxy.initialize(store.db)
        store.release(leased[name][1])
    return timings


def notify_latency(url: str, commits: int) -> tuple[list[float], list[float]]:
    """(latency from a commit's start to the feed's callback, the commit's own duration) per commit."""
    from dayflow_tui.store import open_store
    from dayflow_tui.store.models import database_proxy

    store = open_store(url)
    database_proxy.initialize(store.db)
    heard: list[float] = []
    arrived = threading.Event()

    def on_change() -> None:
        heard.append(time.perf_counter())
        arrived.set()

    feed = store.change_feed(on_change=on_change).start()
    try:
        deadline = time.monotonic() + 30
        while not feed.live:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the change feed did not connect: {getattr(feed, 'last_error', None)}")
            time.sleep(0.01)
        run, lease = store.create_claimed_run("bench", model="offline", max_steps=10**6)
        time.sleep(0.2)
        latencies, commit_times = [], []
        for n in range(1, commits + 1):
            arrived.clear()
            before = len(heard)
            step = step_record(n, agent_step(n)[0])
            started = time.perf_counter()
            store.append_step(run.id, step, lease=lease)
            committed = time.perf_counter()
            if not arrived.wait(10):
                raise RuntimeError("a commit was not heard within 10 s")
            latencies.append(heard[before] - started)
            commit_times.append(committed - started)
            time.sleep(0.01)
        store.release(lease)
        return latencies, commit_times
    finally:
        feed.stop()
        store.close()


def run(quick: bool = False) -> list[Row]:
    try:
        import psycopg

        psycopg.connect(server_url(), connect_timeout=5).close()
    except Exception as exc:
        return [Row("17 fleet", "skipped", "", note=f"no server at {server_url()}: {type(exc).__name__}")]
    rows: list[Row] = []
    rounds = scale(200 if quick else 500, 25)
    with schemas(2) as (setting, options):
        base = server_url()
        stores = {"setting": _open(base, setting), "options": _open(_with_options(base, options), None)}
        try:
            t = schema_cost(stores, rounds)
        finally:
            for store in stores.values():
                store.close()
    rows.append(Row("17 fleet", "append_step, median: schema setting (SET LOCAL in BEGIN) vs the URL's options",
                    ms(median(t["step setting"])), f"options {ms(median(t['step options']))}",
                    median(t["step setting"]) / median(t["step options"]),
                    note=f"p99 {ms(pct(t['step setting'], 99))} vs {ms(pct(t['step options'], 99))}"))
    rows.append(Row("17 fleet", "get_run (a lone read), median: schema setting (BEGIN; SET LOCAL; read; COMMIT) "
                    "vs the URL's options", ms(median(t["read setting"])), f"options {ms(median(t['read options']))}",
                    median(t["read setting"]) / median(t["read options"]),
                    note=f"p99 {ms(pct(t['read setting'], 99))} vs {ms(pct(t['read options'], 99))}"))
    rows += _through_pgbouncer(rounds)
    commits = scale(100, 10)
    with schemas(1) as (name,):
        latencies, commit_times = notify_latency(_with_options(server_url(), name), commits)
    rows.append(Row("17 fleet", f"NOTIFY to the listener's callback, from the commit's start, {commits} commits",
                    f"p50 {ms(median(latencies))}", f"poll every {POLL_EVERY_S * 1000:.0f} ms",
                    median(latencies) / (POLL_EVERY_S / 2),
                    note=f"p99 {ms(pct(latencies, 99))}; the commit itself p50 {ms(median(commit_times))}; a poll "
                    f"finds a commit {POLL_EVERY_S * 500:.0f} ms later on average, up to {POLL_EVERY_S * 1000:.0f}"))
    return rows


def _through_pgbouncer(rounds: int) -> list[Row]:
    """The schema setting through a real PgBouncer (transaction pooling) vs the same store straight to the server."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.pgbouncer import PgBouncer, pgbouncer_binary

    if pgbouncer_binary() is None:
        return [Row("17 fleet", "through PgBouncer: skipped", "", note="no pgbouncer binary (apt-get install pgbouncer)")]
    with PgBouncer(server_url(), pool_size=2) as bouncer, schemas(2) as (pooled, direct):
        stores = {"pgbouncer": _open(bouncer.url, pooled), "direct": _open(server_url(), direct)}
        try:
            t = schema_cost(stores, rounds)
        finally:
            for store in stores.values():
                store.close()
    return [Row("17 fleet", "append_step, median, schema setting: through PgBouncer (transaction pooling) vs direct",
                ms(median(t["step pgbouncer"])), f"direct {ms(median(t['step direct']))}",
                median(t["step pgbouncer"]) / median(t["step direct"]),
                note=f"p99 {ms(pct(t['step pgbouncer'], 99))} vs {ms(pct(t['step direct'], 99))}")]


def main() -> int:
    import argparse

    from bench.run_all import table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(table(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
