"""Real network faults between Dayflow and PostgreSQL, made by the fault proxy (tests/fault_proxy.py).

Every test drives a real run through the proxy while it cuts, stalls or
refuses connections at a chosen moment: while a model call is in flight,
inside the commit of each kind of write (before the COMMIT reaches the
server, or after the server committed and before the client hears it), while
the lease's heartbeat writes, and while the dashboard polls. What must hold
each time: the run is done with steps 1..3, its totals equal the sums of its
steps, every task exists once, and model calls == committed steps (no
process died, so no call may be lost). Calls are counted outside the process
(the loopback API server, the offline model's ``DAYFLOW_CALL_LOG``) and the
database is read with psycopg, not Dayflow's store.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from datetime import date
from pathlib import Path

import pytest

from ..conftest import CountingClient, dayflow_cmd
from ..crash_harness import STUB_MODEL, check_invariants, expected_task_keys, read_db
from ..fault_moments import LineWatch
from ..loopback_api import LoopbackAPI
from ..reliability_helpers import call_count, cli_env, dayflow, text

pytestmark = pytest.mark.postgres

OFFLINE_STEPS = 3  # the offline model: read, create tasks, write the brief

# Pieces of the SQL of each write a run makes (as Peewee builds it), for the proxy's triggers.
SQL = {
    "create the run": 'INSERT INTO "runs"',
    "commit a paid reply": 'INSERT INTO "steps"',
    "commit tool results": 'UPDATE "steps" SET "tool_results"',
    "create a task": 'INSERT INTO "tasks"',
    "release the lease": 'UPDATE "runs" SET "owner_host"',
    "claim the run": 'UPDATE "runs" SET "status"',
    "heartbeat": 'UPDATE "runs" SET "heartbeat_at"',
    "dashboard poll": 'FROM "dayflow_changes"',
}


def the_run(url: str) -> dict:
    """The one run in the schema, after checking every invariant a finished run must meet."""
    state = read_db(url)
    assert len(state.runs) == 1, [r["id"] for r in state.runs]
    run = state.runs[0]
    assert check_invariants(state, run["id"], expected_task_keys(date.today())) == []
    assert [s["n"] for s in state.steps] == list(range(1, OFFLINE_STEPS + 1))
    assert run["status"] == "done", (run["status"], run["error"])
    assert run["lease_token"] is None and run["owner_pid"] is None  # released at the end
    keys = {t["idempotency_key"] for t in state.tasks if t["run_id"] == run["id"]}
    assert keys == expected_task_keys(date.today())  # every task made, each once (the key is UNIQUE)
    return run


def assert_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, (result.returncode, text(result.stderr)[-800:])
    assert "Traceback" not in text(result.stderr)


# -- a model call in flight --------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["cut", "outage"])
def test_the_database_lost_during_every_model_call_costs_no_call(pg_url, pg_proxy, fault):
    """The real SDK waits on the loopback API while every connection is cut (or the server is away for
    a second: cut, then connections refused); the reply that arrives must still be committed once."""
    cut: list[int] = []

    def in_flight(_number: int) -> None:
        cut.append(pg_proxy.cut_all() if fault == "cut" else pg_proxy.outage(1.0))

    with LoopbackAPI(delay=0.3, on_request=in_flight) as api:
        result = dayflow("brief", "--model", STUB_MODEL, db=pg_proxy.url(pg_url), env=cli_env(**api.env()))
        calls = api.calls
    assert_ok(result)
    assert len(cut) == OFFLINE_STEPS and all(n >= 1 for n in cut), cut  # the driver's session was cut each time
    the_run(pg_url)
    assert calls == OFFLINE_STEPS


# -- inside a commit -----------------------------------------------------------------------------------


def _brief(pg_url: str, pg_proxy, log: Path, **env: str) -> subprocess.CompletedProcess:
    return dayflow("brief", db=pg_proxy.url(pg_url), env=cli_env(DAYFLOW_CALL_LOG=str(log), **env))


@pytest.fixture
def pg_schema_ready(pg_url) -> str:
    """The schema created and seeded beforehand (directly), so a trigger meets only the run's own writes."""
    from dayflow_tui.store import open_store

    open_store(pg_url).close()
    return pg_url


@pytest.mark.parametrize("deliver", [False, True], ids=["commit-never-arrives", "committed-but-answer-lost"])
@pytest.mark.parametrize("write", ["create the run", "commit a paid reply", "commit tool results",
                                   "create a task", "release the lease"])
