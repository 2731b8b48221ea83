"""6. Memory: the dashboard's peak RSS with 100,000 runs and a 500-step transcript open.

Measured by ``bench_dashboard``'s probes (a fresh process each, ``VmHWM``),
against the same app on 10 runs with a 10-step transcript open.
"""

from __future__ import annotations

from bench.bench_dashboard import memory_rows
from bench.common import Row


def run(quick: bool = False) -> list[Row]:
    return memory_rows(quick)
