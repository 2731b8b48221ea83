"""7. PostgreSQL: worker throughput with 1, 2 and 4 workers, and the per-step commit next to SQLite's.

- Runs completed per second: N queued runs on the offline model with no
  delay, driven by 1, 2 and 4 ``dayflow worker`` processes that are already
  up and idle (their start-up is not counted). The clock starts when the
  queue commits and stops when the last run is ``done``. The same workload
  on SQLite is the baseline column (same worker count, same run).
- Per-step commit: ``store.append_step`` (the step row plus the run's totals
  in one transaction, lease-checked) on PostgreSQL and on SQLite, in
  alternating blocks, plus the dashboard's ``change_marker`` read.

The server is ``$DAYFLOW_BENCH_PG_URL``, else ``$DAYFLOW_TEST_PG_URL``, else
postgresql://postgres@127.0.0.1:5432/test; the benchmark works in a schema
of its own and drops it. ``python -m bench.bench_postgres`` prints the table.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, Row, scale, agent_step, median, ms, pct, quiet_env, step_record, workdir  # noqa: E402

WORKER_COUNTS = scale((1, 2, 4), (1, 2))
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def server_url() -> str:
    return os.environ.get("DAYFLOW_BENCH_PG_URL") or os.environ.get("DAYFLOW_TEST_PG_URL") or DEFAULT_URL


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    """A fresh schema on the server; yields a URL whose search_path is that schema."""
    import psycopg

    base = server_url()
    name = f"dayflow_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True, connect_timeout=10) as admin:
        admin.execute(f'CREATE SCHEMA "{name}"')
        try:
            sep = "&" if "?" in base else "?"
            yield f"{base}{sep}options={quote(f'-csearch_path={name}', safe='')}"
        finally:
            admin.execute(f'DROP SCHEMA "{name}" CASCADE')


@contextlib.contextmanager
def target(backend: str) -> Iterator[str]:
    if backend == "postgres":
        with pg_schema() as url:
            yield url
    else:
        with workdir("pg-sqlite") as tmp:
            yield str(tmp / "bench.db")


# -- 1. runs per second -----------------------------------------------------------


def runs_per_second(db: str, workers: int, n_runs: int, delay: float = 0.0) -> float:
    """Throughput of ``workers`` warm worker processes draining ``n_runs`` queued runs.

    ``delay``: seconds per model call (the offline model's ``DAYFLOW_OFFLINE_DELAY``), standing in
    for API latency.
    """
    from dayflow_tui.store.models import Run
    from dayflow_tui.store import open_store

    store = open_store(db)
    env = quiet_env(DAYFLOW_OFFLINE_DELAY=str(delay))
    procs = [subprocess.Popen([str(BIN / "dayflow"), "worker", "--poll", "0.02", "--db", db], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(workers)]
    try:
        for proc in procs:  # each announces itself once its imports are done and the store is open
            line = proc.stderr.readline()
            if not line.startswith("[worker pid"):
                raise RuntimeError(f"worker did not start: {line}{proc.stderr.read()[-400:]}")
        with store.db.atomic():  # the whole queue appears at once
            for _ in range(n_runs):
                store.create_run("Prepare my day.", model="offline", status="queued")
        started = time.perf_counter()
        deadline = started + 600
        while Run.select().where(Run.status == "done").count() < n_runs:
            if time.perf_counter() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("workers stopped before the queue was drained")
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stderr.close()
        store.close()
    return n_runs / elapsed


# -- 2. per-step commit -------------------------------------------------------------


def commit_timings(rounds: int, block: int = 25) -> dict[str, list[float]]:
    """``append_step`` and ``change_marker`` durations on both backends, alternating in blocks.

    The models are bound to one database at a time (``database_proxy``), so
    the backends take turns a block of steps at a time rather than step by step.
    """
    from dayflow_tui.store.models import database_proxy
    from dayflow_tui.store import open_store

    timings: dict[str, list[float]] = {"postgres": [], "sqlite": [], "marker postgres": [], "marker sqlite": []}
    with target("postgres") as pg_url, target("sqlite") as sqlite_path:
        stores = {"postgres": open_store(pg_url), "sqlite": open_store(sqlite_path)}
        leased = {}
        for name, store in stores.items():
            database_proxy.initialize(store.db)
            run, lease = store.create_claimed_run("bench", model="offline", max_steps=10**6)
            leased[name] = (run.id, lease)
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
                    store.change_marker()
                    ended = time.perf_counter()
                    if r > 0:  # the first round warms up
                        timings[name].append(middle - started)
                        timings[f"marker {name}"].append(ended - middle)
        for name, store in stores.items():
            database_proxy.initialize(store.db)
            store.release(leased[name][1])
            store.close()
    return timings


def server_settings() -> str:
    import psycopg

    with psycopg.connect(server_url(), connect_timeout=10) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
        fsync = conn.execute("SHOW fsync").fetchone()[0]
    return f"PostgreSQL {version}, synchronous_commit={sync}, fsync={fsync}"


def run(quick: bool = False) -> list[Row]:
    try:
        import psycopg

        psycopg.connect(server_url(), connect_timeout=5).close()
    except Exception as exc:  # no driver or no server: say so in the table, do not fail the rest
        return [Row("7 PostgreSQL", "skipped", "", note=f"no server at {server_url()}: {type(exc).__name__}")]
    settings = server_settings()
    n_runs = scale(40 if quick else 150, 4)
    rows: list[Row] = []
    rates: dict[tuple[str, int], float] = {}
    for workers in WORKER_COUNTS:
        for backend in ("postgres", "sqlite"):
            with target(backend) as db:
                rates[backend, workers] = runs_per_second(db, workers, n_runs)
        pg, lite = rates["postgres", workers], rates["sqlite", workers]
        rows.append(Row("7 PostgreSQL", f"runs completed per second, {workers} worker process(es), "
                        f"{n_runs} queued runs, offline model, no delay",
                        f"{pg:.1f} runs/s", f"SQLite {lite:.1f} runs/s", pg / lite,
                        note=f"x{pg / rates['postgres', 1]:.2f} of 1 worker" if workers > 1 else settings))
    # With API-like latency the work is waiting, not CPU: this is where more workers pay off.
    delay, n_slow = 0.1, scale(24 if quick else 60, 4)
    slow = {}
    for workers in (1, WORKER_COUNTS[-1]):
        with target("postgres") as db:
            slow[workers] = runs_per_second(db, workers, n_slow, delay=delay)
    rows.append(Row("7 PostgreSQL", f"runs completed per second with {delay * 1000:.0f} ms per model call, "
                    f"{WORKER_COUNTS[-1]} worker processes, {n_slow} queued runs", f"{slow[WORKER_COUNTS[-1]]:.2f} runs/s",
                    f"1 worker {slow[1]:.2f} runs/s", slow[WORKER_COUNTS[-1]] / slow[1]))
    timings = commit_timings(rounds=scale(100 if quick else 400, 30))
    pg, lite = timings["postgres"], timings["sqlite"]
    rows.append(Row("7 PostgreSQL", "append_step, median (step row + run totals + change counter, 1 tx)",
                    ms(median(pg)), f"SQLite {ms(median(lite))}", median(pg) / median(lite),
                    note=f"p99 {ms(pct(pg, 99))} vs {ms(pct(lite, 99))}"))
    mpg, mlite = timings["marker postgres"], timings["marker sqlite"]
    rows.append(Row("7 PostgreSQL", "change_marker (the dashboard's poll), median", ms(median(mpg)),
                    f"SQLite {ms(median(mlite))}", median(mpg) / median(mlite)))
    return rows


def main() -> int:
    import argparse

    from bench.run_all import table

    parser = argparse.ArgumentParser(prog="python -m bench.bench_postgres", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs and steps: a smoke run")
    args = parser.parse_args()
    os.environ.pop("ANTHROPIC_API_KEY", None)
    os.environ["DAYFLOW_OFFLINE_DELAY"] = "0"
    print(table(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