def test_every_commit_of_a_run_cut_costs_nothing(pg_schema_ready, pg_proxy, tmp_path, write, deliver, request):
    """Every other COMMIT of one kind of write is cut (so each retry gets through): before it reaches the
    server (rolled back there), or after the server committed it and before the client hears so (the
    retry must find it landed)."""
    pg_url = pg_schema_ready
    log = tmp_path / "calls.log"
    trigger = pg_proxy.arm(SQL[write], "COMMIT", deliver=deliver, times=100, every=2)
    result = _brief(pg_url, pg_proxy, log)
    assert trigger.fired >= 1, f"no {write!r} COMMIT went through the proxy"
    assert_ok(result)
    the_run(pg_url)
    assert call_count(log) == OFFLINE_STEPS


def test_connections_cut_while_paused_inside_every_other_commit(pg_url, pg_proxy, tmp_path):
    """The documented hook: DAYFLOW_TEST_PAUSE_IN=commit:S holds the write transaction open; the trace
    says when, and every connection is cut right then (every other time, so the retries get through)."""
    log, trace = tmp_path / "calls.log", tmp_path / "trace.log"
    commits = [0]

    def in_commit(_line: str) -> int:
        commits[0] += 1
        return pg_proxy.cut_all() if commits[0] % 2 else 0

    with LineWatch(trace, in_commit, wanted=lambda line: line == "commit") as watch:
        result = _brief(pg_url, pg_proxy, log, DAYFLOW_TEST_TRACE=str(trace), DAYFLOW_TEST_PAUSE_IN="commit:0.3")
    assert_ok(result)
    cut = [n for n in watch.results if n]
    assert len(cut) >= 3, watch.results  # responses and tool results both hit
    the_run(pg_url)
    assert call_count(log) == OFFLINE_STEPS


@pytest.mark.parametrize("statement", ["schema check", "first migration"])
def test_a_cut_while_a_command_opens_the_database_is_retried(pg_url, pg_proxy, tmp_path, statement):
    if statement == "schema check":
        from dayflow_tui.store import open_store

        open_store(pg_url).close()
        trigger = pg_proxy.arm('"dayflow_meta"')
    else:
        trigger = pg_proxy.arm('INSERT INTO "tasks"', "COMMIT")  # the sample tasks, seeded with the schema
    log = tmp_path / "calls.log"
    result = _brief(pg_url, pg_proxy, log)
    assert trigger.fired == 1
    assert_ok(result)
    the_run(pg_url)
    assert call_count(log) == OFFLINE_STEPS


# -- every store call, on a connection the server has gone from ------------------------------------------------

# Each store method a front end or a worker calls, as (name, call); ``run`` is queued, ``lease`` held on ``held``.
STORE_CALLS = {
    "get_run": lambda store, run, held, lease: store.get_run(run.id),
    "list_runs": lambda store, run, held, lease: store.list_runs(),
    "count_runs": lambda store, run, held, lease: store.count_runs(),
    "latest_unfinished": lambda store, run, held, lease: store.latest_unfinished(),
    "change_marker": lambda store, run, held, lease: store.change_marker(),
    "steps": lambda store, run, held, lease: store.steps(run.id),
    "list_tasks": lambda store, run, held, lease: store.list_tasks(),
    "create_run": lambda store, run, held, lease: store.create_run("another", model="offline"),
    "create_task": lambda store, run, held, lease: store.create_task(idempotency_key="k-cut", title="t"),
    "claim": lambda store, run, held, lease: store.claim(run.id),
    "claim_next": lambda store, run, held, lease: store.claim_next(),
    "heartbeat": lambda store, run, held, lease: store.heartbeat(lease),
    "finish_run": lambda store, run, held, lease: store.finish_run(held.id, "failed", error="x", lease=lease),
    "record_failed_attempt": lambda store, run, held, lease: store.record_failed_attempt(
        held.id, lease, "x", max_attempts=3, backoff_s=1.0),
    "next_retry_at": lambda store, run, held, lease: store.next_retry_at(),
    "release": lambda store, run, held, lease: store.release(lease),
}


@pytest.mark.parametrize("call", sorted(STORE_CALLS))
def test_the_first_store_call_after_every_connection_was_cut_reconnects(pg_schema_ready, pg_proxy, call):
    from dayflow_tui.store import open_store

    store = open_store(pg_proxy.url(pg_schema_ready))
    try:
        run = store.create_run("queued", model="offline")
        held, lease = store.create_claimed_run("held", model="offline")
        store.get_run(run.id)  # the connection is open and idle
        assert pg_proxy.cut_all() >= 1
        STORE_CALLS[call](store, run, held, lease)  # must reconnect, not raise
    finally:
        store.close()


