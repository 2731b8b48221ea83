"""A progress bar on stderr for the store's long work (``on_progress(done, total)`` callbacks).

The store reports and prints nothing; a front end that builds or migrates
an index hands it one of these. It draws only when stderr is a terminal,
at most ten times a second, and ends its line when the work is done (or,
as a context manager, when the work stops short).
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class ProgressBar:
    def __init__(self, title: str, stream: TextIO | None = None, *, unit: str = "steps") -> None:
        self.title = title
        self.stream = stream
        self.unit = unit
        self.done = 0
        self.total = 0
        self._drawn_at = 0.0
        self._open_line = False  # a bar is drawn and its line not yet ended

    @classmethod
    def for_stderr(cls, title: str) -> "ProgressBar":
        stream = sys.stderr if sys.stderr is not None and sys.stderr.isatty() else None
        return cls(title, stream)

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        if self.stream is None:
            return
        if done >= total:
            self._draw()
            self._end_line()
        elif time.monotonic() - self._drawn_at >= 0.1:
            self._draw()

    def _draw(self) -> None:
        self._drawn_at = time.monotonic()
        share = self.done / self.total if self.total else 1.0
        bar = "#" * int(share * 30)
        self.stream.write(f"\r{self.title} [{bar:<30}] {share:4.0%}  {self.done:,}/{self.total:,} {self.unit}")
        self.stream.flush()
        self._open_line = True

    def _end_line(self) -> None:
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.stream is not None:
            self._end_line()
