"""11. Model calls per committed step under chaos: the pools of ``tests/faults/test_chaos.py``, measured.

Each trial is a ``tests/chaos_pool.py`` pool of real ``dayflow worker``
processes draining queued offline runs (3 steps each) while the database
misbehaves and workers are SIGKILLed mid-run:

- PostgreSQL through the fault proxy, every connection cut every 1-2 s (one
  time in five the server away for 0.3-1 s), 30 runs, 4 workers, 3 kills;
- SQLite with another process holding the write lock for longer than the
  busy timeout, again and again, 16 runs, 3 workers, 2 kills.

The figure is calls / committed steps, calls counted outside the processes
(``DAYFLOW_CALL_LOG``); the bound, from the same trial, is 1 + kills / steps
(only a killed process may lose its one call in flight). Seeds are printed.
The PostgreSQL trial needs a server (``bench_postgres.server_url``); without
one it shows as skipped.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from urllib.parse import urlsplit

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, scale, workdir  # noqa: E402


def _row(report, what: str) -> Row:
    met = report.calls <= report.steps + report.kills and not report.problems
    faults = ", ".join(f"{n} {kind}" for kind, n in sorted(report.faults.items()))
    note = (f"seed {report.seed}; {report.calls} calls / {report.steps} steps, {report.kills} kills, {faults}; "
            f"{len(report.worker_exits)} worker exit(s) restarted; {report.seconds:.0f} s")
    if report.problems:
        note += f"; PROBLEMS: {'; '.join(report.problems)[:300]}"
    return Row("11 chaos", f"model calls per committed step, {what}", f"{report.calls_per_step:.3f}",
               f"1 + kills/steps = {report.bound:.3f}", report.calls_per_step / report.bound,
               "<= 1 + kills/steps", met, note)


def postgres_trial(seed: int, quick: bool) -> Row:
    from bench.bench_postgres import pg_schema, server_url
    from tests.chaos_pool import ChaosPool, ProxyCuts
    from tests.fault_proxy import FaultProxy

    server = urlsplit(server_url())
    with pg_schema() as url, workdir("chaos-pg") as tmp, \
            FaultProxy((server.hostname or "127.0.0.1", server.port or 5432)) as proxy:
        pool = ChaosPool(backend="postgres", worker_db=proxy.url(url), check_db=url, workdir=tmp,
                         disturber=ProxyCuts(proxy, random.Random(seed)), seed=seed,
                         runs=scale(12 if quick else 30, 3), workers=scale(4, 2), kills=scale(3, 1))
        report = pool.run()
    return _row(report, "4 workers on PostgreSQL, connections cut every 1-2 s, 3 SIGKILLs")


def sqlite_trial(seed: int, quick: bool) -> Row:
    from tests.chaos_pool import ChaosPool, LockHolder, sqlite_busy_timeout_s

    with workdir("chaos-sqlite") as tmp:
        db = tmp / "dayflow.db"
        holder = LockHolder(db, sqlite_busy_timeout_s(db) + 1.5, random.Random(seed))
        pool = ChaosPool(backend="sqlite", worker_db=str(db), check_db=str(db), workdir=tmp, disturber=holder,
                         seed=seed, runs=scale(8 if quick else 16, 3), workers=scale(3, 2), kills=scale(2, 1))
        report = pool.run()
    return _row(report, f"3 workers on SQLite, write lock held {holder.hold_s:g} s at a time, 2 SIGKILLs")


def run(quick: bool = False) -> list[Row]:
    seed = random.randrange(1_000_000)
    print(f"[11] chaos seed {seed}", file=sys.stderr, flush=True)
    missing = _postgres_missing()
    rows = [Row("11 chaos", "PostgreSQL trial", "skipped", note=missing) if missing
            else postgres_trial(seed, quick)]
    rows.append(sqlite_trial(seed, quick))
    return rows


def _postgres_missing() -> str | None:
    """Why the PostgreSQL trial cannot run here (no driver, no server), or None."""
    from bench.bench_postgres import server_url

    try:
        import psycopg
    except ImportError:
        return "needs psycopg (the postgres extra)"
    try:
        psycopg.connect(server_url(), connect_timeout=5).close()
    except psycopg.Error as exc:
        return f"no server: {str(exc).strip().splitlines()[0]}"[:200]
    return None


if __name__ == "__main__":
    from bench.run_all import table

    print(table(run(quick="--quick" in sys.argv)))