# -- claims by `resume` and by a worker ---------------------------------------------------------------------


@pytest.mark.parametrize("deliver", [False, True], ids=["commit-never-arrives", "committed-but-answer-lost"])
@pytest.mark.parametrize("command", ["resume", "worker"])
def test_a_claim_cut_at_its_commit_still_drives_the_run(pg_url, pg_proxy, tmp_path, command, deliver, request):
    queued = dayflow("brief", "--queue", db=pg_url)
    assert_ok(queued)
    log = tmp_path / "calls.log"
    trigger = pg_proxy.arm(SQL["claim the run"], "COMMIT", deliver=deliver)
    args = ["resume", text(queued.stdout).strip()] if command == "resume" else ["worker", "--once"]
    result = dayflow(*args, db=pg_proxy.url(pg_url), env=cli_env(DAYFLOW_CALL_LOG=str(log)))
    assert trigger.fired == 1
    assert_ok(result)
    the_run(pg_url)
    assert call_count(log) == OFFLINE_STEPS


# -- heartbeats ------------------------------------------------------------------------------------------


def _start_rival_worker(pg_url: str, log: Path, out: Path) -> subprocess.Popen:
    """A `dayflow worker` on another host (its own DAYFLOW_HOSTNAME, a direct connection), quick to take
    over a run whose heartbeat is older than 3 s; returns once it is polling."""
    env = cli_env(DAYFLOW_HOSTNAME="rival-host.example", DAYFLOW_CALL_LOG=str(log))
    with open(out, "wb") as err:
        rival = subprocess.Popen(dayflow_cmd("worker", "--poll", "0.2", "--stale-after", "3", "--db", pg_url),
                                 env=env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while b"thread(s) on" not in out.read_bytes():
        assert rival.poll() is None and time.monotonic() < deadline, out.read_text()
        time.sleep(0.05)
    return rival


def test_heartbeats_cut_at_their_commit_keep_the_lease_and_the_run_ends_on_its_owner(pg_url, pg_proxy, tmp_path):
    """The owner beats every 0.25 s through the proxy; its beats are cut (before the server sees them,
    then after it committed them, then with every other connection too). A rival worker on another host
    takes over any run whose beat is 3 s old. A blip must not cost the lease: the owner finishes the run,
    the rival calls nothing."""
    from dayflow_tui.agent.runs import resume
    from dayflow_tui.store import open_store

    rival_log = tmp_path / "rival-calls.log"
    rival = _start_rival_worker(pg_url, rival_log, tmp_path / "rival.err")
    store = open_store(pg_proxy.url(pg_url))
    try:
        run, lease = store.create_claimed_run("brief", model="offline")
        beats = [pg_proxy.arm(SQL["heartbeat"], "COMMIT", times=2),
                 pg_proxy.arm(SQL["heartbeat"], "COMMIT", deliver=True, times=2),
                 pg_proxy.arm(SQL["heartbeat"], "COMMIT", deliver=True, scope="all")]
        lease.start_heartbeat(every=0.25)

        class SlowClient(CountingClient):
            def create(self, **request):
                time.sleep(2.0)  # long enough for the rival to see a dead heartbeat, had it died
                return super().create(**request)

        client = SlowClient()
        result = resume(run.id, store=store, client=client, lease=lease)
        assert result.status == "done"
        assert [t.fired for t in beats] == [2, 2, 1], "the heartbeats were not all cut"
        assert not lease.lost
        assert client.calls == OFFLINE_STEPS
    finally:
        store.close()
        rival.send_signal(signal.SIGTERM)
        rival.wait(timeout=60)
    the_run(pg_url)
    assert call_count(rival_log) == 0, "the rival took the run over from its healthy owner"


# -- stalls and the commit retry window ------------------------------------------------------------------------


def test_a_stall_shorter_than_the_commit_retry_window_costs_nothing(pg_url, pg_proxy, tmp_path):
    """The network holds every byte for 3 s just as the first paid reply is being written."""
    log = tmp_path / "calls.log"
    stall = pg_proxy.arm(SQL["commit a paid reply"], action="stall", seconds=3.0)
    started = time.monotonic()
    result = _brief(pg_url, pg_proxy, log)
    assert stall.fired == 1
    assert time.monotonic() - started >= 3.0
    assert_ok(result)
    the_run(pg_url)
    assert call_count(log) == OFFLINE_STEPS


COMMIT_RETRY_S = 2.0
SPOOL_EXIT = 75  # ReplySpooled: EX_TEMPFAIL, nothing was lost


def _spool_scenario(pg_url: str, pg_proxy, tmp_path: Path, fault: str, fault_s: float) -> dict:
    """`dayflow brief` with DAYFLOW_COMMIT_RETRY_S=2 while the database stays unreachable for ``fault_s``
    from the moment the first paid reply is written: every byte held (``stall``: a frozen server), or
    every connection cut and new ones refused (``outage``: a server that is down)."""
    log = tmp_path / "calls.log"
    trigger = pg_proxy.arm(SQL["commit a paid reply"], action=fault, seconds=fault_s)
    env = cli_env(DAYFLOW_CALL_LOG=str(log), DAYFLOW_COMMIT_RETRY_S=str(COMMIT_RETRY_S))
    brief = subprocess.run(dayflow_cmd("brief", "--db", pg_proxy.url(pg_url)), env=env, capture_output=True,
                           timeout=fault_s + 120, stdin=subprocess.DEVNULL)
    ended = time.monotonic()
    assert trigger.fired == 1
    return {"result": brief, "err": text(brief.stderr), "took": ended - trigger.when[0], "paid": call_count(log),
            "log": log, "spools": sorted((Path(os.environ["XDG_STATE_HOME"]) / "dayflow").rglob("*.json"))}


def _end_the_fault(pg_proxy, seen: dict, fault_s: float) -> None:
    """The process exited while the fault was still on (it did not wait it out); end it now, not ``fault_s``
    later: what comes next (the spool file, a resume) needs the server back, not the full fault."""
    assert seen["took"] < fault_s, f"the process exited {seen['took']:.1f} s after a {fault_s:g} s fault began"
    assert pg_proxy.refusing or pg_proxy.stalled, "the fault ended before the process did"
    pg_proxy.end_faults()


@pytest.mark.slow
def test_a_reply_that_cannot_be_committed_in_the_window_is_spooled_and_resumed_without_paying(
        pg_url, pg_proxy, tmp_path):
    """The server goes away from the moment the first paid reply is written until `dayflow brief` has
    exited (the outage is set for 60 s and ended then); the commit gives up after its 2 s window. The
    reply must be in an owner-only spool file under the user's state directory, and the next
    `dayflow resume` stores it before any call: 3 calls in all, not 4."""
    fault_s = 60.0
    seen = _spool_scenario(pg_url, pg_proxy, tmp_path, "outage", fault_s)
    assert seen["result"].returncode != 0 and "Traceback" not in seen["err"], seen["err"]
    assert seen["paid"] == 1
    assert len(seen["spools"]) == 1, (seen["spools"], seen["err"])
    spool = seen["spools"][0]
    assert stat.S_IMODE(spool.stat().st_mode) == 0o600
    assert stat.S_IMODE(spool.parent.stat().st_mode) == 0o700
    _end_the_fault(pg_proxy, seen, fault_s)
    state = read_db(pg_url)
    assert state.steps == [], "the reply was committed after all: the window did not close"
    resumed = dayflow("resume", state.runs[0]["id"], db=pg_proxy.url(pg_url),
                      env=cli_env(DAYFLOW_CALL_LOG=str(seen["log"])))
    assert_ok(resumed)
    the_run(pg_url)
    assert call_count(seen["log"]) == OFFLINE_STEPS, "the spooled reply was bought again"
    assert not spool.exists()  # ingested, then removed


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["outage", "stall"])
def test_the_process_exits_soon_after_the_window_naming_the_spool_file(pg_url, pg_proxy, tmp_path, fault):
    """The promise (#10 item 2): once the commit window (2 s here) has passed, the process exits with
    one line naming the spool file (exit 75, nothing lost), a few seconds later at most, while the fault
    (set for 60 s) is still on; it is ended then."""
    fault_s = 60.0
    seen = _spool_scenario(pg_url, pg_proxy, tmp_path, fault, fault_s)
    _end_the_fault(pg_proxy, seen, fault_s)
    lines = seen["err"].strip().splitlines()
    assert seen["result"].returncode == SPOOL_EXIT, seen["err"]
    assert seen["took"] < COMMIT_RETRY_S + 8, f"exited {seen['took']:.1f} s after the fault began"
    assert len(seen["spools"]) == 1 and str(seen["spools"][0]) in lines[-1], seen["err"]
    assert "Traceback" not in seen["err"]


