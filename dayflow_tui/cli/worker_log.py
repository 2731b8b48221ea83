"""What ``dayflow worker`` says: its events on stderr (``ops.logs``), a finished run's line on stdout.

The text format keeps the lines the worker always printed
(``dayflow worker: run ID failed: ...``; scripts and the chaos pool read them);
the JSON format has the same events with their fields: ``run_id``,
``worker_id``, ``duration_s`` of the drive, the result's ``status``, ``steps``
and ``calls``.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ..ops import logs
from .driving import show_step

# A worker event's kind -> its log event and level; "started" is the claim (logged by ops.logs at debug).
_LEVELS = {"lost": logging.WARNING, "paused": logging.WARNING, "failed": logging.ERROR, "error": logging.ERROR,
           "outdated": logging.ERROR}
_NAMES = {"lost": "run.lost", "paused": "run.paused", "failed": "run.failed", "error": "worker.store_error",
          "outdated": "worker.outdated"}


class WorkerLog:
    """The worker's lines and events; its threads share one lock, so lines never interleave."""

    def __init__(self, on_event=None) -> None:
        self.output = threading.Lock()
        self._began: dict[str, float] = {}  # run id -> when this worker claimed it (monotonic)
        self._also = on_event  # the metrics count the same events

    def report(self, event) -> None:
        """A ``WorkerEvent`` of ``agent.worker.work``."""
        if self._also is not None:
            self._also(event)
        if event.kind == "started":
            self._began[event.run_id] = time.monotonic()
            return
        began = self._began.pop(event.run_id, None) if event.run_id else None
        took = None if began is None else time.monotonic() - began
        run = f"run {event.run_id} " if event.run_id else ""
        if event.kind == "finished":
            result = event.result
            with self.output:
                print(f"{run}{result.status} · {result.steps} steps · {result.calls} call(s)", flush=True)
            logs.event(logging.INFO, "run.finished", f"dayflow worker: {run}finished: {result.status}",
                       in_text=False, run_id=event.run_id, status=result.status, steps=result.steps,
                       calls=result.calls, duration_s=took)
            return
        with self.output:
            logs.event(_LEVELS.get(event.kind, logging.WARNING), _NAMES.get(event.kind, f"run.{event.kind}"),
                       f"dayflow worker: {run}{event.kind}: {event.message}", run_id=event.run_id,
                       duration_s=took, reason=event.message)

    def print_step(self, event) -> None:
        with self.output:
            print(f"[{event.run_id}] ", end="")
            show_step(event)

    def started(self, concurrency: int, label: str, once: bool, metrics_url: str | None) -> None:
        mode = "until nothing is waiting" if once else "until stopped (Ctrl-C)"
        logs.event(logging.INFO, "worker.started", f"[worker pid {os.getpid()}] {concurrency} thread(s) on "
                   f"{label}, {mode}", concurrency=concurrency, db=label, once=once)
        if metrics_url:
            logs.event(logging.INFO, "worker.metrics", f"[worker pid {os.getpid()}] metrics at {metrics_url}",
                       url=metrics_url)

    def waiting_for_database(self, attempt: int, wait_s: float, why: str) -> None:
        logs.event(logging.WARNING, "db.wait", f"dayflow worker: cannot reach the database ({why}); trying "
                   f"again in {wait_s:.1f} s (attempt {attempt})", attempt=attempt, wait_s=wait_s, reason=why)

    def interrupted(self, *, connected: bool = True) -> None:
        text = ("dayflow worker: stopped; its runs were released for any worker to continue" if connected else
                "dayflow worker: stopped before it reached the database; it held no run")
        logs.event(logging.INFO, "worker.interrupted", text)

    def outdated_at_start(self, why: str) -> None:
        logs.event(logging.ERROR, "worker.outdated", f"dayflow worker: {why}; not started (exit 78)", reason=why)

    def stopped(self, finished: int, failed: int) -> None:
        logs.event(logging.INFO, "worker.stopped", f"[worker pid {os.getpid()}] {finished} run(s) driven, "
                   f"{failed} failed", finished=finished, failed=failed)
