"""Workers: take runs nobody is driving from the store and drive them to their end.

A worker claims one run at a time with ``store.claim_next`` (a queued run,
or a ``running`` run whose owner is gone) and continues it with
``runs.resume``, so committed steps cost nothing and tasks are not repeated.
The lease makes it safe to start any number of workers, on any number of
hosts, against one database: a run is driven by one process at a time.

Concurrency is threads. A run spends nearly all its time waiting on the
model API (the GIL is released), each Peewee thread has its own connection,
and one process holds one model client configuration and one set of
imports. To use more cores or hosts, start more worker processes.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..config.errors import DayflowError, ModelCallFailed, RateLimited, RunBusy, SchemaAhead, StoreError
from . import telemetry
from .backpressure import SharedPause, reason
from .events import OnStep, RunResult, check_watches
from .runs import resume
from ..store import SCHEMA_VERSION, STALE_AFTER_S, Store
from ..store.retry import patience


@dataclass
class WorkerEvent:
    """What a worker thread did: ``kind`` is started, finished, lost, failed, paused or error.

    ``paused``: the model API pushed back (429, 529); the run is queued for later and every thread of
    the worker pauses its claims for the wait.
    """

    kind: str  # also "outdated": the database was migrated past this code's schema; the worker winds down
    run_id: str | None
    message: str
    result: RunResult | None = None


@dataclass
class WorkReport:
    finished: list[RunResult] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # run ids that ended with an error
    paused: list[str] = field(default_factory=list)  # run ids released for back-pressure (not failed)
    store_errors: list[str] = field(default_factory=list)
    # Set when the database was migrated past this code's schema (a rolling upgrade): why the worker stopped.
    outdated: SchemaAhead | None = None


def work(store: Store, *, concurrency: int = 1, once: bool = False, poll_every: float = 1.0,
         stale_after: float = STALE_AFTER_S, stop: threading.Event | None = None,
         on_event: Callable[[WorkerEvent], None] | None = None, on_step: OnStep | None = None,
         client_factory: Callable[[], Any] | None = None) -> WorkReport:
    """Drive runs with ``concurrency`` threads until ``stop`` is set.

    ``once``: take what is waiting now and return when nothing is left,
    instead of polling every ``poll_every`` seconds. Setting ``stop`` ends
    each thread at its run's next step boundary; the run is released and
    any worker can continue it.
    """
    check_watches()  # a drive watcher that cannot watch (live export without its SDK) stops the worker before any claim
    stop = stop or threading.Event()
    report = WorkReport()
    lock = threading.Lock()
    presence = _Presence(store, concurrency)
    # Back-pressure from the API is per key, not per run: after a 429 or 529 no thread claims (and
    # calls) again until the wait it asked for has passed.
    pause = SharedPause()
    schema = _SchemaWatch(store)

    def stopping() -> bool:
        """At each step boundary of a run being driven: stop (and release it) when asked to, or when the database
        was migrated past this code's schema (checked at most once a second for the whole worker)."""
        return stop.is_set() or schema.ahead()

    def outdated(exc: SchemaAhead) -> None:
        """No more claims from any thread; each run driven now is released at its next step boundary."""
        with lock:
            first = report.outdated is None
            if first:
                report.outdated = exc
        schema.found(exc)
        if first and on_event is not None:
            on_event(WorkerEvent("outdated", None, f"{exc}: stopped claiming; the runs driven now are released "
                                 "at their next step boundary, then this worker exits"))

    def emit(event: WorkerEvent) -> None:
        with lock:
            if event.kind == "finished" and event.result is not None:
                report.finished.append(event.result)
            elif event.kind == "failed" and event.run_id:
                report.failed.append(event.run_id)
            elif event.kind == "paused" and event.run_id:
                report.paused.append(event.run_id)
            elif event.kind == "error":
                report.store_errors.append(event.message)
        if on_event is not None:
            on_event(event)

    def drive_one() -> bool:
        """Claim and drive one run. False when there was nothing to take."""
        asked = time.monotonic()
        lease = store.claim_next(stale_after=stale_after)
        telemetry.note("claim", run_id=lease and lease.run_id, duration_s=time.monotonic() - asked)
        if lease is None:
            return False
        emit(WorkerEvent("started", lease.run_id, "claimed"))
        presence.took(lease.run_id)
        client = client_factory() if client_factory is not None else None
        try:
            result = resume(lease.run_id, store=store, lease=lease, client=client, on_step=on_step,
                            should_stop=stopping)
        except RunBusy as exc:
            emit(WorkerEvent("lost", lease.run_id, str(exc)))
        except RateLimited as exc:
            pause.hold(exc.wait_s)
            telemetry.note("rate_limit.wait", run_id=lease.run_id, status=exc.status, wait_s=exc.wait_s)
            emit(WorkerEvent("paused", lease.run_id, f"{reason(exc.status, exc.wait_s)}: queued again; this "
                             f"worker's claims pause meanwhile ({exc})"))
        except ModelCallFailed as exc:
            emit(WorkerEvent("failed", lease.run_id, str(exc)))
        except StoreError:
            raise
        except DayflowError as exc:
            emit(WorkerEvent("failed", lease.run_id, str(exc)))
        except Exception as exc:  # one bad run must not take the worker down; its lease is released
            emit(WorkerEvent("failed", lease.run_id, f"internal error: {type(exc).__name__}: {exc}"))
        else:
            emit(WorkerEvent("finished", lease.run_id, result.status, result))
        finally:
            presence.left(lease.run_id)
        return True

    def thread_main() -> None:
        try:
            while not stop.is_set() and report.outdated is None:
                paused = pause.left()
                if paused > 0:
                    stop.wait(paused)
                    continue
                try:
                    # --once reads what is backing off *before* the claim: read after a claim that found
                    # nothing, a backoff that ended in between (a busy host) would read as nothing left, and
                    # the worker would exit with that run still to be taken.
                    backing_off = store.next_retry_at() if once else None
                    took = drive_one()
                except SchemaAhead as exc:
                    outdated(exc)
                    return
                except StoreError as exc:
                    emit(WorkerEvent("error", None, str(exc)))
                    # A dropped connection is not reused; the next claim opens a new one.
                    store.close_thread_connection()
                    if once:
                        return
                    stop.wait(poll_every)
                    continue
                if not took:
                    wait = backing_off
                    if once and wait is None:
                        return  # nothing waiting now, and nothing backing off: --once is done
                    # --once also waits out runs backing off after a failed attempt, so a poison run
                    # reaches its verdict (done, or failed after its attempts) before the worker exits.
                    stop.wait(max(min(poll_every, wait), 0.05) if wait is not None else poll_every)
        finally:
            store.close_thread_connection()

    threads = [threading.Thread(target=thread_main, name=f"dayflow-worker-{i}", daemon=True)
               for i in range(concurrency)]
    presence.start()
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.2)
    except KeyboardInterrupt:
        stop.set()
        for thread in threads:
            thread.join()
        raise
    finally:
        presence.stop()
    return report


