"""One time unit for the tests' deliberate waits: outage windows, stalls, locks held, busy timeouts.

Such a wait is written as a multiple of ``UNIT_S``: 1 s by default (the suite's usual run), 4 s under
``DAYFLOW_SLOW=1`` (a slow or crowded machine, or to give races that only show with long faults more
room). Bounds that only absorb machine load (how late a process may answer) are not made of units:
they stay generous either way.
"""

from __future__ import annotations

import os

UNIT_S = 4.0 if os.environ.get("DAYFLOW_SLOW", "").strip() == "1" else 1.0


def units(n: float) -> float:
    """``n`` time units, in seconds."""
    return n * UNIT_S
