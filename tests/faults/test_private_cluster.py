"""Workers survive faults of the PostgreSQL server itself (issue #29's trials), on a private cluster.

Each test starts its own cluster (tests/private_pg.py: initdb/pg_ctl on a free port under the test's tmp
dir; the shared server is never touched), queues 12 runs of the offline model (3 steps each, a small
delay per call so the fault lands mid-work) and starts 4 real ``dayflow worker`` processes (one thread
each) through the chaos pool (tests/chaos_pool.py). Once a third of the calls are made the fault is
injected, once:

- ``pg_ctl restart -m fast``;
- a crash: ``pg_ctl stop -m immediate`` then start (crash recovery);
- kill -9 of the postmaster, then start;
- ``max_connections = 8`` set before the workers start (``superuser_reserved_connections = 2`` keeps two
  for the test's own reader and probe, 6 for the workers' role: 2 of the 4 workers fit, the others wait),
  then a fast restart mid-way; and ``max_connections = 5`` lowered mid-work (a trial that once broke the
  calls bound: see its comment);
- a blackhole through the fault proxy (tests/fault_proxy.py): every byte on every connection held for
  6 s, new connections too.

What must hold, checked by the pool and here:

- every run ends ``done`` with steps 1..3, each committed once (no run driven by two workers at once:
  the steps table's (run, n) and the crash harness's invariants), every follow-up task once;
- model calls (counted outside the workers, ``DAYFLOW_CALL_LOG``) == committed steps: no worker dies
  here, so the bound ``calls <= steps + deaths`` has no slack;
- no worker lost: none exits by itself (the pool would restart it and list it), each one exits 0 on
  SIGTERM at the end; a worker that cannot connect waits and tries again;
- server backends bounded: the workers' client backends (their own role; sampled every 0.2 s from
  pg_stat_activity) never exceed ``BACKENDS_PER_WORKER`` per worker process.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ..chaos_pool import STEPS_PER_RUN, ChaosPool
from ..fault_proxy import FaultProxy
from ..private_pg import PrivatePostgres

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

RUNS = 12
WORKERS = 4
WORKER_ROLE = "dayflow_worker"
# The bound on the workers' backends, measured (a one-thread worker on an idle private cluster, sampled
# from pg_stat_activity): 3 per worker process: the main thread's (start-up and the schema-version
# checks between claims), the run thread's (claims and commits) and the heartbeat thread's. Issue #29
# asks for 2 (claims/commits plus heartbeats); that is not done yet. What this guards is that a fault
# adds none: a connection found broken is closed before a new one is opened (agent/worker.py), so
# stalled or dead sessions must not pile up on the server while workers open new ones.
BACKENDS_PER_WORKER = 3


class BackendProbe:
    """Samples the workers' client backends on the server every 0.2 s (a connection of the superuser's own,
    reopened when the server goes away); ``peak`` is the most seen at once, ``by_name`` at that moment."""

    def __init__(self, cluster: PrivatePostgres):
        self.cluster = cluster
        self.peak = 0
        self.by_name: dict[str, int] = {}
        self.samples = 0
        self.fault_done = False  # set once the fault has been injected: ``peak_after`` counts from then
        self.peak_after = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        import psycopg

        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(self.cluster.url, autocommit=True, connect_timeout=2,
                                           application_name="dayflow-test-probe")
                rows = conn.execute("SELECT coalesce(application_name, '') FROM pg_stat_activity "
                                    "WHERE backend_type = 'client backend' AND usename = %s",
                                    (WORKER_ROLE,)).fetchall()
                self.samples += 1
                if self.fault_done:
                    self.peak_after = max(self.peak_after, len(rows))
                if len(rows) > self.peak:
                    self.peak = len(rows)
                    self.by_name = dict(Counter(name for (name,) in rows))
            except Exception:  # the server is away (the fault): try again at the next tick
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(0.2)
        if conn is not None:
            conn.close()


class ServerFault:
    """The pool's disturber: once ``after_calls`` model calls are logged, ``inject()`` runs, once."""

    def __init__(self, call_log: Path, after_calls: int, inject, name: str, probe: BackendProbe):
        self.probe = probe
        self.call_log = call_log
        self.after_calls = after_calls
        self.inject = inject
        self.name = name
        self.counts: dict[str, int] = {}
        self.calls_at_fault: int | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _calls(self) -> int:
        return len(self.call_log.read_text().splitlines()) if self.call_log.exists() else 0

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._calls() >= self.after_calls:
                self.calls_at_fault = self._calls()
                try:
                    self.inject()
                    self.counts[self.name] = 1
                    self.probe.fault_done = True
                except BaseException as exc:  # reported by the test, not lost in a thread
                    self.error = exc
                return
            self._stop.wait(0.05)


