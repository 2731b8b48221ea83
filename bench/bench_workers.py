"""19. A fleet of 16 worker processes on a private PostgreSQL cluster: throughput, backends, claims, recovery.

On a cluster of its own (tests/private_pg.py: initdb/pg_ctl as the postgres user, fsync on,
shared_buffers 16 MB, default max_connections 100; stopped after), so a restart hurts nobody:

- Throughput: N queued runs of the offline model (3 steps each, ``DAYFLOW_OFFLINE_DELAY`` 0: all database
  and process work, no model wait) drained by 16 ``dayflow worker`` processes (one thread each, poll
  0.3 s); runs/s from the first committed step to the last run done. Peak backends: the workers'
  client backends in pg_stat_activity (application_name dayflow*), sampled every 0.1 s.
  Issue #29's old figure, for comparison: 7.6 runs/s and 45 backends.
- Claim latency: ``store.claim_next`` (in this process, one connection) timed over 200 claims with
  1,000 runs queued (the queue 1,000 down to 801).
- Recovery after a server restart: with the 16 workers draining a second batch, ``pg_ctl restart -m
  fast`` once a third of it is done; the time from the restart's start to the first step committed
  after it (polled every 20 ms), and the restart's own time.

Needs initdb/pg_ctl (skipped otherwise). The machine is shared: the figures move with its load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, median, ms, pct, scale  # noqa: E402

WORKERS = 16
OLD_RUNS_PER_S = 7.6
OLD_BACKENDS = 45
BIN = Path(sys.executable).parent


def _count(conn, sql: str) -> int:
    return conn.execute(sql).fetchone()[0]


class _Peak(threading.Thread):
    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        import psycopg

        conn = None
        while not self.stop.is_set():
            try:
                conn = conn or psycopg.connect(self.url, autocommit=True, connect_timeout=2,
                                               application_name="bench-probe")
                self.peak = max(self.peak, _count(conn, "SELECT count(*) FROM pg_stat_activity WHERE "
                                                  "backend_type = 'client backend' AND application_name LIKE 'dayflow%'"))
            except Exception:  # the server restarting
                conn = None
            self.stop.wait(0.1)


def _queue(url: str, count: int, prefix: str) -> None:
    from dayflow_tui.store import open_store

    store = open_store(url)
    try:
        for i in range(count):
            store.create_run("Prepare my day.", model="offline", run_id=f"{prefix}{i:06d}")
    finally:
        store.close()


def _wait(conn_factory, sql: str, target: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _count(conn_factory(), sql) >= target:
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {sql} >= {target}")


def run(quick: bool = False) -> list[Row]:
    from tests.private_pg import PrivatePostgres, missing_reason

    reason = missing_reason()
    if reason:
        return [Row("19 workers", "skipped", "", note=reason)]
    import psycopg

    runs = scale(150 if quick else 400, 32)
    queued_for_claims = scale(1000, 100)
    claims = scale(200, 20)
    load = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="dayflow-bench-workers-"))
    cluster = PrivatePostgres(root / "cluster")
    cluster.init()
    cluster.start()
    procs: list[subprocess.Popen] = []
    probe = _Peak(cluster.url)
    reader = {"conn": None}

    def conn():
        if reader["conn"] is None or reader["conn"].closed:
            reader["conn"] = psycopg.connect(cluster.url, autocommit=True, connect_timeout=2,
                                             application_name="bench-reader")
        return reader["conn"]

    def safe_count(sql: str) -> int | None:
        try:
            return _count(conn(), sql)
        except Exception:
            reader["conn"] = None
            return None

    rows: list[Row] = []
    try:
        # -- claim latency at 1,000 queued (no workers yet) -----------------------------------
        from dayflow_tui.store import open_store

        _queue(cluster.url, queued_for_claims, "claim")
        store = open_store(cluster.url)
        try:
            times = []
            for _ in range(claims):
                started = time.perf_counter()
                lease = store.claim_next()
                times.append(time.perf_counter() - started)
                assert lease is not None
        finally:
            store.close()
        cluster.sql("DELETE FROM runs WHERE id LIKE 'claim%'")

        # -- throughput and backends ----------------------------------------------------------
        _queue(cluster.url, runs, "fleet")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DAYFLOW_"))}
        env["DAYFLOW_OFFLINE_DELAY"] = "0"
        probe.start()
        spawned = time.monotonic()
        for _ in range(WORKERS):
            procs.append(subprocess.Popen([str(BIN / "dayflow"), "worker", "--poll", "0.3", "--db", cluster.url],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          stdin=subprocess.DEVNULL))
        _wait(conn, "SELECT count(*) FROM steps", 1, 120)
        first_step = time.monotonic()
        _wait(conn, "SELECT count(*) FROM runs WHERE status = 'done'", runs, 600)
        drained = time.monotonic()
        peak_fleet = probe.peak

        # -- recovery after a restart -----------------------------------------------------------
        _queue(cluster.url, runs, "again")
        _wait(conn, "SELECT count(*) FROM runs WHERE status = 'done'", runs + runs // 3, 600)
        restart_at = time.monotonic()
        cluster.restart()
        back_at = time.monotonic()
        reader["conn"] = None
        before = None
        while before is None:
            before = safe_count("SELECT count(*) FROM steps")
        while True:
            now = safe_count("SELECT count(*) FROM steps")
            if now is not None and now > before:
                committed_at = time.monotonic()
                break
            if time.monotonic() - restart_at > 120:
                raise RuntimeError("no step committed within 120 s of the restart")
            time.sleep(0.02)
        _wait(conn, "SELECT count(*) FROM runs WHERE status = 'done'", 2 * runs, 600)
        peak_all = probe.peak
        calls_ok = _count(conn(), "SELECT count(*) FROM steps") == 2 * runs * 3
    finally:
        probe.stop.set()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if reader["conn"] is not None:
            reader["conn"].close()
        cluster.stop("immediate")

    rate = runs / (drained - first_step)
    note_load = f"load avg {load:.1f} on {os.cpu_count()} cores at start"
    rows.append(Row("19 workers", f"runs/s, {WORKERS} worker processes, {runs} offline runs (3 steps, no model wait)",
                    f"{rate:.1f} runs/s", f"{OLD_RUNS_PER_S} runs/s (issue #29)", rate / OLD_RUNS_PER_S,
                    note=f"a rate: above 1 is more runs/s; from the first step; {runs / (drained - spawned):.1f} runs/s from spawning the "
                    f"processes; {note_load}"))
    rows.append(Row("19 workers", f"peak client backends of the {WORKERS} workers (pg_stat_activity)",
                    str(peak_fleet), f"{OLD_BACKENDS} (issue #29)", peak_fleet / OLD_BACKENDS,
                    note=f"{peak_fleet / WORKERS:.1f} per worker; {peak_all} over the restart phase too"))
    rows.append(Row("19 workers", f"claim_next, {queued_for_claims} runs queued, {claims} claims",
                    f"p50 {ms(median(times))}", "", note=f"p99 {ms(pct(times, 99))}"))
    rows.append(Row("19 workers", "server restart (pg_ctl restart -m fast) to the first step committed after",
                    ms(committed_at - restart_at), "",
                    note=f"the restart itself {ms(back_at - restart_at)}; {2 * runs} runs with 3 steps each after it: "
                    f"{calls_ok}"))
    return rows


def main() -> int:
    import argparse

    from bench.run_all import table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(table(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
