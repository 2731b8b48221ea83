"""Structured logs for the commands that drive runs: one event per line on stderr, as text or JSON.

The standard ``logging`` module, with the ``dayflow`` logger and two formatters
of our own. Each record is an event: a name (``run.failed``), a level, a
message (the line a person reads; the text format prints just that, so the
worker's lines read as they always did) and fields (``run_id``, ``step``,
``attempt``, ``duration_s``, ...). The JSON format writes one object per line
with ``time``, ``level``, ``event``, ``worker_id`` and ``thread`` besides.

Every string that reaches a line is redacted first (the API key, the
database's password, any URL's password: ``redaction``), then made inert
(JSON-escaped, or control characters shown as escapes in text), then cut:
model output and tool errors cannot move a terminal's cursor or forge a line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any, TextIO

from ..agent import telemetry
from ..clock import iso
from ..config import settings
from ..redaction import redact_and_cut
from ..safe_text import printable

LOGGER = "dayflow"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
# How long a message or a string field may be in a line (after redaction): a tool error can be megabytes.
TEXT_WIDTH = 300
JSON_WIDTH = 2000

_log = logging.getLogger(LOGGER)
_log.propagate = False  # an embedding program's root handlers do not print our lines twice
_configured = threading.Lock()


def worker_id() -> str:
    """This process as a worker: ``host:pid`` (the hostname setting, which leases record too)."""
    return f"{settings.current().hostname}:{os.getpid()}"


def _inert_line(text: Any, width: int) -> str:
    """Redacted, then one line with every control character escaped, then cut (never a piece of a secret left)."""
    line = printable(str(text)).replace("\n", "\\n").replace("\r", "\\r").replace("\t", " ")
    return redact_and_cut(line, width)


class TextFormatter(logging.Formatter):
    """The message alone, as the commands have always printed it; inert and on one line."""

    def format(self, record: logging.LogRecord) -> str:
        return _inert_line(record.getMessage(), TEXT_WIDTH + 200)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, event, the message, worker and thread, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": iso(_utc(record.created)),
            "level": record.levelname.lower(),
            "event": getattr(record, "event", "log"),
            "msg": redact_and_cut(record.getMessage(), JSON_WIDTH),
            "worker_id": worker_id(),
            "thread": record.threadName,
        }
        for name, value in (getattr(record, "fields", None) or {}).items():
            if value is None or name in entry:
                continue
            entry[name] = _field(value)
        # ensure_ascii: every control character, and everything past ASCII, is a \u escape: inert anywhere.
        return json.dumps(entry, ensure_ascii=True, separators=(",", ":"))


def _utc(created: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(created, tz=timezone.utc)


def _field(value: Any) -> Any:
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return round(value, 6)
    return redact_and_cut(str(value), JSON_WIDTH)


class _TodaysLines(logging.Filter):
    """The text format prints the lines the commands always printed; an event that had none (a finished run,
    whose line is on stdout; a back-off) is shown there only at the debug level. JSON has every event."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "in_text", True) or _log.isEnabledFor(logging.DEBUG)


