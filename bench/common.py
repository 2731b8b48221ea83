"""What every benchmark shares: the result row, statistics, the agent-like workload and fixtures.

The workload is one definition used by every benchmark (and by both sides of
every comparison), so "the same step" means the same bytes everywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent

# ``python -m bench --smoke`` (and the test that runs it) sets this before any item is imported: every
# item runs at a tiny size, to show it still runs, not to measure anything.
SMOKE = os.environ.get("DAYFLOW_BENCH_SMOKE") == "1"


def scale(full, smoke):
    """``full`` for a measurement, ``smoke`` when the run only checks that the item still runs."""
    return smoke if SMOKE else full


# About 2 KB of tool payload per step, like a tool that returns a page of mail.
TOOL_PAYLOAD_BYTES = 2048
# Cycling through these (their results in the history) lets the offline model
# write its brief in one call after a resume: every tool it needs has answered.
_TOOLS = [("read_inbox", {"limit": 20}), ("read_calendar", {"range": "today"}),
          ("read_calendar", {"range": "week"}), ("read_tasks", {"include_done": False}),
          ("create_task", {"title": "Follow up", "idempotency_key": "mail-m01"})]


@dataclass
class Row:
    """One line of the results table."""

    item: str  # "1 commit", "2 growth", ...
    measure: str
    ours: str
    baseline: str = ""
    ratio: float | None = None  # always ours / baseline: below 1 means ours is smaller or faster
    target: str = ""
    met: bool | None = None  # None: no target for this line
    note: str = ""

    def ratio_text(self) -> str:
        if self.ratio is None:
            return ""
        if self.ratio >= 100:
            return f"{self.ratio:,.0f}x"
        return f"{self.ratio:.2f}x" if self.ratio >= 0.1 else f"{self.ratio:.2g}x"

    def met_text(self) -> str:
        return {True: "yes", False: "NO", None: ""}[self.met]


# -- statistics -------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank on the sorted values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def ms(seconds: float) -> str:
    value = seconds * 1000
    if value >= 100:
        return f"{value:,.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def size(n_bytes: float) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{n_bytes:,.0f} B"


def interleaved(*callables, rounds: int, warmup: int = 3) -> list[list[float]]:
    """Time each callable ``rounds`` times, alternating them, so machine noise hits all alike.

    Returns one list of durations (seconds) per callable.
    """
    for _ in range(warmup):
        for call in callables:
            call()
    timings: list[list[float]] = [[] for _ in callables]
    for i in range(rounds):
        # Alternate who goes first so neither side always runs on a warm cache.
        order = list(enumerate(callables))
        if i % 2:
            order.reverse()
        for index, call in order:
            started = time.perf_counter()
            call()
            timings[index].append(time.perf_counter() - started)
    return timings


# -- the agent-like workload ---------------------------------------------------


def tool_payload(i: int, n_bytes: int = TOOL_PAYLOAD_BYTES) -> str:
    """A tool result's JSON text of about ``n_bytes``: a page of mails, deterministic in ``i``."""
    mails = []
    text = ""
    k = 0
    while len(text) < n_bytes - 40:
        mails.append({"id": f"m{i:05d}{k:02d}", "from": f"person{k}@example.com",
                      "subject": f"Status of item {i}-{k}", "received": "2026-12-02T08:00:00Z",
                      "snippet": "Short note about the project, nothing urgent, see the attached figures.",
                      "unread": k % 2 == 0})
        k += 1
        text = json.dumps({"ok": True, "count": len(mails), "mails": mails}, ensure_ascii=False)
    return text


def agent_step(i: int) -> tuple[list[dict], list[dict]]:
    """Step ``i`` (1-based) of a long agent run: a short assistant turn with one tool call, and its result."""
    name, args = _TOOLS[(i - 1) % len(_TOOLS)]
    tool_id = f"toolu_bench{i:06d}"
    assistant = [{"type": "text", "text": f"Step {i}: checking {name} again before I decide."},
                 {"type": "tool_use", "id": tool_id, "name": name, "input": args}]
    results = [{"type": "tool_result", "tool_use_id": tool_id, "content": tool_payload(i)}]
    return assistant, results


def step_record(i: int, assistant: list[dict]):
    from dayflow_tui.store import StepRecord

    # Token counts grow like a real run's (the whole history is re-read each call).
    return StepRecord(n=i, stop_reason="tool_use", assistant=assistant, input_tokens=1500 + 600 * i,
                      output_tokens=60, cache_read_input_tokens=900 + 600 * i, model="offline",
                      duration_ms=800, request_est_tokens=1500 + 600 * i)


def build_run(store, n_steps: int, *, user_msg: str = "Prepare my day.") -> str:
    """A run with ``n_steps`` committed agent-like steps and no live owner (an interrupted run).

    Built through the store's own functions, inside one outer transaction so a
    10,000-step fixture takes seconds, not minutes of fsyncs.
    """
    run = store.create_run(user_msg, model="offline", max_steps=n_steps + 50, status="running")
    with store.db.atomic():
        for i in range(1, n_steps + 1):
            assistant, results = agent_step(i)
            store.append_step(run.id, step_record(i, assistant))
            store.set_tool_results(run.id, i, results)
    return run.id


# -- files and processes ------------------------------------------------------


@contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"dayflow-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def db_bytes(path: Path) -> int:
    """The database's size on disk, write-ahead log included."""
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def settled_bytes(path: Path) -> int:
    """The database's size once the write-ahead log has been folded in (what the data occupies)."""
    import sqlite3

    conn = sqlite3.connect(str(path))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return db_bytes(path)


def quiet_env(**extra: str) -> dict:
    """A child environment on the offline model, no delay, nothing inherited that changes behaviour."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "DAYFLOW_MODEL", "DAYFLOW_CALL_LOG",
                        "DAYFLOW_FAKE_NOW", "DAYFLOW_DB",
                        # An installed Dayflow runs from compiled bytecode (pip compiles at install): with this
                        # set (as on these machines) an editable checkout compiled every module at every start,
                        # and the start-up items measured the compiler (2.75x the floor, against 1.65x).
                        "PYTHONDONTWRITEBYTECODE")}
    env["DAYFLOW_OFFLINE_DELAY"] = "0"
    env.update(extra)
    return env


def run_quiet(argv: list[str], env: dict, timeout: float = 600) -> float:
    """Run ``argv`` to its end; return its wall time. A failure raises with the child's stderr."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed
