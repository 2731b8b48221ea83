"""Crash-test hooks: inert unless their environment variables are set.

The crash harness (tests/crash_harness.py) kills real processes at random
moments. Two variables let it aim and tell where a kill landed:

- ``DAYFLOW_TEST_TRACE=FILE``: append the name of each phase the process
  enters (``api``, ``tools``, ``commit``, ``committed``) to FILE, one line each.
- ``DAYFLOW_TEST_PAUSE_IN=PHASE:SECONDS[,PHASE:SECONDS]``: sleep that long
  on entering PHASE, widening the window a kill can land in (``commit``
  pauses inside the write transaction, before COMMIT).
"""

from __future__ import annotations

import os
import time


def schema_ahead() -> bool:
    """``DAYFLOW_TEST_SCHEMA_AHEAD=1``: this process is "the next Dayflow", whose schema has one more (harmless,
    additive) migration than this code's (``store.schema``): the rolling-upgrade tests migrate a database
    past the workers' code with it, as a real upgrade would."""
    return os.environ.get("DAYFLOW_TEST_SCHEMA_AHEAD") == "1"


def pause_point(phase: str) -> None:
    trace = os.environ.get("DAYFLOW_TEST_TRACE")
    if trace:
        with open(trace, "a", encoding="utf-8") as fh:
            fh.write(phase + "\n")
    for item in os.environ.get("DAYFLOW_TEST_PAUSE_IN", "").split(","):
        name, _, seconds = item.partition(":")
        if name.strip() == phase and seconds:
            time.sleep(float(seconds))
