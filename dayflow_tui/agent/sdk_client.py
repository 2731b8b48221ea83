"""The ``anthropic`` client, built in a background thread while the caller reads the run's history.

Importing the SDK and building its client (an HTTP client with a TLS
context) takes about two seconds here, longer than anything else a resume
does before its first call. A resume that will call a real model starts the
build as soon as it knows the run's model (``start``), reads and validates the
history meanwhile, and ``build`` then takes the client, waiting only for what
is left. The two overlap where the caller waits (disk, database, fsync); both
are Python, so CPU work still takes turns under the GIL.

Nothing is lost if the background build fails: ``build`` builds the client
again in the caller's thread, so any error is raised where it always was.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

_lock = threading.Lock()
_pending: dict[tuple, "_Build"] = {}


class _Build:
    def __init__(self, options: dict):
        self.options = options
        self.client: Any = None
        self.done = threading.Event()

    def __call__(self) -> None:
        try:
            import anthropic

            self.client = anthropic.Anthropic(**self.options)
        except BaseException:  # noqa: BLE001 - ``build`` builds again where the error can be reported
            self.client = None
        finally:
            self.done.set()


def _key(options: dict) -> tuple:
    """Options and the environment the SDK reads when it builds a client (key, base URL, headers)."""
    sdk_env = sorted((name, value) for name, value in os.environ.items() if name.startswith("ANTHROPIC_"))
    return tuple(sorted(options.items())), hashlib.sha256(repr(sdk_env).encode()).hexdigest()


def start(options: dict) -> None:
    """Begin importing the SDK and building a client with ``options`` in a daemon thread (once per options)."""
    key = _key(options)
    with _lock:
        if key in _pending:
            return
        job = _pending[key] = _Build(dict(options))
    threading.Thread(target=job, name="dayflow-sdk-client", daemon=True).start()


def build(options: dict) -> Any:
    """An ``anthropic.Anthropic(**options)``: the one ``start`` began, or a new one."""
    with _lock:
        job = _pending.pop(_key(options), None)
    if job is not None:
        job.done.wait()
        if job.client is not None:
            return job.client
    import anthropic

    return anthropic.Anthropic(**options)
