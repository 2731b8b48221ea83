"""What a driving process tells its operators: claims, model calls, step commits, back-offs, waits.

The agent says what happened (``note("claim", duration_s=0.004, run_id=...)``)
and does not know who listens: the front ends register listeners here (the
structured log and the Prometheus metrics, ``ops/``), as the live trace export
registers a ``DriveWatch``. With no listener a note costs one tuple read. A
listener never stops a run: whatever it raises is swallowed here.

The events, with their fields (every one optional but the name):

| event | fields |
|---|---|
| ``claim`` | ``run_id`` (None: nothing to take), ``duration_s`` |
| ``model.call`` | ``run_id``, ``step``, ``model``, ``agent``, ``outcome`` (ok, rate_limited, failed), ``status``, ``duration_s`` |
| ``step.committed`` | ``run_id``, ``step``, ``model``, ``agent``, ``duration_s``, ``input_tokens``, ``output_tokens``, ``cache_read_tokens``, ``cache_write_tokens``, ``dollars`` (None: no price) |
| ``run.backoff`` | ``run_id``, ``attempt``, ``backoff_s``, ``gave_up``, ``reason`` |
| ``rate_limit.wait`` | ``run_id``, ``status`` (429, 529), ``wait_s`` |
"""

from __future__ import annotations

import threading
from typing import Any, Callable

Listener = Callable[[str, dict[str, Any]], None]

_listeners: tuple[Listener, ...] = ()
_lock = threading.Lock()


def listen(listener: Listener) -> None:
    """Call ``listener(event, fields)`` on every note from now on (once, however often it is registered)."""
    global _listeners
    with _lock:
        if listener not in _listeners:
            _listeners = _listeners + (listener,)


def unlisten(listener: Listener) -> None:
    global _listeners
    with _lock:
        _listeners = tuple(found for found in _listeners if found is not listener)


def listening() -> bool:
    """Whether anyone listens (a note whose fields cost something to work out is skipped otherwise)."""
    return bool(_listeners)


def note(event: str, **fields: Any) -> None:
    """Tell every listener that ``event`` happened; a listener's failure never reaches the run."""
    for listener in _listeners:
        try:
            listener(event, fields)
        except Exception:  # noqa: BLE001 - telling is best effort: a broken metric must not fail a paid run
            pass
