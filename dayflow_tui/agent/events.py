"""What a run tells the world: the step events a front end watches, a drive's result, the driver's constants,
and the hooks (``DriveWatch``) that watch every drive of a process.

Its own module so that what watches a run (the OpenTelemetry export, the dashboard's messages, workers) can
name these without importing the driver that makes them: no import circle runs through the driver, and the
agent never imports what watches it (``otel.live`` registers itself here; the agent calls the hooks).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ..money.cost import Cost

MAX_TOKENS = 4096
RETRY_MAX_TOKENS = 16384  # once per run, after a reply cut off inside a tool call
DEFAULT_MAX_STEPS = 12


@dataclass
class StepEvent:
    """A committed step, as the ``on_step`` callback receives it.

    ``phase`` is ``"response"`` when the model's turn is committed and
    ``"tools"`` when its tool results are committed.
    """

    run_id: str
    n: int
    phase: str
    stop_reason: str | None
    assistant: list[dict]
    tool_results: list[dict] | None
    input_tokens: int
    output_tokens: int
    run_input_tokens: int
    run_output_tokens: int
    # The request's estimated size as built from history, and after compaction (None: not compacted).
    request_est_tokens: int | None = None
    compacted_est_tokens: int | None = None
    cost: Cost | None = None  # this call's cost (None: no price for its model)
    run_cost: Cost | None = None  # the whole run's so far


@dataclass
class RunResult:
    run_id: str
    status: str
    final_text: str | None
    steps: int
    input_tokens: int
    output_tokens: int
    calls: int = 0  # paid model calls made by this invocation
    replayed_steps: int = 0
    error: str | None = None
    # Live OpenTelemetry export (setting otel_endpoint): why some spans were not sent, if they were not.
    trace_problem: str | None = None
    cost: Cost | None = None  # the whole run's calls (None: a model without a price)
    paid: Cost | None = None  # the calls this invocation made
    replayed_cost: Cost | None = None  # the committed steps it found: paid before, not paid again

    @property
    def resume_helps(self) -> bool:
        """False when the run ended on a reply that a resume would only meet again (the error says what helps)."""
        return not any(f"(stop_reason={reason})" in (self.error or "") for reason in ENDS_BEFORE_TOOLS)


OnStep = Callable[[StepEvent], None]


def _fork_advice(run_id: str, n: int) -> str:
    """What to do about a reply that a resume would only meet again: go on from before it, differently."""
    if n <= 1:
        return "start a new run with the task put differently"
    return f'fork it from the step before, with a note: dayflow fork {run_id} --at {n - 1} --append "..." --run'


# Stop reasons that end a run before its tools run, with what to say. A resume cannot help either (it would
# meet the same committed reply); the advice is a fork from the step before, changed.
ENDS_BEFORE_TOOLS: dict[str, Callable[[str, int], str]] = {
    "refusal": lambda run_id, n: f"the model declined to continue (stop_reason=refusal); {_fork_advice(run_id, n)}",
    "model_context_window_exceeded": lambda run_id, n: (
        "the conversation filled the model's context window (stop_reason=model_context_window_exceeded); "
        f"{_fork_advice(run_id, n)} and compaction on (--compact-at TOKENS)" if n > 1 else
        "the task alone filled the model's context window (stop_reason=model_context_window_exceeded); "
        "start a new run with a shorter task"),
}


# -- hooks on every drive ------------------------------------------------------


class Watching(Protocol):
    """One drive, watched: told of each committed step, then asked at the end what (if anything) went wrong."""

    def on_step(self, event: StepEvent) -> None: ...

    def finish(self) -> str | None: ...


@dataclass(frozen=True)
class DriveWatch:
    """Something that watches every run this process drives (the live trace export: ``otel.live``).

    ``check()`` runs before a run is created or claimed and may refuse it (a ``DayflowError``: nothing is
    written); ``start(store, run_id)`` runs once the run is claimed and returns the ``Watching`` of this
    drive, or None. A watcher never stops a run: what it could not do comes back as ``RunResult.trace_problem``.
    """

    name: str
    check: Callable[[], None]
    start: Callable[[Any, str], Watching | None]


_WATCHES: list[DriveWatch] = []
_WATCHES_LOCK = threading.Lock()


def watch(hook: DriveWatch) -> None:
    """Call ``hook`` on every drive from now on (once, however often it is registered)."""
    with _WATCHES_LOCK:
        if hook not in _WATCHES:
            _WATCHES.append(hook)


def unwatch(hook: DriveWatch) -> None:
    with _WATCHES_LOCK:
        if hook in _WATCHES:
            _WATCHES.remove(hook)


def drive_watches() -> tuple[DriveWatch, ...]:
    """The hooks registered now, in the order they were registered."""
    with _WATCHES_LOCK:
        return tuple(_WATCHES)


def check_watches() -> None:
    """Every hook's ``check``: a run a watcher cannot watch is refused before anything is claimed."""
    for hook in drive_watches():
        hook.check()
