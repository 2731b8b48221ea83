"""Kill real ``dayflow`` processes at seeded random moments, resume, and check what survived.

One *trial* is one run: ``dayflow brief`` is SIGKILLed at a random moment,
sometimes the ``dayflow resume`` that follows is killed too, then a last
``resume`` must finish the same run. Between processes the database is read
(read-only, with plain sqlite3: an independent reader) and checked.

Where a kill lands is read from the ``DAYFLOW_TEST_TRACE`` file the process
appends its phases to (``dayflow_tui/testhook.py``); ``DAYFLOW_TEST_PAUSE_IN``
widens the commit and tool windows so kills land there too.

Calls are counted outside the processes and attributed to each one: the
offline model's ``DAYFLOW_CALL_LOG`` lines carry the pid, and for the real
SDK each process sends a header of its own (``ANTHROPIC_CUSTOM_HEADERS``)
that the loopback server records. The SDK trials share one loopback server
(a lane each: its own URL, delay and record of requests). A process's *lost calls* are the calls it
made minus the steps it committed, counted once the trial is over (a killed
client's last request can reach the server just after the process died);
a killed process may lose at most the one call in flight, a process that ran
to its end none.

Seeded: ``random.Random(f"{seed}:{index}")`` picks every delay, pause and
kill moment of trial ``index``, so a seed replays the same schedule (where
a kill lands can still shift a little with machine load).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from dayflow_tui.agent import sample_data
from dayflow_tui.agent.offline import asks_for_action

from .conftest import dayflow_cmd
from .loopback_api import Lane, LoopbackAPI

STUB_MODEL = "claude-loopback-1"  # any non-offline name: the real SDK is used

PHASE_NAMES = {
    "api": "waiting on the API",
    "tools": "running tools",
    "commit": "committing",
    "committed": "just after a commit",
    "startup": "starting up (before any phase)",
}
PROCESS_TIMEOUT_S = 120.0


def expected_task_keys(today: date) -> set[str]:
    """The follow-up tasks a finished run must have created: one per mail asking for something."""
    return {f"mail-{m['id']}" for m in sample_data.inbox(today) if asks_for_action(m)}


@dataclass
class Kill:
    process: str  # "brief" or "resume"
    phase: str  # a PHASE_NAMES key
    lost_calls: int


@dataclass
class ProcessRecord:
    """One ``dayflow`` process of a trial: how many steps were committed before and after it, where it was killed."""

    name: str  # "brief", "resume" or "final resume"
    tag: str  # sent as a header to the loopback server, so its requests are counted as its own
    steps_before: int
    pid: int = 0
    steps_after: int = 0
    phase: str | None = None  # where the kill landed; None: it ended by itself
    exit_code: int | None = None


@dataclass
class TrialResult:
    index: int
    backend: str
    run_id: str | None = None
    kills: list[Kill] = field(default_factory=list)
    calls: int = 0
    steps: int = 0
    processes: int = 0
    misses: int = 0  # planned kills that found the process already finished
    problems: list[str] = field(default_factory=list)

    @property
    def lost_calls(self) -> int:
        return sum(k.lost_calls for k in self.kills)


@dataclass
class DbState:
    runs: list[dict]
    steps: list[dict]
    tasks: list[dict]


def read_db(path: Path | str) -> DbState:
    """Everything in the database, read through a separate read-only connection.

    ``path`` is a SQLite file or a ``postgresql://`` URL (read with psycopg, not Dayflow's store).
    """
    if str(path).startswith("postgresql://"):
        return _read_postgres(str(path))
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        runs = [dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY created_at")]
        steps = [dict(r) for r in conn.execute("SELECT * FROM steps ORDER BY run_id, n")]
        tasks = [dict(r) for r in conn.execute("SELECT * FROM tasks ORDER BY id")]
    finally:
        conn.close()
    return DbState(runs, steps, tasks)


def _read_postgres(url: str) -> DbState:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, row_factory=dict_row, connect_timeout=10) as conn:
        conn.read_only = True
        runs = conn.execute("SELECT * FROM runs ORDER BY created_at, id").fetchall()
        steps = conn.execute("SELECT * FROM steps ORDER BY run_id, n").fetchall()
        tasks = conn.execute("SELECT * FROM tasks ORDER BY id").fetchall()
    return DbState(runs, steps, tasks)


def check_invariants(state: DbState, run_id: str, expected_keys: set[str]) -> list[str]:
    """What must hold after any kill: no gap, totals add up, every answered tool_use has one result."""
    problems = []
    runs = [r for r in state.runs if r["id"] == run_id]
    if len(state.runs) != 1 or not runs:
        return [f"expected exactly run {run_id}, found {[r['id'] for r in state.runs]}"]
    run = runs[0]
    steps = [s for s in state.steps if s["run_id"] == run_id]
    numbers = [s["n"] for s in steps]
    if numbers != list(range(1, len(steps) + 1)):
        problems.append(f"step numbers {numbers} are not 1..{len(steps)}")
    for column, step_column in (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
                                ("cache_creation_tokens", "cache_creation_input_tokens"),
                                ("cache_read_tokens", "cache_read_input_tokens")):
        total = sum(s[step_column] for s in steps)
        if run[column] != total:
            problems.append(f"run {column}={run[column]} but its steps sum to {total}")
    if run["step_count"] != len(steps):
        problems.append(f"run step_count={run['step_count']} but {len(steps)} step rows")
    for i, step in enumerate(steps):
        uses = [b for b in json.loads(step["assistant"]) if b.get("type") == "tool_use"]
        if uses and step["tool_results"] is None and i != len(steps) - 1:
            problems.append(f"step {step['n']} has tool_use but no results and is not the last step")
        if step["tool_results"] is not None:
            answered = [r["tool_use_id"] for r in json.loads(step["tool_results"])]
            if sorted(answered) != sorted(u["id"] for u in uses):
                problems.append(f"step {step['n']}: results {answered} do not match its tool_use ids")
    agent_tasks = [t for t in state.tasks if not t["idempotency_key"].startswith("seed-")]
    keys = [t["idempotency_key"] for t in agent_tasks]
    if len(keys) != len(set(keys)) or len({t["title"] for t in agent_tasks}) != len(agent_tasks):
        problems.append(f"duplicated task: {sorted(keys)}")
    if not set(keys) <= expected_keys:
        problems.append(f"unexpected tasks {sorted(set(keys) - expected_keys)}")
    return problems


class Trial:
    """One run, killed and resumed until done. ``backend`` is ``offline`` or ``sdk`` (real SDK, loopback stub)."""

    def __init__(self, index: int, seed: int, backend: str, workdir: Path, *, resume_kill_chance: float = 0.25,
                 server: LoopbackAPI | None = None):
        self.index = index
        self.backend = backend
        self.rng = random.Random(f"{seed}:{index}")
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.db = workdir / "dayflow.db"
        self.call_log = workdir / "calls.log"
        self.trace = workdir / "trace.log"
        self.result = TrialResult(index, backend)
        self.resume_kill_chance = resume_kill_chance
        # The seeded schedule: model latency, commit and per-tool pauses.
        self.delay = round(self.rng.uniform(0.08, 0.2), 3)
        self.commit_pause = round(self.rng.uniform(0.04, 0.12), 3)
        self.tools_pause = round(self.rng.uniform(0.02, 0.05), 3)
        self.server = server  # shared by the trials of a module; None: the SDK trial starts its own
        self.stub: Lane | None = None
        self.records: list[ProcessRecord] = []
        self.committed_assistant: dict[int, str] = {}

    # -- processes -------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANTHROPIC_", "DAYFLOW_")) and k != "PYTEST_CURRENT_TEST"}
        env.update(DAYFLOW_DB=str(self.db), DAYFLOW_TEST_TRACE=str(self.trace),
                   DAYFLOW_TEST_PAUSE_IN=f"commit:{self.commit_pause},tools:{self.tools_pause}")
        if self.backend == "offline":
            env.update(DAYFLOW_OFFLINE_DELAY=str(self.delay), DAYFLOW_CALL_LOG=str(self.call_log))
        else:
            env.update(self.stub.env())
        return env

    def calls_by_process(self) -> Counter:
        """Model calls per process tag, counted outside the processes: the call log's pids, the server's headers."""
        if self.backend == "sdk":
            return Counter(h.get("x-dayflow-process") for h in self.stub.headers)
        tags = {str(r.pid): r.tag for r in self.records}
        lines = self.call_log.read_text().splitlines() if self.call_log.exists() else []
        return Counter(tags.get(line.split()[0]) for line in lines)

    def trace_lines(self) -> list[str]:
        return self.trace.read_text().split() if self.trace.exists() else []

    def start(self, name: str, *args: str) -> tuple[subprocess.Popen, ProcessRecord]:
        record = ProcessRecord(name, f"p{len(self.records) + 1}",
                               self.step_count(read_db(self.db)) if self.db.exists() else 0)
        self.records.append(record)
        self.result.processes += 1
        env = self.env()
        if self.backend == "sdk":
            env["ANTHROPIC_CUSTOM_HEADERS"] = f"x-dayflow-process: {record.tag}"
        with open(self.workdir / f"{record.tag}.out", "wb") as out, open(self.workdir / f"{record.tag}.err", "wb") as err:
            proc = subprocess.Popen(dayflow_cmd(*args), env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        record.pid = proc.pid
        return proc, record

    def output(self, record: ProcessRecord, stream: str) -> str:
        return (self.workdir / f"{record.tag}.{stream}").read_text(errors="replace")

    def wait_for(self, proc: subprocess.Popen, ready, timeout: float = PROCESS_TIMEOUT_S) -> bool:
        """Poll until ``ready()``; False when the process ended first."""
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                return ready()
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"trial {self.index}: process never got ready")
            time.sleep(0.005)
        return True

    def kill_after(self, proc: subprocess.Popen, record: ProcessRecord, seconds: float, trace_before: int) -> None:
        time.sleep(seconds)
        if proc.poll() is not None:
            self.result.misses += 1
        else:
            trace = self.trace_lines()
            proc.send_signal(signal.SIGKILL)
            record.phase = trace[-1] if len(trace) > trace_before else "startup"
        self.ended(proc, record)

    def ended(self, proc: subprocess.Popen, record: ProcessRecord) -> None:
        record.exit_code = proc.wait(timeout=PROCESS_TIMEOUT_S)
        record.steps_after = self.step_count(self.inspect())

    def settle(self) -> None:
        """Per process, once every request has reached the server: lost calls = its calls - the steps it committed.

        Counted at the end, not at each kill: a killed client's last request can
        reach the server a moment after the process is gone.
        """
        calls = self.calls_by_process()
        for record in self.records:
            lost = calls.get(record.tag, 0) - (record.steps_after - record.steps_before)
            if record.phase is None:
                if lost != 0:
                    self.result.problems.append(f"{record.name} ({record.tag}) ended by itself "
                                                f"(exit {record.exit_code}) but lost {lost} call(s)")
                continue
            self.result.kills.append(Kill(record.name, record.phase, lost))
            if not 0 <= lost <= 1:
                self.result.problems.append(f"{record.name} killed {PHASE_NAMES[record.phase]}: lost {lost} calls "
                                            "(at most 1 allowed)")
            elif record.phase not in ("api", "commit") and lost != 0:
                self.result.problems.append(f"{record.name} killed {PHASE_NAMES[record.phase]} lost {lost} call(s); "
                                            "only a call in flight or a response being committed may be lost")

    # -- database --------------------------------------------------------

    def step_count(self, state: DbState) -> int:
        return sum(1 for s in state.steps if s["run_id"] == self.result.run_id)

    def inspect(self) -> DbState:
        state = read_db(self.db)
        if self.result.run_id is None and state.runs:
            self.result.run_id = state.runs[0]["id"]
        if self.result.run_id is not None:
            self.result.problems += check_invariants(state, self.result.run_id, expected_task_keys(date.today()))
        for step in state.steps:
            before = self.committed_assistant.setdefault(step["n"], step["assistant"])
            if before != step["assistant"]:
                self.result.problems.append(f"committed step {step['n']} was rewritten")
        return state

    def run_status(self) -> str | None:
        state = read_db(self.db)
        return next((r["status"] for r in state.runs if r["id"] == self.result.run_id), None)

    # -- the trial -------------------------------------------------------

    # The offline model's run: step 1 calls 4 read tools, step 2 creates 6 tasks, step 3 writes the brief.
    TOOLS_PER_STEP = {1: 4, 2: 6, 3: 0}

    def remaining_work(self, state: DbState | None) -> dict[str, int]:
        """How many times each phase is still to come in this run (from what is committed)."""
        steps = [s for s in (state.steps if state else []) if s["run_id"] == self.result.run_id]
        pending = 0
        if steps and steps[-1]["tool_results"] is None:
            pending = sum(1 for b in json.loads(steps[-1]["assistant"]) if b.get("type") == "tool_use")
        calls = 3 - len(steps)
        future_tools = sum(self.TOOLS_PER_STEP[n] for n in range(len(steps) + 1, 4))
        return {"api": calls, "commit": 2 * calls - 1 + (1 if pending else 0), "tools": pending + future_tools}

    def min_remaining_s(self, work: dict[str, int]) -> float:
        """A lower bound on how long the rest of the run takes: its sleeps alone."""
        return work["api"] * self.delay + work["commit"] * self.commit_pause + work["tools"] * self.tools_pause

    # The brief's kill of trial i aims at AIMS[i % 4], so a few trials already hit every phase; later kills
    # (a resume's) aim at random.
    AIMS = ("api", "tools", "commit", "anywhere")

    def plan_kill(self, work: dict[str, int], aim: str | None = None) -> tuple[str, int, float]:
        """(phase to aim at, which occurrence of it, seconds into it); phase "anywhere" means from the first marker.

        ``aim``: the phase wanted, when it is still to come (else one is drawn)."""
        windows = {"api": self.delay, "commit": self.commit_pause, "tools": self.tools_pause}
        targets = [p for p in windows if work[p] > 0 and windows[p] > 0] + ["anywhere"]
        target = aim if aim in targets else self.rng.choice(targets)
        if target == "anywhere":
            return target, 1, self.rng.uniform(0, 0.95 * self.min_remaining_s(work))
        return target, self.rng.randint(1, work[target]), self.rng.uniform(0, 0.9 * windows[target])

    def aim_and_kill(self, proc: subprocess.Popen, record: ProcessRecord, state: DbState | None,
                     trace_before: int, aim: str | None = None) -> None:
        target, nth, seconds = self.plan_kill(self.remaining_work(state), aim)

        def reached() -> bool:
            new = self.trace_lines()[trace_before:]
            return len(new) >= 1 if target == "anywhere" else new.count(target) >= nth

        if not self.wait_for(proc, reached):
            self.result.misses += 1
            self.ended(proc, record)
            return
        self.kill_after(proc, record, seconds, trace_before)

    def model_args(self) -> list[str]:
        return ["--model", STUB_MODEL] if self.backend == "sdk" else []

    def run(self) -> TrialResult:
        if self.backend == "sdk" and self.server is None:
            with LoopbackAPI() as self.server:
                return self.run()
        if self.backend == "sdk":
            self.stub = self.server.lane(f"trial{self.index}", delay=self.delay)
        self._run()
        return self.result

    def _run(self) -> None:
        # 1. brief, killed at a seeded moment once it is working (a phase it aims at, or anywhere).
        proc, record = self.start("brief", "brief", "-v", *self.model_args())
        self.aim_and_kill(proc, record, None, 0, aim=self.AIMS[self.index % len(self.AIMS)])
        if self.result.run_id is None:
            self.result.problems.append(f"the brief left no run: {self.output(record, 'err')[-300:]}")
            return
        # 2. sometimes a resume, killed too: either from its very start (import, claim, pending
        #    tools) or at a seeded moment once it is working.
        if self.run_status() != "done" and self.rng.random() < self.resume_kill_chance:
            state, trace_before = read_db(self.db), len(self.trace_lines())
            proc, record = self.start("resume", "resume", self.result.run_id)
            if self.rng.random() < 0.4:
                self.kill_after(proc, record, self.rng.uniform(0, 2.5), trace_before)
            else:
                self.aim_and_kill(proc, record, state, trace_before)
        # 3. the last resume must finish the same run and pay only for what is missing.
        proc, record = self.start("final resume", "resume", self.result.run_id)
        try:
            proc.wait(timeout=PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.result.problems.append("the final resume hung")
        self.ended(proc, record)
        if record.exit_code != 0:
            self.result.problems.append(f"final resume exit {record.exit_code}: {self.output(record, 'err')[-300:]}")
        if "## Today" not in self.output(record, "out"):
            self.result.problems.append("the final resume printed no brief")
        self.settle()
        state = self.inspect()
        run = next(r for r in state.runs if r["id"] == self.result.run_id)
        keys = {t["idempotency_key"] for t in state.tasks if t["run_id"] == self.result.run_id}
        missing = expected_task_keys(date.today()) - keys
        if run["status"] != "done":
            self.result.problems.append(f"run ended {run['status']}: {run['error']}")
        if missing:
            self.result.problems.append(f"tasks missing: {sorted(missing)}")
        self.result.steps = self.step_count(state)
        self.result.calls = sum(self.calls_by_process().values())
        if self.result.steps != 3:
            self.result.problems.append(f"the run took {self.result.steps} steps, the offline model needs 3")
        if not 0 <= self.result.calls - self.result.steps <= len(self.result.kills):
            self.result.problems.append(f"{self.result.calls} calls for {self.result.steps} steps "
                                        f"with {len(self.result.kills)} kill(s)")


def summarise(results: list[TrialResult]) -> dict:
    """The figures docs/reliability.md reports."""
    by_phase = Counter(k.phase for r in results for k in r.kills)
    return {
        "trials": len(results),
        "by_backend": dict(Counter(r.backend for r in results)),
        "processes": sum(r.processes for r in results),
        "kills": sum(len(r.kills) for r in results),
        "kills_in_resume": sum(1 for r in results for k in r.kills if k.process == "resume"),
        "kills_by_phase": {PHASE_NAMES[p]: by_phase.get(p, 0) for p in PHASE_NAMES},
        "lost_calls_by_phase": {PHASE_NAMES[p]: sum(k.lost_calls for r in results for k in r.kills if k.phase == p)
                                for p in PHASE_NAMES},
        "missed_kills": sum(r.misses for r in results),
        "calls": sum(r.calls for r in results),
        "steps": sum(r.steps for r in results),
        "lost_calls": sum(r.lost_calls for r in results),
    }
