"""The one vocabulary of run states: stored, shown, filtered and searched by these words alone."""

from __future__ import annotations

import enum


class RunStatus(str, enum.Enum):
    """A run's state. ``INTERRUPTED`` is never stored: it is ``RUNNING`` whose owner is gone.

    The value is the word users see and type (``dayflow runs --status failed``).
    """

    QUEUED = "queued"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    DONE = "done"
    FAILED = "failed"
    BUDGET = "budget"
    WAITING = "waiting"  # a tool call waits for a person's decision (dayflow approve / deny)
    FORKED = "forked"  # a fork not yet run: it waits for `dayflow resume` (workers leave it alone)
    CANCELLED = "cancelled"  # a person cancelled it (`dayflow cancel`): final, never claimed or resumed

    def __str__(self) -> str:
        return self.value

    @property
    def glyph(self) -> str:
        return _GLYPHS[self]

    @property
    def label(self) -> str:
        """The glyph and word shown in lists (``✔ done``)."""
        return f"{self.glyph} {self.value}"

    @classmethod
    def parse(cls, word: str) -> "RunStatus":
        """A status from what a user typed (any case); ``ValueError`` naming the choices otherwise."""
        try:
            return cls(word.strip().lower())
        except ValueError:
            raise ValueError(f"unknown status {word!r} (choose from {', '.join(s.value for s in cls)})") from None


_GLYPHS = {
    RunStatus.QUEUED: "…",
    RunStatus.RUNNING: "▶",
    RunStatus.INTERRUPTED: "⚠",
    RunStatus.DONE: "✔",
    RunStatus.FAILED: "✖",
    RunStatus.BUDGET: "◼",
    RunStatus.WAITING: "⏸",
    RunStatus.FORKED: "⑂",
    RunStatus.CANCELLED: "⊘",
}

# Stored states a person or a worker can continue; DONE is final.
RESUMABLE = (RunStatus.RUNNING, RunStatus.FAILED, RunStatus.BUDGET, RunStatus.QUEUED, RunStatus.FORKED)
# Stored states a cancel refuses: the run has ended (a failed or budget run is ended until a person resumes it).
ENDED = (RunStatus.DONE, RunStatus.FAILED, RunStatus.BUDGET, RunStatus.CANCELLED)
STORED = tuple(s for s in RunStatus if s is not RunStatus.INTERRUPTED)
