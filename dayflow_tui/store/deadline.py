"""A client-side deadline for one try of a store call on a network database.

A server that stops answering without closing the connection (a frozen
host, a paused VM, a proxy or NAT that black-holes the flow) leaves the
driver blocked in ``recv`` for as long as the kernel keeps the socket: the
reconnect policy never gets to run, and the commit of a paid reply never
reaches its spool. The driver has no per-query client timeout, and the
server's ``statement_timeout`` cannot help when the server never sees the
query. So one watchdog thread per process shuts the socket of a try that
outlives its deadline: the driver then fails at once with a connection
error, which the reconnect policy treats like any dropped session (a fresh
connection, or, once its window has closed, one readable error).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from typing import Callable, Iterator

# A try is never cut sooner than this, however little of its window is left: a healthy round trip
# must get the chance to finish.
MIN_TRY_S = 1.0


class Watchdog:
    """Calls ``cut()`` for every armed try whose deadline passes before it is disarmed."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, Callable[[], None]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def arm(self, seconds: float, cut: Callable[[], None]) -> int:
        token = next(self._ids)
        with self._lock:
            if self._thread is None or self._pid != os.getpid():  # started lazily, and anew after a fork
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._watch, name="dayflow-db-deadline", daemon=True)
                self._thread.start()
            self._armed[token] = cut
            heapq.heappush(self._heap, (time.monotonic() + seconds, token))
            self._lock.notify()
        return token

    def disarm(self, token: int) -> bool:
        """False when the try was cut already."""
        with self._lock:
            return self._armed.pop(token, None) is not None

    def _watch(self) -> None:
        while True:
            with self._lock:
                while not self._heap or self._heap[0][1] not in self._armed:
                    if self._heap:
                        heapq.heappop(self._heap)  # disarmed in time
                        continue
                    self._lock.wait()
                due, token = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                heapq.heappop(self._heap)
                cut = self._armed.pop(token)
            try:
                cut()
            except Exception:  # a socket already gone: the try has failed or finished by itself
                pass


_watchdog = Watchdog()


class TryCut(Exception):
    """Why a try failed: the watchdog cut its connection after ``seconds`` without an answer."""

    def __init__(self, seconds: float):
        super().__init__(f"no answer from the database within {seconds:.1f} s (the connection was cut)")
        self.seconds = seconds


def shut_socket(fd: int) -> None:
    """Shut down the socket behind ``fd`` for both directions, from any thread.

    ``shutdown`` acts on the socket, not the descriptor, so a duplicate is
    enough and the driver's own descriptor stays valid until it closes it.
    """
    dup = socket.socket(fileno=os.dup(fd))
    try:
        dup.shutdown(socket.SHUT_RDWR)
    finally:
        dup.close()


@contextlib.contextmanager
def try_deadline(seconds: float, find_socket: Callable[[], int | None]) -> Iterator[dict]:
    """Cut this try's connection if it has not finished within ``seconds``.

    ``find_socket`` runs on the watchdog thread at the deadline and names the
    descriptor of the calling thread's connection (None: no connection open).
    The yielded dict's ``"cut"`` says afterwards whether the cut happened.
    """
    seen = {"cut": False}

    def cut() -> None:
        fd = find_socket()
        if fd is not None and fd >= 0:
            seen["cut"] = True
            shut_socket(fd)

    token = _watchdog.arm(max(seconds, MIN_TRY_S), cut)
    try:
        yield seen
    finally:
        _watchdog.disarm(token)
