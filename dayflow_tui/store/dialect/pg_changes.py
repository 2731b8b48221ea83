"""PostgreSQL's push of commits: LISTEN on a connection of its own, in a thread of its own.

Every write transaction runs ``pg_notify(CHANGES_CHANNEL, current_schema())`` (``PostgresDialect.
write_transaction``), which the server delivers when, and only when, the transaction commits. A reader (the
dashboard, ``dayflow show --follow``) that holds this feed hears of another host's commit at once instead
of at its next poll of the change marker.

The connections are the feed's alone (a Peewee thread connection is busy with queries, and LISTEN belongs
to a session): one LISTENs, a second sends the feed's probes, the way other sessions' notices come. The
feed is ``live`` once its first probe is heard back, and stays so while probes (sent after
``PROBE_EVERY_S`` of silence) come back within ``PROBE_WAIT_S``. A connection that
errors, or a probe that does not come back (a network blackhole; a transaction-pooling PgBouncer, which
runs the LISTEN on a server session it then gives to someone else), closes both: the feed is not ``live``,
the reader polls the change marker as before, and the feed connects again with back-off (0.5 s doubling
to 30 s).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable

from ..retry import backoff_delays
from .base import ChangeFeed

# The channel every write transaction notifies on commit (``PostgresDialect.write_transaction``).
CHANGES_CHANNEL = "dayflow_changes"
PROBE_EVERY_S = 5.0
PROBE_WAIT_S = 3.0
# How long one wait for a notice lasts before the thread looks at its stop flag and its probe.
_TICK_S = 0.25


class PgChangeFeed(ChangeFeed):
    def __init__(self, url: str, schema: str | None, options: dict[str, Any],
                 on_change: Callable[[], None] | None, *, label: str = ""):
        super().__init__()
        self.url = url
        self.schema = schema
        self.options = options
        self.on_change = on_change
        self.label = label
        self._connected = False
        self._verified = False  # its first probe came back: notices from other sessions reach it
        self._probe_sent: float | None = None  # when the unanswered probe went out (None: none is out)
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._probe = 0

    @property
    def live(self) -> bool:
        """Read by other threads: connected, its first probe heard, and no probe overdue."""
        sent = self._probe_sent
        return self._connected and self._verified and (sent is None or time.monotonic() - sent < PROBE_WAIT_S)

    def start(self) -> "PgChangeFeed":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dayflow-listen", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        super().stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * _TICK_S + 1)

    def _wake(self) -> None:
        self._woken.set()
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # noqa: BLE001 - a reader that went away must not end the feed
                pass

    def _run(self) -> None:
        delays = backoff_delays(0.5, 30.0)
        while not self._stop.is_set():
            try:
                self._listen()
                delays = backoff_delays(0.5, 30.0)
            except Exception as exc:  # noqa: BLE001 - any failure of the feed's connection: fall back, try again
                from ...redaction import redact_and_cut

                self.last_error = redact_and_cut(f"{type(exc).__name__}: {exc}", 200)
            self._probe_sent = None
            if self._connected:
                was_live = self._verified
                self._connected = self._verified = False
                self.drops += 1
                if was_live:
                    delays = backoff_delays(0.5, 30.0)  # it worked until now: the first retry comes soon
                    self._wake()  # the reader goes back to polling now, and reads what it may have missed
            self._stop.wait(next(delays))

    def _listen(self) -> None:
        import psycopg

        with contextlib.ExitStack() as held:
            conn = held.enter_context(psycopg.connect(self.url, autocommit=True, **self.options))
            # The schema setting is the payload writers send; else the schema the URL's search_path picks.
            mine = self.schema or conn.execute("SELECT current_schema()").fetchone()[0]
            conn.execute(f"LISTEN {CHANGES_CHANNEL}")
            # Probes go out on a second connection, the way other sessions' notices come: a listener that
            # hears only what it sends itself (a transaction pooler) is not live.
            prober = held.enter_context(psycopg.connect(self.url, autocommit=True, **self.options))
            self.connects += 1
            self._connected = True
            probe: str | None = None
            heard = 0.0  # the first probe goes out at once: the feed is live once it is heard back
            while not self._stop.is_set():
                now = time.monotonic()
                if probe is None and now - heard > PROBE_EVERY_S:
                    self._probe += 1
                    probe = f"probe {id(self):x} {self._probe}"
                    self._probe_sent = now  # live turns False if it is not heard back in time, even while this
                    # statement hangs in a blackhole (until tcp_user_timeout ends it)
                    prober.execute("SELECT pg_notify(%s, %s)", (CHANGES_CHANNEL, probe))
                for notice in conn.notifies(timeout=_TICK_S):
                    heard = time.monotonic()
                    if notice.payload == probe:
                        probe, self._probe_sent = None, None
                        if not self._verified:
                            self._verified = True
                            self._wake()  # live now; commits made while it was away: the reader reads once
                    elif notice.payload == mine:
                        self.notices += 1
                        self._wake()
                if probe is not None and time.monotonic() - self._probe_sent > PROBE_WAIT_S:
                    raise TimeoutError(f"its own NOTIFY, sent on another connection, did not come back within "
                                       f"{PROBE_WAIT_S:.0f} s")