class ServerFaultPool(ChaosPool):
    """The chaos pool with the server itself at fault: its reader reconnects when the server went away, and
    the runs are queued as the workers' role (so the tables are theirs)."""

    def __init__(self, *, queue_db: str, **kwargs):
        super().__init__(**kwargs)
        self.queue_db = queue_db

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        deadline = time.monotonic() + 30
        while True:
            try:
                return super()._query(sql, params)
            except Exception:
                if self._reader is not None:
                    self._reader.close()
                self._reader = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def queue_runs(self) -> None:
        from dayflow_tui.store import open_store

        store = open_store(self.queue_db)
        try:
            for i in range(self.plan["runs"]):
                store.create_run("Prepare my day.", model="offline", run_id=f"trial{i:07d}")
        finally:
            store.close()


def _worker_url(cluster: PrivatePostgres) -> str:
    return f"postgresql://{WORKER_ROLE}@127.0.0.1:{cluster.port}/dayflow"


def _prepare(cluster: PrivatePostgres) -> tuple[str, str]:
    """The workers' own role (not a superuser: it gets no reserved slot) owning a database; returns the
    workers' URL and the superuser's URL to the same database (for the checks)."""
    cluster.sql(f'CREATE ROLE "{WORKER_ROLE}" LOGIN', f'CREATE DATABASE dayflow OWNER "{WORKER_ROLE}"')
    return _worker_url(cluster), f"postgresql://postgres@127.0.0.1:{cluster.port}/dayflow"


