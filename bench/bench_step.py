"""10. A full step: the response commit and the tool-results commit, through the real ``Store``.

Ours is what the loop does for every step that calls a tool: ``append_step``
(the step row plus the run's totals, lease-checked, one transaction) and then
``set_tool_results`` (lease check, the results, one transaction). The baseline
is the same two transactions in raw ``sqlite3`` on an identical schema with
the same pragmas (WAL, ``synchronous=FULL``): item 1's ``RawCommitter`` plus
the least SQL that records the results under the lease. Both sides take turns
step by step (``interleaved``), each half timed too, so a miss names its half.
The wall-clock ratio moves with the disk: each commit waits on an fsync that
takes 0.3 ms on a quiet disk and 5+ ms when the machine's I/O is busy, which
dilutes the store's own cost; the CPU time per step (``process_time``) is the
store's cost without the disk, and is reported beside it.

``python -m bench.bench_step --profile`` also prints where our side's time goes
(cProfile of 300 full steps, by own time).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_commit import RawCommitter  # noqa: E402
from bench.common import Row, scale, agent_step, interleaved, median, ms, pct, step_record, workdir  # noqa: E402

TARGET = 1.3

_RAW_LEASE_CHECK = "UPDATE runs SET updated_at = ? WHERE id = ? AND lease_token = ?"
_RAW_RESULTS = ("UPDATE steps SET tool_results = ?, tools_done_at = ? "
                "WHERE run_id = ? AND n = ? AND tool_results IS NULL")


class RawStep(RawCommitter):
    """Item 1's raw response commit, plus the tool-results commit done the same way."""

    def record_results(self, n: int, results: list[dict]) -> None:
        from dayflow_tui import clock

        now = clock.iso()
        encoded = json.dumps(results, ensure_ascii=False, separators=(",", ":"))
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(_RAW_LEASE_CHECK, (now, self.run_id, self.token))
            if cur.rowcount != 1:
                raise RuntimeError("lease lost")
            cur.execute(_RAW_RESULTS, (encoded, now, self.run_id, n))
            if cur.rowcount != 1:
                raise RuntimeError("results already recorded")
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise


class _Sides:
    """Both sides on fresh files, each with a leased run; counts steps and times each half."""

    def __init__(self, tmp: Path):
        from dayflow_tui.store import open_store

        # The raw side's file gets the identical schema and an identical leased run, made by the store.
        raw_store = open_store(tmp / "raw.db")
        raw_run, raw_lease = raw_store.create_claimed_run("bench", model="offline", max_steps=10**6)
        raw_store.close()
        self.raw = RawStep(tmp / "raw.db", raw_run.id, raw_lease.token)
        self.store = open_store(tmp / "ours.db")
        self.run, self.lease = self.store.create_claimed_run("bench", model="offline", max_steps=10**6)
        self.n = {"ours": 0, "raw": 0}
        self.halves: dict[str, list[float]] = {"ours response": [], "ours results": [],
                                               "raw response": [], "raw results": []}
        # CPU time of each full step: what the store adds is CPU; the fsyncs both sides wait on are
        # the disk's, and they grow with the machine's I/O load while the CPU cost does not.
        self.cpu: dict[str, list[float]] = {"ours": [], "raw": []}

    def ours(self) -> None:
        import time

        self.n["ours"] += 1
        i = self.n["ours"]
        assistant, results = agent_step(i)
        cpu = time.process_time()
        started = time.perf_counter()
        self.store.append_step(self.run.id, step_record(i, assistant), lease=self.lease)
        middle = time.perf_counter()
        self.store.set_tool_results(self.run.id, i, results, lease=self.lease)
        self.halves["ours response"].append(middle - started)
        self.halves["ours results"].append(time.perf_counter() - middle)
        self.cpu["ours"].append(time.process_time() - cpu)

    def raw_step(self) -> None:
        import time

        self.n["raw"] += 1
        i = self.n["raw"]
        assistant, results = agent_step(i)
        cpu = time.process_time()
        started = time.perf_counter()
        self.raw.commit(step_record(i, assistant))
        middle = time.perf_counter()
        self.raw.record_results(i, results)
        self.halves["raw response"].append(middle - started)
        self.halves["raw results"].append(time.perf_counter() - middle)
        self.cpu["raw"].append(time.process_time() - cpu)

    def close(self) -> None:
        self.raw.close()
        self.store.close()


