"""One simulation example: real ``dayflow`` processes driven through a plan, checked after every action.

The world is a folder (the agent file, the side-effect ledger, one trace
file per process), a database (a SQLite file, or a PostgreSQL schema the
processes reach through the fault proxy) and the scripted model server. It
carries out each action of a plan (``plan.py``), with the action's fault
laid over it and its kill aimed, then reads the database through a separate
connection and checks the properties (``checks.py``). At the end it settles:
faults off, the agent as written, every run driven to a verdict.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..fault_moments import LineWatch
from .agent_file import AgentSpec
from .plan import Plan
from .scripted_model import ScriptedModel

PROCESS_TIMEOUT_S = 120.0  # a process still running after this is in a retry loop or hung: a finding
BODY_PAUSE_S = 0.25  # how long a side-effecting body sleeps when a kill is aimed into it
COMMIT_PAUSE_S = 0.05
API_DELAY_S = 0.25
CHILD_KILL_S = 0.5  # a kill inside a child run lands this long at most after its Nth request arrived
CHILD_DONE_PAUSE_S = 0.2  # the pause after each commit while a kill waits for a child's last one
VERDICTS = {"done", "failed", "waiting", "budget", "cancelled"}


@dataclass
class Proc:
    """One ``dayflow`` process: what it was, how it ended, and what the database gained meanwhile."""

    tag: str
    argv: list[str]
    pid: int = 0
    exit_code: int | None = None
    killed: bool = False
    kill_aim: str = ""
    group: str = ""  # processes started together (a race) are accounted together
    steps_before: int = 0
    steps_after: int = 0
    out: str = ""
    err: str = ""
    timed_out: bool = False
    backpressure: bool = False  # a 429 or 529 burst was laid over it
    seconds: float = 0.0


@dataclass
class Snapshot:
    runs: dict[str, dict]
    steps: dict[tuple[str, int], dict]
    tasks: list[dict]
    approvals: dict[tuple[str, str], dict]
    # The search index's rows of steps (run_id, n, part), a row per part written; None: no index here.
    index_rows: list[tuple[str, int, int]] | None = None

    def paid_steps(self) -> int:
        """Steps bought by a model call: a fork's copies of its parent's steps are not."""
        return sum(1 for (run_id, n) in self.steps if n > (self.runs[run_id].get("forked_at") or 0))


# The index rows of steps' turns and tool results (parts 1-3: turn, final turn, results).
_INDEX_ROWS = "SELECT run_id, n, part FROM search_docs WHERE part BETWEEN 1 AND 3"


def read_snapshot(target: str) -> Snapshot:
    """The whole database, read through a connection of the test's own (never Dayflow's store)."""
    queries = {"runs": "SELECT * FROM runs", "steps": "SELECT * FROM steps", "tasks": "SELECT * FROM tasks",
               "approvals": "SELECT * FROM approvals"}
    if target.startswith("postgresql://"):
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(target, row_factory=dict_row, connect_timeout=10,
                             application_name="dayflow-sim-reader") as conn:
            if conn.execute("SELECT to_regclass('approvals') IS NULL AS empty").fetchone()["empty"]:
                return Snapshot({}, {}, [], {})  # no process has created the tables yet
            rows = {name: conn.execute(sql).fetchall() for name, sql in queries.items()}
            index = None
            if not conn.execute("SELECT to_regclass('search_docs') IS NULL AS empty").fetchone()["empty"]:
                index = [(r["run_id"], r["n"], r["part"]) for r in conn.execute(_INDEX_ROWS).fetchall()]
    else:
        if not Path(target).exists():
            return Snapshot({}, {}, [], {})
        conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True, timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            rows = {name: [dict(r) for r in conn.execute(sql)] for name, sql in queries.items()}
            index = None
            if conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'search_docs'").fetchone()[0]:
                index = [(r["run_id"], r["n"], r["part"]) for r in conn.execute(_INDEX_ROWS)]
        finally:
            conn.close()
    return Snapshot({r["id"]: r for r in rows["runs"]}, {(s["run_id"], s["n"]): s for s in rows["steps"]},
                    rows["tasks"], {(a["run_id"], a["tool_use_id"]): a for a in rows["approvals"]}, index)


@dataclass
class LedgerLine:
    what: str
    run: str
    call: str
    value: str  # the note (read, start, end) or the key (idem-start, idem-end)
    created: int | None
    pid: int
    at: float


@dataclass
class McpLine:
    """A line of the MCP server's ledger (``mcp_server.py``): a body began or ended."""

    what: str  # mcp-start or mcp-end
    tool: str  # look, put or send
    call: str
    note: str
    client: int  # the pid of the dayflow process that started the server
    pid: int  # the server's
    at: float


