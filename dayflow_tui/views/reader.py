"""The dashboard's reader: one thread that runs its reads in order, on one database connection.

Every screen submits its reads here (a ``views`` function as the job) and
gets the frozen answer back in a message; the UI thread never touches the
database. Nothing here imports Textual.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

from ..store import Store


class Reader:
    """One thread that runs the dashboard's reads in order, on one database connection.

    ``submit(key, job, done)`` queues ``job``; ``done(result, error)`` is
    called on the reader's thread (it posts a message: ``post_message`` is
    thread-safe). A job queued under a key that is already waiting replaces
    it, so a stalled database leaves one poll queued, not one per tick.
    A thread of its own (not a worker per read) keeps one connection for
    every read: on PostgreSQL a connection per poll would cost more than the
    poll.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: "queue.Queue[str | None]" = queue.Queue()
        self._jobs: dict[str, tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.busy_with: str | None = None  # the key of the job running now

    def submit(self, key: str, job: Callable[[], Any], done: Callable[[Any, BaseException | None], None]) -> None:
        with self._lock:
            if self._closed:
                return
            fresh = key not in self._jobs
            self._jobs[key] = (job, done)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dayflow-dashboard-reader", daemon=True)
                self._thread.start()
        if fresh:
            self._queue.put(key)

    def pending(self, key: str) -> bool:
        """Is a job under ``key`` queued or running?"""
        with self._lock:
            return key in self._jobs or self.busy_with == key

    def idle(self) -> bool:
        """Nothing queued and nothing running (tests wait for this before they look)."""
        with self._lock:
            return not self._jobs and self.busy_with is None and self._queue.empty()

    def _run(self) -> None:
        try:
            while True:
                key = self._queue.get()
                if key is None:
                    return
                with self._lock:
                    job, done = self._jobs.pop(key, (None, None))
                    self.busy_with = key
                if job is None:
                    continue
                try:
                    result, error = job(), None
                except BaseException as exc:  # handed to the screen, which says so; the reader goes on
                    result, error = None, exc
                    self.store.close_thread_connection()  # a dropped connection is not reused
                finally:
                    with self._lock:
                        self.busy_with = None
                try:
                    done(result, error)
                except Exception:  # the app is closing: nobody is left to tell
                    pass
        finally:
            self.store.close_thread_connection()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._jobs.clear()
        self._queue.put(None)