def measure(rounds: int = 400) -> dict:
    with workdir("step") as tmp:
        sides = _Sides(tmp)
        ours, raw = interleaved(sides.ours, sides.raw_step, rounds=rounds, warmup=20)
        halves = {k: v[-rounds:] for k, v in sides.halves.items()}
        cpu = {f"cpu {k}": v[-rounds:] for k, v in sides.cpu.items()}
        # What the search index still owes at the end (its follow-up runs every FLUSH_EVERY commits and
        # when a run ends or is given up): counted into the mean below, so the index is paid for in full.
        import time

        started = time.perf_counter()
        sides.store.index_pending(sides.run.id)
        tail = time.perf_counter() - started
        sides.close()
    return {"ours": ours, "raw": raw, **halves, **cpu, "index tail": tail}


def run(quick: bool = False) -> list[Row]:
    found = measure(rounds=scale(150 if quick else 600, 10))
    ours, raw = found["ours"], found["raw"]
    ratio = median(ours) / median(raw)
    rows = [
        Row("10 full step", "append_step + set_tool_results, median (2 tx, synchronous=FULL, ~2.4 KB JSON)",
            ms(median(ours)), f"raw sqlite3 {ms(median(raw))}", ratio, f"<= {TARGET}x", ratio <= TARGET,
            f"{(median(ours) - median(raw)) * 1e6:+.0f} us per step over raw"),
        Row("10 full step", "the same, p99", ms(pct(ours, 99)), f"raw sqlite3 {ms(pct(raw, 99))}",
            pct(ours, 99) / pct(raw, 99)),
    ]
    # The mean carries the search index's follow-up transactions (one per 32 steps here, plus what was
    # left at the end), which the median steps around: the full price of "search on".
    mean_ours = (sum(ours) + found["index tail"]) / len(ours)
    mean_raw = sum(raw) / len(raw)
    rows.append(Row("10 full step", "mean, the search index's follow-up included (every 32 steps + the rest)",
                    ms(mean_ours), f"raw sqlite3 {ms(mean_raw)}", mean_ours / mean_raw, f"<= {TARGET}x",
                    mean_ours / mean_raw <= TARGET, "the index is written after the commit, in batches"))
    cpu_ours, cpu_raw = median(found["cpu ours"]), median(found["cpu raw"])
    rows.append(Row("10 full step", "CPU time per full step, median (the disk's fsync left out)", ms(cpu_ours),
                    f"raw sqlite3 {ms(cpu_raw)}", cpu_ours / cpu_raw, "", None,
                    f"{(cpu_ours - cpu_raw) * 1e6:+.0f} us of CPU per step over raw"))
    for half, what in (("response", "append_step alone"), ("results", "set_tool_results alone")):
        mine, floor = found[f"ours {half}"], found[f"raw {half}"]
        rows.append(Row("10 full step", f"{what}, median (same rounds)", ms(median(mine)),
                        f"raw sqlite3 {ms(median(floor))}", median(mine) / median(floor), "", None,
                        f"{(median(mine) - median(floor)) * 1e6:+.0f} us"))
    return rows


def profile(steps: int = 300) -> str:
    """Where our side's time goes: cProfile of ``steps`` full steps, by own time."""
    import cProfile
    import io
    import pstats

    with workdir("step-profile") as tmp:
        sides = _Sides(tmp)
        for _ in range(20):
            sides.ours()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(steps):
            sides.ours()
        profiler.disable()
        sides.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(35)
    return out.getvalue()


if __name__ == "__main__":
    from bench.run_all import table

    print(table(run(quick="--quick" in sys.argv)))
    if "--profile" in sys.argv:
        print(profile())
