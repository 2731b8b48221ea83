"""3. Resume: process start to first API call, and ``rebuild_messages`` against the raw floor.

- ``dayflow resume`` on an interrupted run of 10, 1,000 and 10,000 agent-like
  steps, against ``dayflow brief`` (a fresh run) on the same machine, in
  alternation. The clock starts just before the process is spawned and stops
  at the offline model's call, stamped in ``DAYFLOW_CALL_LOG``. Every trial
  gets a fresh copy of its database, so each resume does the same work.
- ``rebuild_messages`` for a 1,000-step run, in process, against plain
  sqlite3 + ``json.loads`` of the same rows building the same list.
- ``dayflow show`` of a 5,000-step run: spawn to its first line on a pipe, and to its end, alternated with
  ``dayflow runs`` on the same file (the same process start and imports, no transcript).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

from bench.common import BIN, Row, scale, build_run, interleaved, median, ms, quiet_env, workdir

RESUME_LENGTHS = scale((10, 1_000, 10_000), (3, 20, 40))
REBUILD_LENGTH = RESUME_LENGTHS[1]  # rebuild_messages is measured on the 1,000-step run


def _first_call_seconds(argv: list[str], log: Path) -> float:
    """Seconds from spawning ``argv`` to its first model call (the call log's timestamp)."""
    started = time.time()
    done = subprocess.run(argv, env=quiet_env(DAYFLOW_CALL_LOG=str(log)), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    lines = log.read_text().splitlines()
    if not lines:
        raise RuntimeError(f"{' '.join(argv[1:])} made no model call")
    return float(lines[0].split()[2]) - started


def build_fixtures(tmp: Path) -> dict:
    """Pristine databases: an empty one for fresh starts and one per resume length."""
    from dayflow_tui.store import open_store

    fixtures = {}
    empty = tmp / "fresh.db"
    open_store(empty).close()
    fixtures["fresh"] = (empty, None)
    for n in RESUME_LENGTHS:
        path = tmp / f"resume-{n}.db"
        store = open_store(path)
        fixtures[n] = (path, build_run(store, n))
        store.close()
    return fixtures


def _fresh_copy(pristine: Path, trial: Path) -> None:
    """``trial`` becomes a byte copy of the fixture, with no WAL or SHM left from the last round."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{trial}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(pristine, trial)


def time_to_first_call(fixtures: dict, tmp: Path, rounds: int) -> dict:
    dayflow = str(BIN / "dayflow")
    timings: dict = {key: [] for key in fixtures}
    for r in range(rounds):
        for key, (pristine, run_id) in fixtures.items():
            trial = tmp / f"trial-{key}.db"
            _fresh_copy(pristine, trial)
            log = tmp / f"calls-{key}-{r}.log"
            argv = ([dayflow, "brief", "--db", str(trial)] if run_id is None
                    else [dayflow, "resume", run_id, "--db", str(trial)])
            timings[key].append(_first_call_seconds(argv, log))
    return timings


class _FirstCall(Exception):
    pass


class FirstCallClient:
    """A model client that notes when the first call arrives and stops the run there."""

    def __init__(self):
        self.at: float | None = None
        self.messages = self

    def create(self, **request):
        self.at = time.perf_counter()
        raise _FirstCall


def work_before_first_call(fixtures: dict, tmp: Path, rounds: int) -> dict:
    """In process, imports done: ``runs.resume`` (or ``run_brief``) to the first model call."""
    from dayflow_tui.agent import runs
    from dayflow_tui.config.errors import ModelCallFailed
    from dayflow_tui.store import open_store

    timings: dict = {key: [] for key in fixtures}
    for _ in range(rounds):
        for key, (pristine, run_id) in fixtures.items():
            trial = tmp / f"inproc-{key}.db"
            _fresh_copy(pristine, trial)
            store = open_store(trial)
            client = FirstCallClient()
            started = time.perf_counter()
            try:
                if run_id is None:
                    runs.run_brief(store, model="offline", client=client)
                else:
                    runs.resume(run_id, store=store, client=client)
            except ModelCallFailed:
                pass
            store.close()
            if client.at is None:
                raise RuntimeError(f"{key}: no model call")
            timings[key].append(client.at - started)
    return timings


class RawRebuild:
    """The same messages list from plain sqlite3 and json.loads: the floor for ``rebuild_messages``."""

    def __init__(self, path: Path):
        self.conn = sqlite3.connect(str(path))

    def __call__(self, run_id: str) -> list[dict]:
        (user_msg,) = self.conn.execute("SELECT user_msg FROM runs WHERE id = ?", (run_id,)).fetchone()
        messages: list[dict] = [{"role": "user", "content": user_msg}]
        for assistant, results in self.conn.execute(
                "SELECT assistant, tool_results FROM steps WHERE run_id = ? ORDER BY n", (run_id,)):
            messages.append({"role": "assistant", "content": json.loads(assistant)})
            if results is not None:
                messages.append({"role": "user", "content": json.loads(results)})
        return messages


def rebuild(fixtures: dict, rounds: int) -> tuple[list[float], list[float]]:
    from dayflow_tui.agent.messages import rebuild_messages
    from dayflow_tui.store import open_store

    path, run_id = fixtures[REBUILD_LENGTH] if REBUILD_LENGTH in fixtures else fixtures[1_000]
    store = open_store(path)
    raw = RawRebuild(path)
    if rebuild_messages(store, run_id) != raw(run_id):
        raise RuntimeError("rebuild_messages and the raw rebuild disagree")
    ours_t, raw_t = interleaved(lambda: rebuild_messages(store, run_id), lambda: raw(run_id),
                                rounds=rounds, warmup=2)
    raw.conn.close()
    store.close()
    return ours_t, raw_t


SHOW_STEPS = scale(5_000, 40)


def _first_line_and_end(argv: list[str]) -> tuple[float, float]:
    """Seconds from spawning ``argv`` to its first line on a pipe, and to its end."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=quiet_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdout.readline()
    first = time.perf_counter() - started
    proc.stdout.read()
    if proc.wait() != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {proc.returncode}")
    return first, time.perf_counter() - started


def show_rows(quick: bool) -> list[Row]:
    """``dayflow show`` of a 5,000-step run: its first line and its end, against ``dayflow runs`` on the same file."""
    from dayflow_tui.store import open_store

    dayflow = str(BIN / "dayflow")
    with workdir("show") as tmp:
        path = tmp / "show.db"
        store = open_store(path)
        run_id = build_run(store, SHOW_STEPS)
        store.close()
        found: dict = {"show": [], "runs": []}
        for r in range(scale(3 if quick else 7, 1)):
            for key in (("show", "runs") if r % 2 == 0 else ("runs", "show")):
                argv = ([dayflow, "show", run_id, "--db", str(path)] if key == "show"
                        else [dayflow, "runs", "--db", str(path)])
                found[key].append(_first_line_and_end(argv))
    first = median([f for f, _ in found["show"]])
    end = median([e for _, e in found["show"]])
    runs_end = median([e for _, e in found["runs"]])
    return [Row("3 show", f"`dayflow show` of a {SHOW_STEPS:,}-step run: process start -> first line on a pipe (median)",
                ms(first), f"`dayflow runs` on the same file, start -> exit {ms(runs_end)}", first / runs_end,
                "<= 150 ms", first <= 0.150, "header first, then the steps a page at a time (25, then 500)"),
            Row("3 show", f"the same, start -> the last line ({SHOW_STEPS:,} steps, about {SHOW_STEPS * 3:,} lines)",
                ms(end), f"`dayflow runs` {ms(runs_end)}", end / runs_end, "", None, "")]


def run(quick: bool = False) -> list[Row]:
    with workdir("resume") as tmp:
        fixtures = build_fixtures(tmp)
        first_call = time_to_first_call(fixtures, tmp, rounds=scale(3 if quick else 7, 1))
        in_process = work_before_first_call(fixtures, tmp, rounds=scale(3 if quick else 7, 1))
        ours_t, raw_t = rebuild(fixtures, rounds=scale(10 if quick else 40, 2))
    fresh = median(first_call["fresh"])
    rows = []
    for n in RESUME_LENGTHS:
        took = median(first_call[n])
        target = n == RESUME_LENGTHS[-1]  # issue #28: flat in run length, at 10,000 steps too
        rows.append(Row("3 resume", f"process start -> first API call, resume of {n:,} steps (median)",
                        ms(took), f"fresh run {ms(fresh)}", took / fresh, "<= 1.5x" if target else "",
                        took / fresh <= 1.5 if target else None, "`dayflow resume` vs `dayflow brief`"))
    fresh_work = median(in_process["fresh"])
    for n in RESUME_LENGTHS:
        took = median(in_process[n])
        rows.append(Row("3 resume", f"the same, in process (imports done): resume work of {n:,} steps",
                        ms(took), f"fresh run {ms(fresh_work)}", took / fresh_work, "", None,
                        "claim, read and rebuild the history, build the request"))
    ratio = median(ours_t) / median(raw_t)
    rows.append(Row("3 resume", f"rebuild_messages, {REBUILD_LENGTH:,} steps (median)", ms(median(ours_t)),
                    f"raw sqlite3 + json.loads {ms(median(raw_t))}", ratio, "<= 1.5x", ratio <= 1.5,
                    "one query, plain tuples, each row's JSON decoded once"))
    rows += show_rows(quick)
    return rows
