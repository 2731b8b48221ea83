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
