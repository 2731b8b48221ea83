"""``dayflow metrics``: the fleet's database-derived gauges once, in Prometheus' text format (for cron)."""

from __future__ import annotations

import argparse
import sys

from ...config.errors import StoreError
from ..opening import open_for_reading


def cmd_metrics(args: argparse.Namespace) -> int:
    from ...ops.gauges import text_exposition
    from ...ops.metrics import require_client

    require_client()  # one line before anything is opened
    store = open_for_reading(args)
    text, answered = text_exposition(store)
    sys.stdout.write(text)
    if not answered:
        raise StoreError(f"{store.label}: the database did not answer; dayflow_store_up is 0")
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    """``dayflow workers``: each worker process seen in the last day, alive first, with the runs it holds."""
    from ...safe_text import printable, printable_json
    from ...views.workers import worker_document, worker_lines

    store = open_for_reading(args)
    lines = worker_lines(store)
    if args.json:
        print(printable_json([worker_document(line) for line in lines]))
        return 0
    if not lines:
        print("no workers in the last day (start one: dayflow worker)")
        return 0
    for line in lines:
        row = line.row
        print(printable(f"{row.id}  {row.state:<7}  {row.host} pid {row.pid}  v{row.version}  "
                        f"started {row.started_at[:19]}  beat {line.beat}  runs {line.held}  done {row.runs_done}"))
    return 0
