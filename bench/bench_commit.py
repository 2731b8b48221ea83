"""1. Per-step commit: ``store.append_step`` against the raw sqlite3 floor.

Both sides commit the same step to the same schema with the same pragmas
(WAL, ``synchronous=FULL``): one transaction that inserts the step row and
adds its tokens to the run (with the lease check and heartbeat the loop
uses). The raw side is the physical limit: the least SQL that does that job,
through the stdlib driver, with the JSON encoding both sides must do.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from bench.common import Row, scale, agent_step, interleaved, median, ms, pct, step_record, workdir

_RAW_INSERT = (
    "INSERT INTO steps (run_id, n, stop_reason, assistant, tool_results, input_tokens, output_tokens, "
    "cache_creation_input_tokens, cache_read_input_tokens, model, duration_ms, request_est_tokens, "
    "compacted_est_tokens, created_at) VALUES (?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_RAW_UPDATE = (
    "UPDATE runs SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, "
    "cache_creation_tokens = cache_creation_tokens + ?, cache_read_tokens = cache_read_tokens + ?, "
    "step_count = step_count + 1, heartbeat_at = ?, updated_at = ? WHERE id = ? AND lease_token = ?")


class RawCommitter:
    """The same transaction as ``append_step`` in plain sqlite3."""

    def __init__(self, path: Path, run_id: str, lease_token: str):
        from dayflow_tui.store.dialect import SqliteDialect

        self.conn = sqlite3.connect(str(path), isolation_level=None, timeout=10)
        for name, value in SqliteDialect.PRAGMAS.items():
            self.conn.execute(f"PRAGMA {name} = {value}")
        self.run_id = run_id
        self.token = lease_token

    def commit(self, step) -> None:
        from dayflow_tui import clock

        now = clock.iso()
        blocks = json.dumps(step.assistant, ensure_ascii=False, separators=(",", ":"))
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(_RAW_INSERT, (self.run_id, step.n, step.stop_reason, blocks, step.input_tokens,
                                      step.output_tokens, step.cache_creation_input_tokens,
                                      step.cache_read_input_tokens, step.model, step.duration_ms,
                                      step.request_est_tokens, step.compacted_est_tokens, now))
            cur.execute(_RAW_UPDATE, (step.input_tokens, step.output_tokens, step.cache_creation_input_tokens,
                                      step.cache_read_input_tokens, now, now, self.run_id, self.token))
            if cur.rowcount != 1:
                raise RuntimeError("lease lost")
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()


def measure(rounds: int = 400) -> dict:
    """Median and p99 of both sides, steps alternated one by one."""
    from dayflow_tui.store import open_store

    with workdir("commit") as tmp:
        # The raw side gets its own file with the identical schema and an identical leased run.
        # (Made first: the models are bound to the most recently opened store.)
        raw_store = open_store(tmp / "raw.db")
        raw_run, raw_lease = raw_store.create_claimed_run("bench", model="offline", max_steps=10**6)
        raw_store.close()
        raw = RawCommitter(tmp / "raw.db", raw_run.id, raw_lease.token)
        ours = open_store(tmp / "ours.db")
        run, lease = ours.create_claimed_run("bench", model="offline", max_steps=10**6)
        counters = {"ours": 0, "raw": 0}

        def ours_step() -> None:
            counters["ours"] += 1
            i = counters["ours"]
            ours.append_step(run.id, step_record(i, agent_step(i)[0]), lease=lease)

        def raw_step() -> None:
            counters["raw"] += 1
            i = counters["raw"]
            raw.commit(step_record(i, agent_step(i)[0]))

        ours_t, raw_t = interleaved(ours_step, raw_step, rounds=rounds, warmup=20)
        raw.close()
        ours.close()
    return {"ours": ours_t, "raw": raw_t}


def run(quick: bool = False) -> list[Row]:
    found = measure(rounds=scale(150 if quick else 600, 10))
    ours, raw = found["ours"], found["raw"]
    ratio = median(ours) / median(raw)
    overhead_us = (median(ours) - median(raw)) * 1e6
    return [
        Row("1 commit", "append_step, median (step row + run totals, 1 tx, synchronous=FULL)",
            ms(median(ours)), f"raw sqlite3 {ms(median(raw))}", ratio, "<= 1.5x", ratio <= 1.5,
            f"{overhead_us:+.0f} us per step over raw"),
        Row("1 commit", "append_step, p99", ms(pct(ours, 99)), f"raw sqlite3 {ms(pct(raw, 99))}",
            pct(ours, 99) / pct(raw, 99)),
    ]
