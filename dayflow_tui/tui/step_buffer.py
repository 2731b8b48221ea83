"""Coalesce a drive worker's step events into one message per ~50 ms.

A burst (a response and its tool results commit within milliseconds) becomes
one ``StepCommitted``; a lone event is still delivered within the window, by
a timer, so the UI never waits for the next model call to see a step.
"""

from __future__ import annotations

import threading
from typing import Callable

from ..agent.events import StepEvent
from .messages import StepCommitted

WINDOW_S = 0.05


class StepBuffer:
    def __init__(self, post: Callable[[StepCommitted], object], window: float = WINDOW_S) -> None:
        self._post = post
        self._window = window
        self._lock = threading.Lock()
        self._events: list[StepEvent] = []
        self._timer: threading.Timer | None = None

    def add(self, event: StepEvent) -> None:
        """The loop's ``on_step`` callback (runs on the worker thread)."""
        with self._lock:
            self._events.append(event)
            if self._timer is None:
                self._timer = threading.Timer(self._window, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        """Post what is buffered now (also called once when the worker ends)."""
        with self._lock:
            events, self._events = self._events, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        by_run: dict[str, list[StepEvent]] = {}
        for event in events:
            by_run.setdefault(event.run_id, []).append(event)
        for run_id, run_events in by_run.items():
            self._post(StepCommitted(run_id, run_events))