# -- the dashboard's poll ----------------------------------------------------------------------------------------


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def _dashboard(pg_proxy, pg_url):
    from dayflow_tui.store import open_store
    from dayflow_tui.tui.app import DayflowApp

    store = open_store(pg_proxy.url(pg_url))
    return store, DayflowApp(store)


def _shown(table) -> list[str]:
    return [table.row(i).id for i in range(table.total)]


@pytest.mark.anyio
async def test_dashboard_polls_cut_as_they_are_sent_heal_without_a_toast(pg_url, pg_proxy):
    """Three of the dashboard's polls are cut as they go out; the view catches up with a run queued
    meanwhile, no toast, and the title leaves 'reconnecting…'."""
    from dayflow_tui.tui.widgets.run_table import RunTable

    from ..tui_helpers import SIZE, wait_for

    store, app = await _dashboard(pg_proxy, pg_url)
    try:
        async with app.run_test(size=SIZE) as pilot:
            table = app.screen.query_one(RunTable)
            cuts = pg_proxy.arm(SQL["dashboard poll"], times=3)
            await wait_for(pilot, lambda: cuts.fired == 3, timeout=30)
            queued = dayflow("brief", "--queue", db=pg_url)
            assert_ok(queued)
            run_id = text(queued.stdout).strip()
            await wait_for(pilot, lambda: run_id in _shown(table), timeout=30)
            assert not app._notifications, [n.message for n in app._notifications]
            await wait_for(pilot, lambda: "reconnecting" not in app.sub_title, timeout=10)
    finally:
        store.close()


