"""Standalone (not an item): what the shared limits (#29) cost per step, on vs off, interleaved.

A whole run of the built-in brief on the offline model (no network), driven in this process on a SQLite
file (or ``--db`` a PostgreSQL URL), with ``limits`` off and with every limit on for the model (max_concurrent,
requests_per_minute, tokens_per_minute all far above what one run needs, so nothing waits): the difference is
the limiter's own work, an acquire and a release per step. Prints ms per step for each and the difference.

    python bench/shared_limits.py [--rounds 20] [--db URL]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ON = json.dumps({"offline": {"max_concurrent": 1000, "requests_per_minute": 10_000_000,
                             "tokens_per_minute": 1_000_000_000}})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--db", default=None)
    args = parser.parse_args()
    os.environ["DAYFLOW_OFFLINE_DELAY"] = "0"
    os.environ.pop("DAYFLOW_LIMITS", None)
    from dayflow_tui.agent.offline import OfflineClient
    from dayflow_tui.agent.runs import run_brief
    from dayflow_tui.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(args.db or str(Path(tmp) / "bench.db"))

        def one(limits: str | None) -> tuple[float, int]:
            if limits is None:
                os.environ.pop("DAYFLOW_LIMITS", None)
            else:
                os.environ["DAYFLOW_LIMITS"] = limits
            started = time.perf_counter()
            result = run_brief(store, model="offline", client=OfflineClient(delay=0))
            return time.perf_counter() - started, result.steps

        for _ in range(3):  # warm-up
            one(None), one(ON)
        off, on = [], []
        for i in range(args.rounds):
            order = [(None, off), (ON, on)]
            if i % 2:
                order.reverse()
            for limits, into in order:
                seconds, steps = one(limits)
                into.append(seconds * 1000 / max(steps, 1))
        store.close()
    off_ms, on_ms = statistics.median(off), statistics.median(on)
    print(f"{'backend':10} {'off ms/step':>12} {'on ms/step':>12} {'on - off':>10}")
    print(f"{'pg' if args.db else 'sqlite':10} {off_ms:12.2f} {on_ms:12.2f} {on_ms - off_ms:+10.2f}")


if __name__ == "__main__":
    main()
