"""acquire_limit, release_limit, back_off_limit: the shared limits every worker keeps, on both backends.

Slots are counted per (model, key); a slot whose beat went stale (its process died) is reclaimed, one the lease's
heartbeat renews is not; the request bucket holds a minute's worth and refills on the database's clock; a 429
pauses the (model, key) for everyone."""

import uuid

from dayflow_tui.store import Run
from dayflow_tui.store.models import LimitBucket, LimitSlot

from .helpers import held_run

MODEL = "claude-limit"


def ask(store, limits, *, key="k1", tokens=0, slot=None, run_id="limit0000001", expiry=60.0):
    return store.acquire_limit(MODEL, key, limits=limits, tokens=tokens, run_id=run_id,
                               slot=slot or uuid.uuid4().hex, slot_expiry_s=expiry)


def test_max_concurrent_counts_slots_and_a_release_frees_one(store):
    limits = {"max_concurrent": 2}
    first, second, third = (uuid.uuid4().hex for _ in range(3))
    assert ask(store, limits, slot=first).granted
    assert ask(store, limits, slot=second).granted
    full = ask(store, limits, slot=third)
    assert not full.granted and "2 of max_concurrent 2" in full.why and full.wait_s > 0
    assert ask(store, limits, key="k2").granted  # another key has its own slots
    store.release_limit(MODEL, "k1", first)
    assert ask(store, limits, slot=third).granted
    assert LimitSlot.select().where(LimitSlot.bucket == f"{MODEL} k1").count() == 2


def test_a_retry_whose_commit_landed_finds_its_own_slot(store):
    slot = uuid.uuid4().hex
    assert ask(store, {"max_concurrent": 1}, slot=slot).granted
    assert ask(store, {"max_concurrent": 1}, slot=slot).granted  # the same token: not a second slot
    assert LimitSlot.select().count() == 1


def test_a_stale_slot_is_reclaimed_and_a_renewed_one_is_not(store):
    limits = {"max_concurrent": 1}
    run, lease = held_run(store, "limit0000002")
    dead, alive = uuid.uuid4().hex, uuid.uuid4().hex
    assert ask(store, limits, slot=dead).granted
    LimitSlot.update(beat_at="2000-01-01T00:00:00.000Z").where(LimitSlot.token == dead).execute()
    # The dead process's slot is past the expiry: the next acquirer deletes it and takes its place.
    assert ask(store, limits, slot=alive, run_id=run.id).granted
    assert LimitSlot.get_or_none(LimitSlot.token == dead) is None
    # The living one's lease beats: its slot's beat moves, so it is never taken for a dead one.
    lease.limit_slot = alive
    LimitSlot.update(beat_at="2000-01-01T00:00:00.000Z").where(LimitSlot.token == alive).execute()
    assert store.heartbeat(lease) is True
    assert LimitSlot.get(LimitSlot.token == alive).beat_at > "2000-01-01T00:00:00.000Z"
    assert not ask(store, limits).granted


def test_requests_per_minute_spends_a_minutes_worth_then_waits(store):
    limits = {"requests_per_minute": 3}
    assert all(ask(store, limits).granted for _ in range(3))
    waiting = ask(store, limits)
    assert not waiting.granted and "requests_per_minute 3" in waiting.why
    assert 0 < waiting.wait_s <= 20.0  # one request comes back every 20 s
    # A minute later the bucket is full again (refilled on the database's clock), never above a minute's worth.
    LimitBucket.update(refilled_at="2000-01-01T00:00:00.000Z").execute()
    assert all(ask(store, limits).granted for _ in range(3))
    assert not ask(store, limits).granted


def test_tokens_per_minute_and_a_release_charges_what_the_reply_used(store):
    limits = {"tokens_per_minute": 1000}
    slot = uuid.uuid4().hex
    assert ask(store, limits, tokens=600, slot=slot).granted
    store.release_limit(MODEL, "k1", slot, extra_tokens=300)  # the reply used 900 in all
    short = ask(store, limits, tokens=200)
    assert not short.granted and "tokens_per_minute 1000" in short.why
    assert LimitBucket.get().tokens < 200


def test_a_429_pauses_the_model_and_key_for_everyone(store):
    limits = {"requests_per_minute": 100}
    assert ask(store, limits).granted
    store.back_off_limit(MODEL, "k1", wait_s=30.0, limits=limits)
    paused = ask(store, limits)
    assert not paused.granted and "429" in paused.why and 25.0 < paused.wait_s <= 30.0
    assert ask(store, limits, key="k2").granted  # another key was not pushed back
    assert Run.select().count() == 0  # the limits touch no run