def _trial(cluster: PrivatePostgres, tmp_path: Path, name: str, inject, *, worker_db: str | None = None,
           before=None) -> tuple:
    worker_url, check_url = _prepare(cluster)
    if before is not None:
        before()
    workdir = tmp_path / "pool"
    workdir.mkdir()
    total_calls = RUNS * STEPS_PER_RUN
    probe = BackendProbe(cluster)
    fault = ServerFault(workdir / "calls.log", total_calls // 3, inject, name, probe)
    seed = random.randrange(1_000_000)
    pool = ServerFaultPool(backend="postgres", worker_db=worker_db or worker_url, check_db=check_url,
                           queue_db=worker_url, workdir=workdir, disturber=fault, seed=seed, runs=RUNS,
                           workers=WORKERS, kills=0, offline_delay=0.4, deadline_s=120)
    probe.start()
    try:
        report = pool.run()
    finally:
        probe.stop()
    print(report.as_json())
    print(f"fault {name} at {fault.calls_at_fault} calls; workers' backends peak {probe.peak} {probe.by_name}, "
          f"{probe.peak_after} after the fault, over {probe.samples} samples")
    return report, fault, probe, pool


def _assert_survived(report, fault, probe, pool) -> None:
    assert fault.error is None, f"the fault could not be injected: {fault.error!r}"
    assert fault.counts.get(fault.name) == 1, "the fault never happened (the runs ended before a third of calls?)"
    assert fault.calls_at_fault < RUNS * STEPS_PER_RUN, "the fault landed after the work, not mid-way"
    assert report.problems == [], report.problems  # every run done, steps 1..3 once, tasks once, calls bound
    assert report.done == RUNS
    assert report.calls == report.steps == RUNS * STEPS_PER_RUN  # no worker died: no call may be lost
    assert report.worker_exits == [], f"workers lost (ended by themselves): {report.worker_exits}"
    assert report.workers_started == WORKERS
    assert 0 < probe.peak <= BACKENDS_PER_WORKER * WORKERS, (probe.peak, probe.by_name)
    # No run driven by two workers at once: each run finished by exactly one worker process.
    finished = Counter()
    for index in range(WORKERS):
        err = (pool.workdir / f"worker{index}.err").read_text(errors="replace")
        out = (pool.workdir / f"worker{index}.out").read_text(errors="replace")
        for line in (err + out).splitlines():
            for i in range(RUNS):
                if f"trial{i:07d}" in line and "done" in line:
                    finished[f"trial{i:07d}"] += 1
    assert sorted(finished) == [f"trial{i:07d}" for i in range(RUNS)], finished  # each reported by a worker
    assert all(n == 1 for n in finished.values()), finished


def test_a_fast_restart_mid_work(private_pg, tmp_path):
    _assert_survived(*_trial(private_pg, tmp_path, "restart", private_pg.restart))


def test_a_crash_immediate_stop_then_start_mid_work(private_pg, tmp_path):
    _assert_survived(*_trial(private_pg, tmp_path, "crash", private_pg.crash))


def test_the_postmaster_killed_with_sigkill_mid_work(private_pg, tmp_path):
    _assert_survived(*_trial(private_pg, tmp_path, "kill -9 postmaster", private_pg.kill_postmaster))


def _waited_at_start(pool) -> int:
    return sum("cannot reach the database" in (pool.workdir / f"worker{i}.err").read_text(errors="replace")
               for i in range(WORKERS))


def test_max_connections_low_with_more_workers_than_fit_at_start(private_pg, tmp_path):
    # max_connections = 8 with 2 reserved for superusers (the test's reader and probe): the workers' role
    # gets 6 slots, set before the workers start. A worker holds 3 (see BACKENDS_PER_WORKER), so 2 of the
    # 4 fit; the others wait at start-up, saying so, and never exit (where 5 of 8 used to exit 2 for
    # good). The fault mid-way is a fast restart with the low setting still in force. (At 5, 3 slots for
    # the role, the pool made no progress in 120 s: see the report on issue #29; not asserted here.)
    report, fault, probe, pool = _trial(private_pg, tmp_path, "restart at max_connections=8", private_pg.restart,
                                        before=lambda: private_pg.set_max_connections(8, superuser_reserved=2))
    _assert_survived(report, fault, probe, pool)
    assert probe.peak <= 6, (probe.peak, probe.by_name)
    assert _waited_at_start(pool) >= 1, "no worker had to wait for a slot: the trial did not starve the server"


@pytest.mark.slow
# issue #29's finding, mended: one worker takes all 3 of the role's slots and the others, each holding a paid
# reply, can neither commit it nor beat. Their commits stop retrying once their leases are in doubt and the
# replies go to this host's spool, which the worker taking each run over stores before any call (it used to
# keep retrying past STALE_AFTER_S: 39 calls for 36 steps, 0 deaths).
def test_max_connections_five_lowered_mid_work(private_pg, tmp_path):
    # Lowered mid-work (the restart ends every session), so the workers meet it reconnecting mid-run.
    report, fault, probe, pool = _trial(private_pg, tmp_path, "max_connections=5",
                                        lambda: private_pg.set_max_connections(5, superuser_reserved=2))
    _assert_survived(report, fault, probe, pool)
    assert probe.peak_after <= 3, (probe.peak_after, probe.by_name)


def test_a_blackhole_through_the_fault_proxy(private_pg, tmp_path):
    with FaultProxy(("127.0.0.1", private_pg.port)) as proxy:
        report, fault, probe, pool = _trial(private_pg, tmp_path, "blackhole 6 s", lambda: proxy.stall(6.0),
                                            worker_db=proxy.url(_worker_url(private_pg)))
    _assert_survived(report, fault, probe, pool)