class _SchemaWatch:
    """Whether the database was migrated past this code's ``SCHEMA_VERSION`` while the worker runs.

    A claim reads the version in its own transaction (``store.claim_next`` raises ``SchemaAhead``); a run
    being driven asks at its step boundaries, read here at most once a second: a migration's commit
    reaches every drive within about a second plus the step in flight."""

    EVERY_S = 1.0

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.read_at = time.monotonic()
        self.seen: SchemaAhead | None = None

    def found(self, exc: SchemaAhead) -> None:
        self.seen = exc

    def ahead(self) -> bool:
        if self.seen is not None:
            return True
        with self.lock:
            if time.monotonic() - self.read_at < self.EVERY_S:
                return False
            self.read_at = time.monotonic()
        try:
            version = self.store.schema_version()
        except StoreError:
            return False  # a database away: the drive's own next write says so
        if version > SCHEMA_VERSION:
            self.seen = SchemaAhead(self.store.label, version, SCHEMA_VERSION)
        return self.seen is not None


class _Presence:
    """This worker's row in the workers table (``dayflow workers``): registered, beating every
    ``HEARTBEAT_EVERY_S`` with the runs it holds, marked stopped at a clean exit. Best effort: the workers
    table is for people; a database that will not take a beat never stops the worker (leases keep runs safe)."""

    def __init__(self, store: Store, concurrency: int) -> None:
        self.store = store
        self.concurrency = concurrency
        self.worker_id: str | None = None
        self.held: set[str] = set()
        self.done = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.changed = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        from ..version import __version__
        from ..store.leases import HEARTBEAT_EVERY_S, this_host

        try:
            with patience(5.0):
                self.worker_id = self.store.register_worker(host=this_host(), pid=os.getpid(), version=__version__,
                                                            concurrency=self.concurrency)
        except Exception:
            return
        self.every = HEARTBEAT_EVERY_S
        self.thread = threading.Thread(target=self._beat, name="dayflow-worker-beat", daemon=True)
        self.thread.start()

    def took(self, run_id: str) -> None:
        with self.lock:
            self.held.add(run_id)
        self.changed.set()  # the beat thread writes it: a drive thread never waits on the workers table

    def left(self, run_id: str) -> None:
        with self.lock:
            self.held.discard(run_id)
            self.done += 1
        self.changed.set()

    def _beat(self) -> None:
        try:
            while not self.stopping.is_set():
                self.changed.wait(self.every)
                self.changed.clear()
                if self.stopping.is_set():
                    return
                with self.lock:
                    held, done = sorted(self.held), self.done
                try:
                    with patience(2.0):  # a database away: skip this beat (the row ages; leases keep runs safe)
                        self.store.worker_beat(self.worker_id, held, done)
                except Exception:
                    pass
        finally:
            self.store.close_thread_connection()

    def stop(self) -> None:
        self.stopping.set()
        self.changed.set()
        if self.worker_id is not None:
            try:
                with patience(2.0):
                    self.store.worker_stopped(self.worker_id, self.done)
            except Exception:
                pass