@pytest.mark.anyio
async def test_a_stalled_database_never_freezes_the_dashboard(pg_url, pg_proxy):
    """Every byte to and from the server is held for 5 s: keys are still handled meanwhile."""
    from dayflow_tui.tui.widgets.run_table import RunTable

    from ..tui_helpers import SIZE

    store, app = await _dashboard(pg_proxy, pg_url)
    try:
        async with app.run_test(size=SIZE) as pilot:
            table = app.screen.query_one(RunTable)
            await pilot.pause(1.0)
            before = table.filter.status
            stalled_at = time.monotonic()
            pg_proxy.stall(5.0)
            await pilot.pause(0.6)  # a poll is due meanwhile
            await pilot.press("f")  # the status filter moves on the screen while the database is stalled
            took = time.monotonic() - stalled_at - 0.6
            assert table.filter.status != before
            assert took < 2.5, f"the screen answered a key {took:.1f} s late while the database was stalled"
            pg_proxy.end_stall()
    finally:
        store.close()


# -- a stalled server: every try has a deadline --------------------------------------------------------------


def test_a_store_call_on_a_stalled_server_ends_with_one_line_after_its_window(pg_url, pg_proxy):
    """Every byte held for 30 s, a reading call with a 2 s window: the try's socket is cut at the window's end
    (no reconnect can be answered either), and the caller gets one readable error seconds later, not after
    the stall; once the stall is over the same store answers again on a fresh connection."""
    from dayflow_tui.config.errors import StoreError
    from dayflow_tui.store import open_store

    store = open_store(pg_proxy.url(pg_url))
    try:
        store.retry_for = 2.0
        assert store.list_runs() == []
        pg_proxy.stall(30.0)
        began = time.monotonic()
        with pytest.raises(StoreError) as failure:
            store.list_runs()
        took = time.monotonic() - began
        assert took < 2.0 + 6, f"the call returned {took:.1f} s into the stall"
        assert "\n" not in str(failure.value) and "answer" in str(failure.value), str(failure.value)
        pg_proxy.end_stall()
        assert store.list_runs() == []
    finally:
        pg_proxy.end_stall()
        store.close()


def test_a_healthy_slow_call_is_not_cut(pg_url, pg_proxy):
    """The deadline is the call's window, not a guess at how long a query takes: a statement that the server
    answers after 3 s within a 15 s window is left to finish on its connection."""
    from dayflow_tui.store import open_store
    from dayflow_tui.store.retry import store_call

    store = open_store(pg_proxy.url(pg_url))

    @store_call
    def slow(self):
        return self.db.execute_sql("SELECT pg_sleep(3), pg_backend_pid()").fetchone()[1]

    try:
        pid = store.db.execute_sql("SELECT pg_backend_pid()").fetchone()[0]
        assert slow(store) == pid  # the same connection: no cut, no reconnect
    finally:
        store.close()