class _Stderr(logging.StreamHandler):
    """A handler on whatever ``sys.stderr`` is when it writes (a test's capture, a redirected stream), not the
    one it was made with."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def configure(*, log_format: str | None = None, log_level: str | None = None, stream: TextIO | None = None) -> None:
    """Send the ``dayflow`` logger's events to stderr in the format and from the level asked for.

    ``None`` takes the ``log_format`` / ``log_level`` settings (flags were applied to them already).
    Called again, it replaces what it set up before.
    """
    config = settings.current()
    fmt = log_format or config.log_format
    level = LEVELS[log_level or config.log_level]
    if stream is None and isinstance(sys.stderr, _LinesAsEvents):
        stream = sys.stderr.real  # the events themselves go to the real stderr, never back through it
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
        handler.addFilter(_TodaysLines())
    with _configured:
        for old in list(_log.handlers):
            _log.removeHandler(old)
        _log.addHandler(handler)
        _log.setLevel(level)
    telemetry.listen(_told)


class _LinesAsEvents:
    """``sys.stderr`` in JSON mode: each plain line a command prints there (``[run ID]``, ``dayflow: error:
    ...``) becomes an event (``stderr``, its level read from the line), so every line of stderr is JSON."""

    def __init__(self, real: TextIO) -> None:
        self.real = real
        self._pending = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            lines = self._pending.split("\n")
            self._pending = lines.pop()
        for line in lines:
            if line.strip():
                event(_level_of(line), "stderr", line)
        return len(text)

    def flush(self) -> None:
        self.real.flush()

    def isatty(self) -> bool:
        return False  # no progress bar, no colour: this is a log

    def fileno(self) -> int:
        return self.real.fileno()


def _level_of(line: str) -> int:
    low = line.lower()
    if "error:" in low or "traceback" in low:
        return logging.ERROR
    if "warning:" in low:
        return logging.WARNING
    return logging.INFO


def stderr_as_events() -> None:
    """From now on each line printed to stderr is a JSON event (``configure`` in the json format first)."""
    if not isinstance(sys.stderr, _LinesAsEvents):
        sys.stderr = _LinesAsEvents(sys.stderr)  # type: ignore[assignment]


def event(level: int, name: str, message: str, *, in_text: bool = True, **fields: Any) -> None:
    """Log event ``name`` with the line a person reads and its fields (None fields are left out).

    ``in_text=False``: the text format shows it only at the debug level (``_TodaysLines``)."""
    if _log.isEnabledFor(level):
        _log.log(level, "%s", message, extra={"event": name, "fields": fields, "in_text": in_text})


def enabled(level: int) -> bool:
    return _log.isEnabledFor(level)


# -- what the agent tells (agent.telemetry), as debug events ------------------------------------------


def _told(name: str, fields: dict[str, Any]) -> None:
    if name == "claim":
        if fields.get("run_id") is None:
            return  # an idle worker asks every poll: not an event
        event(logging.DEBUG, "run.claimed", f"dayflow: run {fields['run_id']} claimed in "
              f"{fields.get('duration_s', 0) * 1000:.1f} ms", **fields)
    elif name == "model.call":
        event(logging.DEBUG, "model.call", f"dayflow: run {fields.get('run_id')} step {fields.get('step')}: "
              f"model call {fields.get('outcome')} in {fields.get('duration_s', 0):.2f} s", **fields)
    elif name == "step.committed":
        event(logging.DEBUG, "step.committed", f"dayflow: run {fields.get('run_id')} step {fields.get('step')} "
              f"committed in {fields.get('duration_s', 0) * 1000:.1f} ms "
              f"({fields.get('input_tokens')} in / {fields.get('output_tokens')} out)", **fields)
    elif name == "limit.wait":
        event(logging.INFO, "limit.wait", f"dayflow: run {fields.get('run_id')} step {fields.get('step')} waits for "
              f"the shared limit of {fields.get('model')} ({fields.get('why')}); no call until it is free", **fields)
    elif name == "limit.gave_up":
        event(logging.WARNING, "limit.gave_up", f"dayflow: run {fields.get('run_id')} step {fields.get('step')}: "
              f"the shared limit of {fields.get('model')} stayed full for {fields.get('wait_s', 0):.0f} s "
              f"({fields.get('why')}); the run backs off and is queued again", **fields)
    elif name == "run.backoff":
        if fields.get("gave_up"):
            what = f"failed after {fields.get('attempt')} attempt(s)"
        else:
            what = f"attempt {fields.get('attempt')} failed; backing off {fields.get('backoff_s', 0):.1f} s"
        event(logging.WARNING, "run.backoff", f"dayflow: run {fields.get('run_id')} {what}: "
              f"{fields.get('reason')}", in_text=False, **fields)

