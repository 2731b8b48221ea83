"""Messages a drive worker posts to the app (``post_message`` is thread-safe).

The worker thread never touches widgets: it posts these, and the app's
handlers (on the UI thread) update the screens.
"""

from __future__ import annotations

from textual.message import Message

from ..agent.events import RunResult, StepEvent
from .forming import FormingReply


class ChangesPushed(Message):
    """The database pushed word of another connection's commit (PostgreSQL's LISTEN, ``store.change_feed``):
    the shown screen polls now rather than at its next tick. Posted from the feed's thread, at most one queued."""


class RunStarted(Message):
    """A drive worker holds the run's lease and is about to call the model."""

    def __init__(self, run_id: str, *, new: bool) -> None:
        super().__init__()
        self.run_id = run_id
        self.new = new


class StepCommitted(Message):
    """One or more step events committed to the store (a burst, coalesced by ``StepBuffer``)."""

    def __init__(self, run_id: str, events: list[StepEvent]) -> None:
        super().__init__()
        self.run_id = run_id
        self.events = events


class ReplyForming(Message):
    """A reply streaming in, as far as it has come (a newer one of the same run replaces it in the queue)."""

    def __init__(self, reply: FormingReply) -> None:
        super().__init__()
        self.reply = reply
        self.run_id = reply.run_id

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ReplyForming) and message.run_id == self.run_id


class RunFinished(Message):
    """The loop returned: done, budget, failed by stop reason, or stopped on request (``running``)."""

    def __init__(self, result: RunResult) -> None:
        super().__init__()
        self.result = result
        self.run_id = result.run_id


class RunFailed(Message):
    """The loop raised (API error, run taken over, database): the run stays resumable."""

    def __init__(self, run_id: str | None, error: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.error = error
