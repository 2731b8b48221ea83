"""Back-pressure from the model API (429 rate limited, 529 overloaded): wait, never fail.

When the SDK's own retries are spent on a 429 or a 529, the run is not
broken and its attempt did nothing wrong: the loop releases it ``queued``
with ``not_before`` set to the wait computed here, without counting the
attempt, so any worker takes it again after the wait. The wait is the
server's ``retry-after-ms`` / ``retry-after`` plus jitter (so a fleet of
released runs does not come back on the same tick), or without one an
exponential default (5 s doubling per back-pressure reply in a row in this
process, at most 2 minutes) with jitter. Workers pause their claims for the
wait (``SharedPause``), and the CLI's own commands wait it out within the
``rate_limit_wait_s`` bound (``wait_out``).
"""

from __future__ import annotations

import math
import random
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any, Callable

from .. import clock
from ..config.errors import RateLimited

BACK_PRESSURE = {429: "rate limited", 529: "overloaded"}
DEFAULT_FIRST_S = 5.0
DEFAULT_MOST_S = 120.0
# A retry-after beyond this is not believed (a wrong header must not park a run for days).
HEADER_MOST_S = 3600.0

_lock = threading.Lock()
_streak = 0  # back-pressure replies in a row in this process (API limits are per key, not per run)


def is_back_pressure(status: Any) -> bool:
    return status in BACK_PRESSURE


def retry_after_s(exc: BaseException) -> float | None:
    """The server's wait from an SDK error's response headers, in seconds (None: it sent none we can read).

    ``retry-after-ms`` (milliseconds) wins over ``retry-after`` (seconds, or an HTTP date).
    """
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        raw_ms = headers.get("retry-after-ms")
        if raw_ms is not None:
            value = float(raw_ms) / 1000.0
            return value if math.isfinite(value) and value >= 0 else None
        raw = headers.get("retry-after")
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = (parsedate_to_datetime(raw) - clock.now()).total_seconds()
        return max(value, 0.0) if math.isfinite(value) else None
    except (TypeError, ValueError, OverflowError):
        return None


def next_wait(retry_after: float | None) -> float:
    """Seconds to wait before the run's next call, jitter included; counts one back-pressure reply."""
    global _streak
    with _lock:
        _streak += 1
        streak = _streak
    if retry_after is not None:
        base = min(retry_after, HEADER_MOST_S)
        return base + random.uniform(0.0, min(0.25 * base + 0.5, 30.0))
    base = min(DEFAULT_FIRST_S * 2 ** (streak - 1), DEFAULT_MOST_S)
    return base * random.uniform(1.0, 1.25)


def call_went_through() -> None:
    """A call was answered: the next back-pressure reply starts the default wait from the beginning."""
    global _streak
    if _streak:
        with _lock:
            _streak = 0


def reason(status: int, wait_s: float) -> str:
    """Why the run waits, as ``dayflow runs`` and the dashboard show it."""
    return f"{BACK_PRESSURE.get(status, 'pushed back')} ({status}), retry after {math.ceil(wait_s)} s"


class SharedPause:
    """One pause for every thread of a worker: after back-pressure no thread claims until it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until = 0.0

    def hold(self, seconds: float) -> None:
        with self._lock:
            self._until = max(self._until, time.monotonic() + seconds)

    def left(self) -> float:
        with self._lock:
            return max(self._until - time.monotonic(), 0.0)


def wait_out(start: Callable[[], Any], again: Callable[[str], Any], *, bound_s: float,
             say: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> Any:
    """``start()``; while the API pushes back, wait and ``again(run_id)``, waiting ``bound_s`` in all at most.

    Past the bound (or with a bound of 0) the ``RateLimited`` is raised with one line saying what
    happens to the run: it stays queued, and a worker or a later resume continues it.
    """
    waited = 0.0
    attempt = start
    while True:
        try:
            return attempt()
        except RateLimited as exc:
            wait = max(exc.wait_s, 0.0)
            if exc.run_id is None or waited + wait > bound_s:
                raise RateLimited(_given_up(exc, waited, bound_s), status=exc.status, wait_s=wait,
                                  run_id=exc.run_id) from None
            say(f"[rate limited] {exc.status}: waiting {math.ceil(wait)} s before trying again "
                f"(bound {bound_s:g} s)")
            sleep(wait)
            waited += wait
            run_id = exc.run_id
            attempt = lambda: again(run_id)  # noqa: E731


def _given_up(exc: RateLimited, waited: float, bound_s: float) -> str:
    what = f"run {exc.run_id}: the model API pushed back ({exc.status} {BACK_PRESSURE.get(exc.status, 'busy')})"
    if bound_s <= 0:
        why = "not waiting (rate_limit_wait_s is 0)"
    else:
        why = (f"waiting {math.ceil(exc.wait_s)} s more would pass the wait bound "
               f"(rate_limit_wait_s {bound_s:g} s, waited {math.ceil(waited)} s)")
    if exc.run_id is None:
        return f"{what}; {why}"
    return (f"{what}; {why}. The run is queued, not failed: a `dayflow worker` takes it after "
            f"{math.ceil(exc.wait_s)} s, or run `dayflow resume {exc.run_id}`")
