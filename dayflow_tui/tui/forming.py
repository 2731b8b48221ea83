"""A reply as it streams in, for the transcript's live line: gathered on the drive worker's thread, posted
to the UI at most every ~50 ms, drawn as a few lines (text as it is written, thinking folded to its size, a
tool call's arguments forming).

Never stored: the committed step replaces it. Pieces are the model's text, so they are drawn as plain
text with every terminal control shown as an escape (``safe_text.printable``), never as markup.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from ..agent.streaming import ReplyDelta
from ..safe_text import printable

WINDOW_S = 0.05
TAIL_CHARS = 2000  # what is kept of a block's text: the live line shows only its end


@dataclass(frozen=True)
class FormingBlock:
    kind: str  # "text", "thinking", "tool_use", "server_tool_use", ...
    name: str  # a tool call's name ("" for others)
    text: str  # the end of what has arrived (TAIL_CHARS at most)
    size: int  # characters arrived in all


@dataclass(frozen=True)
class FormingReply:
    run_id: str
    n: int
    blocks: tuple[FormingBlock, ...]

    def lines(self, width: int, most: int = 4) -> list[str]:
        """At most ``most`` lines of at most ``width`` characters: the newest of what is arriving."""
        out: list[tuple[str, str]] = []  # (a head kept whole, the text whose newest end is shown)
        for block in self.blocks:
            if block.kind == "thinking":
                out.append((f"thinking… ({block.size:,} characters, folded)", ""))
            elif block.kind == "text":
                out.extend(("", line) for line in block.text.splitlines()[-most:] if line.strip())
            elif block.name:
                out.append((f"⚙ {block.name} ", " ".join(block.text.split())))
            else:
                out.append((f"[{block.kind}]", ""))
        cut = max(width, 8)
        return [_fit(printable(head), printable(text), cut) for head, text in out[-most:]]


def _fit(head: str, text: str, width: int) -> str:
    """``head`` then ``text`` in ``width``: the tool's name stays, the newest end of what moves is shown."""
    head, text = head.replace("\t", " ")[:width - 2], text.replace("\t", " ")
    room = width - len(head)
    return head + (text if len(text) <= room else "…" + text[-(room - 1):])


class ReplyPieces:
    """The driver's ``on_delta`` (worker thread): gathers pieces and posts a ``FormingReply`` per window."""

    def __init__(self, post: Callable[[FormingReply], object], window: float = WINDOW_S) -> None:
        self._post = post
        self._window = window
        self._lock = threading.Lock()
        self._key: tuple[str, int] | None = None
        self._blocks: dict[int, list] = {}  # index: [kind, name, text, size]
        self._timer: threading.Timer | None = None

    def add(self, delta: ReplyDelta) -> None:
        with self._lock:
            if self._key != (delta.run_id, delta.n):
                self._key, self._blocks = (delta.run_id, delta.n), {}
            if delta.kind == "start":
                kind, _colon, name = delta.text.partition(":")
                self._blocks[delta.index] = [kind, name, "", 0]
            else:
                block = self._blocks.setdefault(delta.index, [delta.kind, "", "", 0])
                block[2] = (block[2] + delta.text)[-TAIL_CHARS:]
                block[3] += len(delta.text)
            if self._timer is None:
                self._timer = threading.Timer(self._window, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._key is None:
                return
            snapshot = FormingReply(self._key[0], self._key[1], tuple(
                FormingBlock(*self._blocks[i]) for i in sorted(self._blocks)))
        self._post(snapshot)
