"""When a fault fires: watching what a ``dayflow`` process announces, from outside it.

The processes under test tell where they are through files they append to:
the offline model's ``DAYFLOW_CALL_LOG`` gets a line as each paid call starts
(``<pid> <messages> <time>``, before the model's delay), and
``DAYFLOW_TEST_TRACE`` gets each phase the process enters (``api``, ``tools``,
``commit``, ``committed``; see ``dayflow_tui/testhook.py``; with
``DAYFLOW_TEST_PAUSE_IN=commit:S`` the process then waits S seconds inside the
write transaction). ``LineWatch`` runs a test's action on such a line, while
the process is still in that moment. The loopback API server signals a call
in flight itself (``LoopbackAPI(on_request=...)``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable


class LineWatch:
    """Call ``action(line)`` for each new line of ``path`` that ``wanted(line)`` accepts; a context manager.

    Polls every few milliseconds from its own thread (the file need not exist
    yet); ``seen`` counts the accepted lines, ``results`` keeps what the action
    returned for each.
    """

    def __init__(self, path: Path, action: Callable[[str], object], *,
                 wanted: Callable[[str], bool] = lambda line: True, poll_s: float = 0.003):
        self.path = Path(path)
        self.action = action
        self.wanted = wanted
        self.poll_s = poll_s
        self.seen = 0
        self.results: list[object] = []
        self._offset = 0
        self._partial = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"watch-{self.path.name}", daemon=True)

    def __enter__(self) -> "LineWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            for line in self._new_lines():
                if self.wanted(line):
                    self.seen += 1
                    self.results.append(self.action(line))

    def _new_lines(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
                self._offset = fh.tell()
        except FileNotFoundError:
            return []
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()  # a line still being written waits for its newline
        return [line for line in lines if line]