def read_mcp_ledger(path: Path) -> list[McpLine]:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    lines = []
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) == 7:
            lines.append(McpLine(parts[0], parts[1], parts[2], parts[3], int(parts[4]), int(parts[5]),
                                 float(parts[6])))
    return lines


def read_ledger(path: Path) -> list[LedgerLine]:
    lines = []
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) < 6:
            continue  # a line cut by a kill (one write each, so this does not happen) is not a record
        created = int(parts[4]) if parts[0] == "idem-end" else None
        lines.append(LedgerLine(parts[0], parts[1], parts[2], parts[3], created, int(parts[-2]), float(parts[-1])))
    return lines


@dataclass
class Outcome:
    """What an example left behind: the problems found, and figures."""

    problems: list[str] = field(default_factory=list)
    processes: int = 0
    kills: int = 0
    paid_calls: int = 0
    paid_steps: int = 0
    skipped: int = 0
    seconds: float = 0.0
    slowest_s: float = 0.0  # the longest a process took
    verbs: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)  # faults laid over a process
    kills_at: dict[str, int] = field(default_factory=dict)  # kills that landed, by where they were aimed
    replies: dict[str, int] = field(default_factory=dict)  # the scripted model's replies by stop reason or "broken"
    mcp_bodies: dict[str, int] = field(default_factory=dict)  # MCP tool bodies begun, by tool
    child_runs: int = 0  # child runs made by the subagent tool


