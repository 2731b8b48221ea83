"""A real ``dayflow worker`` process for the operating tests: started, its stderr read as it comes, stopped."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time

from .conftest import dayflow_cmd


class WorkerProcess:
    """``dayflow worker ARGS`` in the background; ``lines`` holds its stderr so far, ``wait_for`` a line."""

    def __init__(self, *args: str, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(dayflow_cmd("worker", *args), env={**os.environ, **(env or {})},
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: list[str] = []
        self.out: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stderr, self.lines, True), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stdout, self.out, False), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self, stream, into: list[str], tell: bool) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))
            if tell:
                self._new.put(line)

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match:
        """The first stderr line (so far or to come) matching ``pattern``."""
        found = re.compile(pattern)
        seen = 0
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines[seen:]:
                match = found.search(line)
                if match:
                    return match
            seen = len(self.lines)
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and self._new.empty():
                raise AssertionError(f"no stderr line matched {pattern!r}; stderr so far:\n" + "\n".join(self.lines))
            try:
                self._new.get(timeout=min(left, 0.5))
            except queue.Empty:
                pass

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (each run released at its next step boundary), then wait for the exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=5)
        return code
