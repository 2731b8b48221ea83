"""A chaos pool: real ``dayflow worker`` processes drain queued runs while the database misbehaves
and workers are SIGKILLed, then everything that must survive is checked.

Used by ``tests/faults/test_chaos.py`` and by the benchmark of calls per committed
step (``bench/bench_chaos.py``). One ``ChaosPool`` is one trial:

1. ``runs`` runs are queued directly (offline model, 3 steps each);
2. ``workers`` processes of the real console script (``dayflow worker``, one
   thread each, so a killed process had at most one call in flight) start on
   the database the way a user would reach it: PostgreSQL through the fault
   proxy, or the SQLite file itself;
3. a *disturber* misbehaves for as long as runs are left: ``ProxyCuts`` cuts
   every connection every 1-2 s and now and then takes the server away for a
   moment (cut plus refused connects); ``LockHolder`` has another process
   hold SQLite's write lock (``BEGIN EXCLUSIVE``) for longer than the busy
   timeout, again and again;
4. ``kills`` times, a worker caught driving a run that has committed a step
   is SIGKILLed and a fresh worker takes its place;
5. a worker that ends by itself is started again, as a supervisor
   (systemd's ``Restart=on-failure``) would, and listed in the report: one
   clear line and a non-zero exit is how a worker may give up (say, a
   database it cannot open at start), a traceback is a problem;
6. once every run is done (or the deadline passes), the workers are stopped
   with SIGTERM and the database is read with its own driver (not Dayflow's).

What must hold (``ChaosReport.problems`` lists each breach): every run done
with steps 1..3 and totals equal to the sums of its steps (the crash
harness's ``check_invariants``), every follow-up task exactly once, and
``steps <= model calls <= steps + kills``: calls are counted outside the
processes (the offline model's ``DAYFLOW_CALL_LOG``), and only a killed
process may lose the one call it had in flight. Seeded (``seed``); the seed
is in the report.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path

from .crash_harness import DbState, check_invariants, expected_task_keys, read_db
from .fault_proxy import FaultProxy

BIN = Path(sys.executable).parent
STEPS_PER_RUN = 3  # the offline model: read, create tasks, write the brief
# What a worker reports on stderr besides finished runs: "dayflow worker: [run ID ]KIND: message".
_WORKER_EVENT = re.compile(r"^dayflow worker: (?:run \S+ )?(\w+): ")


@dataclass
class ChaosReport:
    backend: str
    seed: int
    runs: int = 0
    done: int = 0
    steps: int = 0
    calls: int = 0
    kills: int = 0
    workers_started: int = 0
    faults: dict[str, int] = field(default_factory=dict)  # what the disturber did, by kind
    worker_events: dict[str, int] = field(default_factory=dict)  # "error", "lost", "failed" lines of the workers
    worker_exits: list[str] = field(default_factory=list)  # workers that ended by themselves (restarted)
    longest_wait_s: float = 0.0  # the longest stretch, from the first call on, with runs left and none finishing
    stuck: list[str] = field(default_factory=list)  # the unfinished runs, seen 10 s into such a stretch
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def calls_per_step(self) -> float:
        return self.calls / self.steps if self.steps else float("nan")

    @property
    def bound(self) -> float:
        """The most calls per step the invariant allows: 1 + kills / steps."""
        return 1 + self.kills / self.steps if self.steps else float("nan")

    def as_json(self) -> str:
        return json.dumps({**asdict(self), "calls_per_step": self.calls_per_step, "bound": self.bound}, indent=2)


# -- disturbers -----------------------------------------------------------------------------------


class ProxyCuts:
    """Every connection through ``proxy`` cut every 1-2 s; one time in five the server is away for
    0.3-1 s instead (cut, and new connections refused meanwhile)."""

    name = "connections cut every 1-2 s through the fault proxy (1 in 5: an outage of 0.3-1 s)"

    def __init__(self, proxy: FaultProxy, rng: random.Random):
        self.proxy = proxy
        self.rng = rng
        self.counts: Counter = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-cuts", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.rng.uniform(1.0, 2.0)):
            if self.rng.random() < 0.2:
                self.counts["outages"] += 1
                self.counts["connections cut"] += self.proxy.outage(self.rng.uniform(0.3, 1.0))
            else:
                self.counts["cuts"] += 1
                self.counts["connections cut"] += self.proxy.cut_all()


class LockHolder:
    """Another process takes SQLite's write lock (``BEGIN EXCLUSIVE``) and keeps it ``hold_s`` seconds
    (longer than the busy timeout), then lets go for 1-2 s, again and again."""

    def __init__(self, path: Path, hold_s: float, rng: random.Random):
        self.path = path
        self.hold_s = hold_s
        self.rng = rng
        self.name = f"SQLite write lock held {hold_s:g} s at a time by another process, 1-2 s apart"
        self.counts: Counter = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-lock", daemon=True)
        self._holder: subprocess.Popen | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.hold_s + 30)

    def _run(self) -> None:
        code = textwrap.dedent(f"""
            import sqlite3, sys
            con = sqlite3.connect({str(self.path)!r}, isolation_level=None, timeout=60)
            con.execute("BEGIN EXCLUSIVE")
            print("locked", flush=True)
            sys.stdin.read()  # held until the parent closes our stdin
            con.execute("ROLLBACK")
        """)
        while not self._stop.is_set():
            holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            if holder.stdout.readline().strip() == "locked":
                self.counts["holds"] += 1
                self._stop.wait(self.hold_s)
            holder.stdin.close()
            holder.wait(timeout=60)
            self._stop.wait(self.rng.uniform(1.0, 2.0))


# -- the pool -------------------------------------------------------------------------------------


class ChaosPool:
    """One trial; see the module's docstring. ``worker_db`` is what the workers open (the proxy's URL on
    PostgreSQL), ``check_db`` the same database reached directly."""

    def __init__(self, *, backend: str, worker_db: str, check_db: str, workdir: Path, disturber,
                 seed: int, runs: int, workers: int, kills: int, offline_delay: float = 0.3,
                 deadline_s: float = 300.0, worker_env: dict[str, str] | None = None):
        self.backend = backend
        self.worker_db = worker_db
        self.check_db = check_db
        self.workdir = workdir
        self.disturber = disturber
        self.rng = random.Random(seed)
        self.plan = dict(runs=runs, workers=workers, kills=kills)
        self.offline_delay = offline_delay
        self.worker_env = dict(worker_env or {})  # settings for the workers (DAYFLOW_SQLITE_BUSY_TIMEOUT, say)
        self.deadline_s = deadline_s
        self.call_log = workdir / "calls.log"
        self.report = ChaosReport(backend, seed, runs=runs)
        self.procs: list[subprocess.Popen] = []
        self.killed: set[int] = set()
        self.exited: set[int] = set()  # ended by themselves and restarted, as a supervisor would
        self._reader = None

    # -- processes --------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANTHROPIC_", "DAYFLOW_")) and k != "PYTEST_CURRENT_TEST"}
        env.update(DAYFLOW_OFFLINE_DELAY=str(self.offline_delay), DAYFLOW_CALL_LOG=str(self.call_log))
        env.update(self.worker_env)
        return env

    def _start_worker(self) -> subprocess.Popen:
        index = len(self.procs)
        with open(self.workdir / f"worker{index}.out", "wb") as out, \
                open(self.workdir / f"worker{index}.err", "wb") as err:
            proc = subprocess.Popen([str(BIN / "dayflow"), "worker", "--poll", "0.3", "--db", self.worker_db],
                                    env=self._env(), stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        self.report.workers_started += 1
        return proc

    # -- the database, read directly ----------------------------------------

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """One read on a connection of the test's own (psycopg, or sqlite3 read-only), kept open."""
        if self._reader is None:
            if self.backend == "postgres":
                import psycopg

                self._reader = psycopg.connect(self.check_db, autocommit=True, connect_timeout=10)
            else:
                self._reader = sqlite3.connect(f"file:{self.check_db}?mode=ro", uri=True, timeout=30)
        if self.backend == "postgres":
            sql = sql.replace("?", "%s")
        return self._reader.execute(sql, params).fetchall()

    def _done(self) -> int:
        return self._query("SELECT count(*) FROM runs WHERE status = 'done'")[0][0]

    def _victim(self) -> subprocess.Popen | None:
        """A live worker driving a run that has committed at least one step (so the kill lands mid-run)."""
        alive = {p.pid: p for p in self.procs if p.poll() is None and p.pid not in self.killed}
        if not alive:
            return None
        owners = [row[0] for row in self._query(
            "SELECT owner_pid FROM runs WHERE status = 'running' AND step_count >= 1 AND owner_pid IS NOT NULL")]
        found = [alive[pid] for pid in owners if pid in alive]
        return self.rng.choice(found) if found else None

    # -- the trial ----------------------------------------------------------

    def queue_runs(self) -> None:
        from dayflow_tui.store import open_store

        store = open_store(self.check_db)
        try:
            for i in range(self.plan["runs"]):
                store.create_run("Prepare my day.", model="offline", run_id=f"chaos{i:07d}")
        finally:
            store.close()

    def run(self) -> ChaosReport:
        started = time.monotonic()
        self.queue_runs()
        for _ in range(self.plan["workers"]):
            self._start_worker()
        self.disturber.start()
        deadline = started + self.deadline_s
        last_kill = time.monotonic()
        done, progress_at = 0, time.monotonic()
        try:
            while time.monotonic() < deadline:
                now_done = self._done()
                if now_done == self.plan["runs"]:
                    break
                if now_done > done or not self.call_log.exists():  # start-up is not waiting
                    done, progress_at = now_done, time.monotonic()
                self._note_waiting(time.monotonic() - progress_at)
                self._restart_exited()
                if len(self.killed) < self.plan["kills"] and time.monotonic() - last_kill > 2.0:
                    victim = self._victim()
                    if victim is not None:
                        victim.send_signal(signal.SIGKILL)
                        victim.wait(timeout=30)
                        self.killed.add(victim.pid)
                        last_kill = time.monotonic()
                        self._start_worker()
                time.sleep(0.1)
        finally:
            self.disturber.stop()
            self._stop_workers()
            if self._reader is not None:
                self._reader.close()
        self._note_waiting(time.monotonic() - progress_at if done < self.plan["runs"] else 0.0)
        self.report.seconds = round(time.monotonic() - started, 1)
        self.report.kills = len(self.killed)
        self.report.faults = dict(self.disturber.counts)
        self._check()
        return self.report

    def _note_waiting(self, waited: float) -> None:
        """Keep the longest wait for a run to finish, and what the unfinished runs looked like 10 s into it."""
        self.report.longest_wait_s = round(max(self.report.longest_wait_s, waited), 1)
        if waited > 10 and not self.report.stuck:
            rows = self._query("SELECT id, status, step_count, owner_pid, heartbeat_at FROM runs "
                               "WHERE status <> 'done' ORDER BY id")
            alive = {p.pid for p in self.procs if p.poll() is None}
            self.report.stuck = [f"{rid} {status} steps={n} owner={pid}{' (alive)' if pid in alive else ''} "
                                 f"beat={beat}" for rid, status, n, pid, beat in rows]

    def _restart_exited(self) -> None:
        """A worker that ended by itself is started again (as systemd's Restart=on-failure would) and
        recorded; one that ended with a traceback or an internal error is a problem."""
        for index, proc in enumerate(self.procs):
            if proc.poll() is None or proc.pid in self.killed or proc.pid in self.exited:
                continue
            self.exited.add(proc.pid)
            err = (self.workdir / f"worker{index}.err").read_text(errors="replace")
            last = err.strip().splitlines()[-1] if err.strip() else ""
            self.report.worker_exits.append(f"exit {proc.returncode}: {last[:300]}")
            if "Traceback" in err or "internal error" in err:
                self.report.problems.append(f"worker {index} crashed (exit {proc.returncode}): {err[-400:]}")
            self._start_worker()

    def _stop_workers(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for index, proc in enumerate(self.procs):
            try:
                code = proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.report.problems.append(f"worker {index} (pid {proc.pid}) did not stop on SIGTERM")
                continue
            if proc.pid in self.killed or proc.pid in self.exited:
                continue
            err = (self.workdir / f"worker{index}.err").read_text(errors="replace")
            if code != 0 or "Traceback" in err or "internal error" in err:
                self.report.problems.append(f"worker {index} exited {code}: {err[-400:]}")
            for line in err.splitlines():
                event = _WORKER_EVENT.match(line)
                if event:
                    self.report.worker_events[event[1]] = self.report.worker_events.get(event[1], 0) + 1

    def _check(self) -> None:
        report = self.report
        state = read_db(self.check_db)
        expected = expected_task_keys(date.today())
        report.done = sum(1 for r in state.runs if r["status"] == "done")
        report.steps = len(state.steps)
        report.calls = len(self.call_log.read_text().splitlines()) if self.call_log.exists() else 0
        if len(state.runs) != self.plan["runs"]:
            report.problems.append(f"{len(state.runs)} runs in the database, {self.plan['runs']} queued")
        for run in state.runs:
            if run["status"] != "done":
                report.problems.append(f"run {run['id']} ended {run['status']} ({run['error']})")
            mine = [s for s in state.steps if s["run_id"] == run["id"]]
            found = check_invariants(DbState([run], mine, state.tasks), run["id"], expected)
            if [s["n"] for s in mine] != list(range(1, STEPS_PER_RUN + 1)):
                found.append(f"steps {[s['n'] for s in mine]}, not 1..{STEPS_PER_RUN}")
            report.problems += [f"run {run['id']}: {p}" for p in found]
        keys = Counter(t["idempotency_key"] for t in state.tasks if not t["idempotency_key"].startswith("seed-"))
        if set(keys) != expected or any(n != 1 for n in keys.values()):
            report.problems.append(f"follow-up tasks {dict(keys)}; expected each of {sorted(expected)} once")
        if not report.steps <= report.calls <= report.steps + report.kills:
            report.problems.append(f"{report.calls} model calls for {report.steps} committed steps "
                                   f"with {report.kills} kill(s): allowed {report.steps}..{report.steps + report.kills}")


def sqlite_busy_timeout_s(path: Path) -> float:
    """The busy timeout Dayflow's own connections use (read from a store, not assumed)."""
    from dayflow_tui.store import open_store

    store = open_store(path)
    try:
        return store.db.execute_sql("PRAGMA busy_timeout").fetchone()[0] / 1000
    finally:
        store.close()