class World:
    def __init__(self, plan: Plan, workdir: Path, *, db_target: str, process_db: str | None = None,
                 proxy=None):
        self.plan = plan
        self.rng = random.Random(f"{plan.seed}:world")
        self.dir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.db = db_target  # what the checks read
        self.process_db = process_db or db_target  # what the processes use (through the proxy on PostgreSQL)
        self.proxy = proxy
        self.backend = plan.backend
        self.agent_path = workdir / "sim_agent.py"
        self.ledger = workdir / "ledger.log"
        self.mcp_ledger = workdir / "mcp.log"  # the MCP server's (every server process of the example)
        self.spec: AgentSpec = plan.agent
        self.write_agent(plan.agent)
        open_store(self.db).close()  # the tables exist before any fault is laid on them
        self.procs: list[Proc] = []
        self.outcome = Outcome()
        self.model: ScriptedModel | None = None
        self.decisions: dict[tuple[str, str], str] = {}  # (run, call) -> the decision a process committed
        self.seen_steps: dict[tuple[str, int], dict] = {}
        self.seen_decisions: dict[tuple[str, str], tuple] = {}
        # run -> (time.monotonic() when a `dayflow cancel` of it had exited 0, its step count read just after)
        self.cancels: dict[str, tuple[float, int]] = {}
        self.seen_cancelled: set[str] = set()
        self.children: dict[tuple[str, str], str] = {}  # (parent run, call id) -> its child run, once seen
        self.children_done: dict[str, float] = {}  # child run -> time.monotonic() when first seen done

    # -- the agent ---------------------------------------------------------

    def write_agent(self, spec: AgentSpec) -> None:
        self.agent_path.write_text(spec.source(), encoding="utf-8")

    # -- processes -----------------------------------------------------------

    def env(self, tag: str, *, body_pause: float, commit_pause: float, after_commit: float = 0.0) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANTHROPIC_", "DAYFLOW_", "SIM_")) and k != "PYTEST_CURRENT_TEST"}
        env.update(self.model.env(tag))
        env.update(DAYFLOW_DB=self.process_db, DAYFLOW_TEST_TRACE=str(self.dir / f"{tag}.trace"),
                   DAYFLOW_OFFLINE_DELAY="0", DAYFLOW_API_MAX_RETRIES="1", DAYFLOW_API_TIMEOUT="20",
                   DAYFLOW_RETRY_BACKOFF="0.2", DAYFLOW_MAX_ATTEMPTS="3", DAYFLOW_HOSTNAME="sim-host",
                   DAYFLOW_STATE_DIR=str(self.dir / "state"), XDG_STATE_HOME=str(self.dir / "xdg-state"),
                   XDG_DATA_HOME=str(self.dir / "xdg-data"), XDG_CONFIG_HOME=str(self.dir / "xdg-config"),
                   DAYFLOW_USER="sim", SIM_LEDGER=str(self.ledger), SIM_BODY_PAUSE=f"{body_pause:g}",
                   SIM_MCP_LEDGER=str(self.mcp_ledger),
                   PYTHONDONTWRITEBYTECODE="1")  # an edited agent file is read again, never a stale .pyc
        pauses = ([f"commit:{commit_pause:g}"] if commit_pause else []) + (
            [f"committed:{after_commit:g}"] if after_commit else [])
        if pauses:
            env["DAYFLOW_TEST_PAUSE_IN"] = ",".join(pauses)
        return env

    def new_proc(self, *args: str, group: str = "") -> Proc:
        proc = Proc(f"p{len(self.procs) + 1}", dayflow_cmd(*args), group=group)
        self.procs.append(proc)
        self.outcome.processes += 1
        return proc

    def spawn(self, proc: Proc, *, stdin: str | None = None, body_pause: float = 0.0,
              commit_pause: float = 0.0, after_commit: float = 0.0) -> subprocess.Popen:
        out = open(self.dir / f"{proc.tag}.out", "wb")
        err = open(self.dir / f"{proc.tag}.err", "wb")
        with out, err:
            popen = subprocess.Popen(proc.argv, env=self.env(proc.tag, body_pause=body_pause,
                                                             commit_pause=commit_pause, after_commit=after_commit),
                                     stdout=out, stderr=err,
                                     stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
        if stdin is not None:
            try:
                popen.stdin.write(stdin.encode())
                popen.stdin.close()
            except BrokenPipeError:
                pass
        proc.pid = popen.pid
        return popen

    def finish(self, proc: Proc, popen: subprocess.Popen) -> None:
        started = time.monotonic()
        try:
            proc.exit_code = popen.wait(timeout=PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            popen.kill()
            proc.exit_code = popen.wait(timeout=30)
            proc.timed_out = True
        proc.seconds = time.monotonic() - started
        self.outcome.slowest_s = max(self.outcome.slowest_s, proc.seconds)
        proc.out = (self.dir / f"{proc.tag}.out").read_text(errors="replace")
        proc.err = (self.dir / f"{proc.tag}.err").read_text(errors="replace")

    def kill(self, proc: Proc, popen: subprocess.Popen) -> None:
        if popen.poll() is None:
            try:
                popen.send_signal(signal.SIGKILL)
                proc.killed = True
                self.outcome.kills += 1
                self.outcome.kills_at[proc.kill_aim] = self.outcome.kills_at.get(proc.kill_aim, 0) + 1
            except ProcessLookupError:
                pass

    def run_one(self, *args: str, kill: tuple | None = None, fault: tuple | None = None,
                stdin: str | None = None) -> Proc:
        """One process, its kill aimed and its fault laid over it; returns once it has ended."""
        proc = self.new_proc(*args)
        proc.steps_before = read_snapshot(self.db).paid_steps()
        proc.backpressure = bool(fault) and fault[0].startswith("burst")
        moment = kill[0] if kill else ""
        body_pause = BODY_PAUSE_S if moment in ("body", "mcp", "child") else 0.0
        commit_pause = COMMIT_PAUSE_S if moment in ("commit", "committed") else 0.0
        after_commit = CHILD_DONE_PAUSE_S if moment == "child-done" else 0.0
        self.model.delay = API_DELAY_S if moment in ("api", "child") else 0.0
        timers: list[threading.Timer] = []
        watches: list[LineWatch] = []
        with self.fault(fault):
            popen = self.spawn(proc, stdin=stdin, body_pause=body_pause, commit_pause=commit_pause,
                               after_commit=after_commit)
            if kill:
                proc.kill_aim = moment
                nth, fraction = kill[1], kill[2]
                seen = {"n": 0}

                def aimed(seconds: float):
                    def fire(_line: str = "") -> None:
                        seen["n"] += 1
                        if seen["n"] == nth:
                            timer = threading.Timer(seconds, self.kill, (proc, popen))
                            timers.append(timer)
                            timer.start()
                    return fire

                if moment == "body":
                    watches.append(LineWatch(self.ledger, aimed(fraction * BODY_PAUSE_S * 0.9),
                                             wanted=lambda line: line.split()[0] in ("start", "idem-start")
                                             and line.split()[-2] == str(popen.pid)))
                elif moment in ("commit", "committed"):
                    watches.append(LineWatch(self.dir / f"{proc.tag}.trace",
                                             aimed(fraction * COMMIT_PAUSE_S * 0.9 if moment == "commit" else 0),
                                             wanted=lambda line, m=moment: line.strip() == m))
                elif moment == "api":
                    fire = aimed(fraction * API_DELAY_S * 0.9)
                    self.model.on_request = lambda tag: fire() if tag == proc.tag else None
                elif moment == "mcp":
                    # Only the dayflow process is killed: its MCP server (a child, not in a group killed with
                    # it) finishes the body it is in and exits when it reads the end of its stdin.
                    watches.append(LineWatch(self.mcp_ledger, aimed(fraction * BODY_PAUSE_S * 0.9),
                                             wanted=lambda line: line.split()[:2] in (["mcp-start", "send"],
                                                                                      ["mcp-start", "put"])
                                             and line.split()[4] == str(popen.pid)))
                elif moment == "child":
                    fire = aimed(fraction * CHILD_KILL_S)
                    self.model.on_child = lambda tag, event: fire() if tag == proc.tag and event == "request" \
                        else None
                elif moment == "child-done":
                    # The Nth child's final reply, then the next commit (that child's last step, the run done):
                    # killed in the pause just after it, before the parent kept the child's answer.
                    fire = aimed(0.0)
                    trace = self.dir / f"{proc.tag}.trace"
                    marks = {"seen": 0, "after": None}  # committed lines watched; how many were written at the final

                    def final(tag: str, event: str) -> None:
                        if tag == proc.tag and event == "final":
                            text = trace.read_text(errors="replace") if trace.exists() else ""
                            marks["after"] = sum(1 for line in text.splitlines() if line.strip() == "committed")

                    def committed(_line: str) -> None:
                        marks["seen"] += 1
                        if marks["after"] is not None and marks["seen"] > marks["after"]:
                            marks["after"] = None
                            fire()

                    self.model.on_child = final
                    watches.append(LineWatch(trace, committed,
                                             wanted=lambda line: line.strip() == "committed"))
                else:
                    timer = threading.Timer(0.2 + fraction * 1.8, self.kill, (proc, popen))
                    timers.append(timer)
                    timer.start()
                for watch in watches:
                    watch.__enter__()
            try:
                self.finish(proc, popen)
            finally:
                for watch in watches:
                    watch.__exit__(None, None, None)
                for timer in timers:
                    timer.cancel()
                self.model.on_request = None
                self.model.on_child = None
                self.model.delay = 0.0
        proc.steps_after = read_snapshot(self.db).paid_steps()
        return proc

    def race(self, run_id: str) -> list[Proc]:
        """``dayflow resume RUN`` and ``dayflow worker --once`` started together: one drives, the other yields."""
        group = f"race{len(self.procs)}"
        procs = [self.new_proc("resume", run_id, group=group), self.new_proc("worker", "--once", group=group)]
        before = read_snapshot(self.db).paid_steps()
        popens = [self.spawn(p) for p in procs]
        for proc, popen in zip(procs, popens):
            self.finish(proc, popen)
        after = read_snapshot(self.db).paid_steps()
        for proc in procs:
            proc.steps_before, proc.steps_after = before, after
        return procs

    # -- faults ----------------------------------------------------------------

    def fault(self, fault: tuple | None):
        return _Fault(self, fault)

    def set_store_fault(self, armed: bool) -> None:
        """A database-side error on every task insert (a trigger), so a tool's store write fails for real."""
        if self.db.startswith("postgresql://"):
            import psycopg

            with psycopg.connect(self.db, autocommit=True, application_name="dayflow-sim-fault") as conn:
                if armed:
                    conn.execute("CREATE OR REPLACE FUNCTION sim_store_fault() RETURNS trigger LANGUAGE plpgsql "
                                 "AS $$ BEGIN RAISE EXCEPTION 'sim_injected_store_fault'; END $$")
                    conn.execute("CREATE TRIGGER sim_store_fault BEFORE INSERT ON tasks "
                                 "FOR EACH ROW EXECUTE FUNCTION sim_store_fault()")
                else:
                    conn.execute("DROP TRIGGER IF EXISTS sim_store_fault ON tasks")
            return
        conn = sqlite3.connect(self.db, timeout=30)
        try:
            if armed:
                # RAISE() would be a constraint error, which the store reads as a racing insert; a call to
                # a function that does not exist is an OperationalError like a real I/O or schema fault.
                conn.execute("CREATE TRIGGER IF NOT EXISTS sim_store_fault BEFORE INSERT ON tasks "
                             "BEGIN SELECT sim_injected_store_fault(); END")
            else:
                conn.execute("DROP TRIGGER IF EXISTS sim_store_fault")
            conn.commit()
        finally:
            conn.close()

    def hold_lock(self, seconds: float, started: threading.Event, done: threading.Event) -> None:
        """A second connection holding the write lock: SQLite BEGIN EXCLUSIVE; PostgreSQL LOCK TABLE runs."""
        try:
            if self.db.startswith("postgresql://"):
                import psycopg

                with psycopg.connect(self.db, application_name="dayflow-sim-lock") as conn:
                    conn.execute("LOCK TABLE runs, steps IN EXCLUSIVE MODE")
                    started.set()
                    done.wait(seconds)
                    conn.rollback()
            else:
                conn = sqlite3.connect(self.db, timeout=30, isolation_level=None)
                try:
                    conn.execute("BEGIN EXCLUSIVE")
                    started.set()
                    done.wait(seconds)
                    conn.execute("ROLLBACK")
                finally:
                    conn.close()
        finally:
            started.set()


class _Fault:
    """One fault over one process: armed on enter, disarmed on exit (bursts and triggers are taken back)."""

    def __init__(self, world: World, fault: tuple | None):
        self.world = world
        self.fault = fault
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.trigger = None

    def __enter__(self) -> "_Fault":
        if not self.fault:
            return self
        kind, seconds, count = self.fault
        world = self.world
        world.outcome.faults[kind] = world.outcome.faults.get(kind, 0) + 1
        if kind in ("burst429", "burst529"):
            world.model.burst(429 if kind == "burst429" else 529, count, seconds)
        elif kind == "lock":
            started = threading.Event()
            self.thread = threading.Thread(target=world.hold_lock, args=(seconds, started, self.stop), daemon=True)
            self.thread.start()
            started.wait(30)
        elif kind == "store_error":
            world.set_store_fault(True)
        elif kind == "broken_stream":
            # Half the cuts end with the API's mid-stream overloaded_error, half with a closed connection.
            world.model.break_streams(count, "overloaded_error" if world.rng.random() < 0.5 else None)
        elif kind == "pg_drop" and world.proxy is not None:
            # The connection is cut as a step's commit is sent (or just after the server answered it).
            self.trigger = world.proxy.arm('INSERT INTO "steps"', "COMMIT", deliver=world.rng.random() < 0.5)
        return self

    def __exit__(self, *exc) -> None:
        if not self.fault:
            return
        kind = self.fault[0]
        if kind.startswith("burst"):
            self.world.model.end_burst()
        elif kind == "lock":
            self.stop.set()
            self.thread.join(30)
        elif kind == "store_error":
            self.world.set_store_fault(False)
        elif kind == "broken_stream":
            self.world.model.end_breaks()
        elif self.trigger is not None:
            self.world.proxy.disarm(self.trigger)



def runs_with(snapshot: Snapshot, statuses: set[str]) -> list[str]:
    """Ids of the runs in one of ``statuses``, oldest first (a stable order for ``choose``)."""
    return sorted((r["id"] for r in snapshot.runs.values() if r["status"] in statuses),
                  key=lambda i: (str(snapshot.runs[i]["created_at"]), i))


def choose(items: list, pick: float):
    """The item at fraction ``pick`` of ``items`` (None when there is none)."""
    return items[min(int(pick * len(items)), len(items) - 1)] if items else None
