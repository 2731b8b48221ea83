"""Shared limits on the step path: ask the store for a slot and the bucket's room before a paid call, free it
after the reply is committed (or the call failed), and empty the bucket for everyone on a 429.

Off (no ``limits`` for the run's model in the settings) the driver holds no ``SharedLimit`` and nothing here
runs: no query on the step path. Waiting never makes a call: it sleeps in short, jittered pieces, watching the
run's cancel, its lease and the worker's stop, and asks again; past ``limit_wait_s`` the attempt backs off as
after a 529 (the run is queued again, not failed). The store's side (buckets, slots, expiry) is
``store/tables/limits.py``.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from typing import Callable

from ..config import settings
from ..config.errors import RateLimited
from ..redaction import key_fingerprint
from ..store import Lease, Store
from . import backpressure, telemetry

# The longest nap between two asks (the store's answer may say "wait 40 s"; a cancel is seen sooner).
NAP_MOST_S = 5.0
# How often a nap looks at the cancel, the lease and the worker's stop.
WATCH_EVERY_S = 0.25


class SharedLimit:
    """The shared limits of one run's model and API key, and the slot of its call in flight (if any)."""

    def __init__(self, store: Store, model: str, limits: dict[str, int], *, wait_most_s: float,
                 slot_expiry_s: float, key: str):
        self.store = store
        self.model = model
        self.limits = limits
        self.wait_most_s = wait_most_s
        self.slot_expiry_s = slot_expiry_s
        self.key = key
        self.held: tuple[str, int] | None = None  # (slot token, tokens granted) of the call in flight
        self.lease: Lease | None = None

    def acquire(self, lease: Lease, *, step: int, tokens: int, check: Callable[[], None],
                should_stop: Callable[[], bool] | None = None) -> bool:
        """Wait (bounded) until the limit lets one call of ``tokens`` start; True when it may start now.

        False: the worker is stopping, so no call starts and the run is released as at a step boundary.
        ``check`` raises when the run was cancelled or its lease lost. Past ``limit_wait_s`` this raises
        ``RateLimited`` (status 529): the run backs off and is queued again, its attempt not counted."""
        slot = uuid.uuid4().hex
        started = time.monotonic()
        said = False
        while True:
            check()
            answer = self.store.acquire_limit(self.model, self.key, limits=self.limits, tokens=tokens,
                                              run_id=lease.run_id, slot=slot, slot_expiry_s=self.slot_expiry_s)
            if answer.granted:
                self.held, self.lease = (slot, tokens), lease
                if self.limits.get("max_concurrent"):
                    lease.limit_slot = slot  # the lease's heartbeat renews it from now on
                if said:
                    telemetry.note("limit.waited", run_id=lease.run_id, step=step, model=self.model,
                                   wait_s=time.monotonic() - started)
                return True
            waited = time.monotonic() - started
            if waited >= self.wait_most_s:
                wait = backpressure.next_wait(None)
                telemetry.note("limit.gave_up", run_id=lease.run_id, step=step, model=self.model, wait_s=waited,
                               why=answer.why)
                raise RateLimited(f"the shared limit of {self.model} stayed full for {math.ceil(waited)} s "
                                  f"(limit_wait_s {self.wait_most_s:g}): {answer.why}", status=529, wait_s=wait)
            if not said:
                said = True  # one line per wait, not one per ask
                telemetry.note("limit.wait", run_id=lease.run_id, step=step, model=self.model, why=answer.why,
                               wait_s=answer.wait_s)
            nap = min(answer.wait_s, NAP_MOST_S, self.wait_most_s - waited) * random.uniform(0.7, 1.3)
            if not _nap(max(nap, 0.05), check, should_stop):
                return False

    def release(self, *, used_tokens: int | None = None) -> None:
        """The call in flight is over: its reply committed (``used_tokens``: what it really used) or lost."""
        if self.held is None:
            return
        slot, granted = self.held
        self.held = None
        if self.lease is not None:
            self.lease.limit_slot = None
        extra = (used_tokens - granted) if used_tokens is not None and self.limits.get("tokens_per_minute") else 0
        try:
            self.store.release_limit(self.model, self.key, slot, extra_tokens=extra)
        except Exception:  # noqa: BLE001 - a slot the database did not free expires after slot_expiry_s
            pass

    def pushed_back(self, wait_s: float) -> None:
        """The API answered 429: every worker of this (model, key) waits ``wait_s``, then starts slowly."""
        try:
            self.store.back_off_limit(self.model, self.key, wait_s=wait_s, limits=self.limits)
        except Exception:  # noqa: BLE001 - this process still backs off on its own (backpressure)
            pass


def _nap(seconds: float, check: Callable[[], None], should_stop: Callable[[], bool] | None) -> bool:
    """Sleep ``seconds`` in short pieces; False as soon as the worker is stopping (``check`` raises on cancel)."""
    end = time.monotonic() + seconds
    while True:
        check()
        if should_stop is not None and should_stop():
            return False
        left = end - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(left, WATCH_EVERY_S))


def shared_limit_for(store: Store, model: str) -> SharedLimit | None:
    """The run's shared limit, or None when none is configured for ``model`` (then nothing is asked)."""
    chosen = settings.current()
    limits = chosen.limits.get(model)
    if not limits:
        return None
    return SharedLimit(store, model, limits, wait_most_s=chosen.limit_wait_s,
                       slot_expiry_s=chosen.limit_slot_expiry_s, key=key_fingerprint())
