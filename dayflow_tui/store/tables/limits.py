"""Shared limits: model calls in flight and a minute's requests and tokens, per (model, API key fingerprint),
kept in the database so every worker on every host keeps them.

Each (model, key) has one ``limit_buckets`` row. An acquirer locks it first (``FOR UPDATE`` on PostgreSQL,
the write lock of ``BEGIN IMMEDIATE`` on SQLite: the dialect's ``write_transaction`` and
``locked_until_commit``), so counting the calls in flight and spending the buckets is one decision at a time
across hosts. A call in flight under ``max_concurrent`` is a ``limit_slots`` row, renewed by its lease's
heartbeat (``leases.heartbeat``): a slot whose beat is older than the expiry belonged to a process that died
and is deleted by the next acquirer, so no slot leaks. The buckets refill continuously (a minute's worth
per minute, never above it) on the database's clock. A 429 seen by any worker (``back_off_limit``) empties
the buckets and pauses the (model, key) for the server's wait, so every worker slows, not only the one
that got it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ... import clock
from ..models import LimitBucket, LimitSlot
from ..retry import store_call
from .database import db_now

if TYPE_CHECKING:
    from ..handle import StoreHandle

# How soon a call that found every slot taken asks again (a slot frees when a reply is committed).
SLOT_RECHECK_S = 1.0


@dataclass(frozen=True)
class LimitAnswer:
    """The store's answer to a call asking its limit: go (``granted``), or ask again in ``wait_s`` and why."""

    granted: bool
    wait_s: float = 0.0
    why: str = ""


def bucket_id(model: str, key: str) -> str:
    return f"{model} {key}"[:255]


def _at(iso_ts: str) -> datetime:
    return datetime.fromisoformat(iso_ts.replace("Z", "+00:00"))


def _locked_bucket(store: StoreHandle, bid: str, limits: dict[str, int]) -> LimitBucket:
    """The (model, key)'s row, locked until the transaction ends; made full the first time it is asked."""
    def locked() -> LimitBucket | None:  # a fresh query each time (a query object keeps its first result)
        return store.dialect.locked_until_commit(LimitBucket.select().where(LimitBucket.id == bid)).get_or_none()

    row = locked()
    if row is None:
        LimitBucket.insert(id=bid, requests=float(limits.get("requests_per_minute", 0)),
                           tokens=float(limits.get("tokens_per_minute", 0)),
                           refilled_at=db_now(store)).on_conflict_ignore().execute()
        row = locked()
    return row


@store_call
def acquire_limit(store: StoreHandle, model: str, key: str, *, limits: dict[str, int], tokens: int, run_id: str,
                  slot: str, slot_expiry_s: float) -> LimitAnswer:
    """Take a slot (``max_concurrent``) and spend one request and ``tokens`` from the buckets, or say how long
    to wait. ``slot`` is the caller's token, fixed before the first try (a retry whose COMMIT landed finds it)."""
    bid = bucket_id(model, key)
    most = limits.get("max_concurrent")
    rpm = limits.get("requests_per_minute")
    tpm = limits.get("tokens_per_minute")
    with store.write_transaction():
        row = _locked_bucket(store, bid, limits)
        now = db_now(store)  # read after the lock: time spent waiting for it is not counted as refill
        if most and LimitSlot.get_or_none(LimitSlot.token == slot) is not None:
            return LimitAnswer(True)  # an earlier try committed; only its answer was lost
        at, refilled = _at(now), _at(row.refilled_at)
        elapsed = max((at - refilled).total_seconds(), 0.0)
        requests = min(float(rpm), row.requests + elapsed * rpm / 60.0) if rpm else 0.0
        left = min(float(tpm), row.tokens + elapsed * tpm / 60.0) if tpm else 0.0
        waits: list[tuple[float, str]] = []
        if row.paused_until and row.paused_until > now:
            waits.append(((_at(row.paused_until) - at).total_seconds(), "the API pushed back (429)"))
        if most:
            stale = clock.iso(at - timedelta(seconds=slot_expiry_s))
            LimitSlot.delete().where(LimitSlot.bucket == bid, LimitSlot.beat_at < stale).execute()
            held = LimitSlot.select().where(LimitSlot.bucket == bid).count()
            if held >= most:
                waits.append((SLOT_RECHECK_S, f"{held} of max_concurrent {most} calls in flight"))
        if rpm and requests < 1.0:
            waits.append(((1.0 - requests) * 60.0 / rpm, f"requests_per_minute {rpm} spent"))
        need = float(min(max(tokens, 0), tpm)) if tpm else 0.0
        if tpm and left < need:
            waits.append(((need - left) * 60.0 / tpm, f"tokens_per_minute {tpm} spent"))
        if waits:
            # Nothing written: the refill is worked out from the row again at the next ask (a waiting fleet's asks
            # cost reads, not writes).
            wait, why = max(waits)
            return LimitAnswer(False, max(wait, 0.05), why)
        stamp = max(now, row.refilled_at)
        LimitBucket.update(requests=requests - 1.0 if rpm else 0.0, tokens=left - need,
                           refilled_at=stamp).where(LimitBucket.id == bid).execute()
        if most:
            LimitSlot.insert(token=slot, bucket=bid, run_id=run_id, beat_at=now).execute()
    return LimitAnswer(True)


@store_call
def release_limit(store: StoreHandle, model: str, key: str, slot: str, *, extra_tokens: int = 0) -> None:
    """The call under ``slot`` is over (its reply committed, or it failed): free its slot, and charge the
    tokens it used beyond what it was granted for (negative: give back what it did not use)."""
    with store.write_transaction():
        LimitSlot.delete().where(LimitSlot.token == slot).execute()
        if extra_tokens:
            (LimitBucket.update(tokens=LimitBucket.tokens - float(extra_tokens))
             .where(LimitBucket.id == bucket_id(model, key)).execute())


@store_call
def back_off_limit(store: StoreHandle, model: str, key: str, *, wait_s: float, limits: dict[str, int]) -> None:
    """The API pushed back (429): no call of (model, key) starts on any host for ``wait_s``, and then the
    buckets fill again from empty (a fleet comes back at the limit's pace, not all at once)."""
    bid = bucket_id(model, key)
    with store.write_transaction():
        row = _locked_bucket(store, bid, limits)
        until = db_now(store, max(wait_s, 0.0))
        if row.paused_until and row.paused_until > until:
            until = row.paused_until
        LimitBucket.update(requests=min(row.requests, 0.0), tokens=min(row.tokens, 0.0), refilled_at=until,
                           paused_until=until).where(LimitBucket.id == bid).execute()
