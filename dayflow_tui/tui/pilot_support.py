"""Driving the dashboard headless: the one wait used by tests, benchmarks and the screenshot script."""

from __future__ import annotations

import time
from typing import Callable


async def wait_until(pilot, condition: Callable[[], object], *, timeout: float = 60.0,
                     step: float = 0.05) -> float:
    """Let the app run until ``condition()`` holds; return the wall-clock time (``time.time()``) it first held.

    Raises ``TimeoutError`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {condition}")
        await pilot.pause(step)
    return time.time()
