"""Shared limits (#29) in one process: the setting's one parser, off costs no query, waiting never calls, a wait
past limit_wait_s backs the run off like a 529 (queued, not failed), a cancel seen while waiting ends it, and
the key is never stored."""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest

from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.config import settings
from dayflow_tui.config.errors import RateLimited, SettingsError
from dayflow_tui.redaction import key_fingerprint
from dayflow_tui.store import Store
from dayflow_tui.store.models import LimitBucket, LimitSlot

from ..conftest import dayflow_cmd


def test_the_setting_is_tables_of_whole_numbers_and_a_bad_one_is_one_line(tmp_path, monkeypatch):
    config = tmp_path / "config.toml"
    config.write_text('[limits."claude-x"]\nmax_concurrent = 4\nrequests_per_minute = 50\n')
    monkeypatch.setenv("DAYFLOW_CONFIG", str(config))
    assert settings.load().limits == {"claude-x": {"max_concurrent": 4, "requests_per_minute": 50}}
    for bad, said in [('{"m": {"max_concurrent": 0}}', "max_concurrent must be 1 or more"),
                      ('{"m": {"per_hour": 5}}', "unknown limit 'per_hour'"),
                      ('{"m": {"tokens_per_minute": "many"}}', "tokens_per_minute must be a whole number"),
                      ("[1]", "must be tables")]:
        with pytest.raises(SettingsError, match="DAYFLOW_LIMITS") as caught:
            settings.load({"DAYFLOW_LIMITS": bad})
        assert said in str(caught.value)
    done = subprocess.run(dayflow_cmd("runs"), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "DAYFLOW_LIMITS": '{"m": {"max_concurrent": -1}}'}, timeout=60)
    assert done.returncode == 64 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "DAYFLOW_LIMITS" in done.stderr and "Traceback" not in done.stderr


def test_off_asks_the_database_nothing_on_the_step_path(store, counting_client, monkeypatch):
    asked = []
    monkeypatch.setattr(Store, "acquire_limit", lambda *a, **k: asked.append(a))
    monkeypatch.setattr(Store, "release_limit", lambda *a, **k: asked.append(a))
    result = run_brief(store, model="offline", client=counting_client)
    assert result.status == "done" and counting_client.calls == result.steps
    assert asked == [] and LimitBucket.select().count() == 0


def test_on_each_call_takes_and_frees_a_slot_and_the_key_is_never_stored(store, counting_client, monkeypatch):
    key = "sk-ant-test-" + "k" * 40
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("DAYFLOW_LIMITS", json.dumps({"offline": {"max_concurrent": 1, "requests_per_minute": 60,
                                                                 "tokens_per_minute": 10_000_000}}))
    result = run_brief(store, model="offline", client=counting_client)
    assert result.status == "done" and counting_client.calls == result.steps
    assert LimitSlot.select().count() == 0  # every slot freed after its reply was committed
    bucket = LimitBucket.get()
    assert bucket.id == f"offline {key_fingerprint()}" and key[12:20] not in bucket.id
    assert 60 - bucket.requests >= result.steps - 0.5  # one request spent per call (refilled 1 a second since)


def test_a_wait_never_calls_and_past_the_bound_the_run_backs_off_queued(store, counting_client, monkeypatch):
    monkeypatch.setenv("DAYFLOW_LIMITS", json.dumps({"offline": {"max_concurrent": 1}}))
    monkeypatch.setenv("DAYFLOW_LIMIT_WAIT", "1")
    run = store.create_run("a task", model="offline")
    # Another live worker holds the only slot (its beat fresh): this run waits 1 s, then backs off.
    store.acquire_limit("offline", key_fingerprint(), limits={"max_concurrent": 1}, tokens=0, run_id="other",
                        slot="someone-elses-slot", slot_expiry_s=60)
    pytest.importorskip("prometheus_client")
    from dayflow_tui.agent import telemetry
    from dayflow_tui.ops.metrics import WorkerMetrics

    metrics = WorkerMetrics("127.0.0.1", 0)
    telemetry.listen(metrics.told)
    try:
        with pytest.raises(RateLimited) as caught:
            resume(run.id, store=store, client=counting_client)
    finally:
        telemetry.unlisten(metrics.told)
    assert caught.value.status == 529 and "stayed full" in str(caught.value)
    assert counting_client.calls == 0
    # Counted: the wait that gave up, on the worker's metrics.
    assert metrics.registry.get_sample_value("dayflow_limit_waits_total", {"model": "offline",
                                                                           "result": "gave_up"}) == 1
    after = store.get_run(run.id)
    assert after.status == "queued" and after.not_before is not None and after.lease_token is None


def test_a_cancel_seen_while_waiting_ends_the_run_with_no_call(store, counting_client, monkeypatch):
    monkeypatch.setenv("DAYFLOW_LIMITS", json.dumps({"offline": {"max_concurrent": 1}}))
    run = store.create_run("a task", model="offline")
    store.acquire_limit("offline", key_fingerprint(), limits={"max_concurrent": 1}, tokens=0, run_id="other",
                        slot="someone-elses-slot", slot_expiry_s=60)
    from dayflow_tui.store import leases

    monkeypatch.setattr(leases, "HEARTBEAT_EVERY_S", 0.2)  # the heartbeat sees the cancel soon
    timer = threading.Timer(0.5, lambda: store.cancel_run(run.id, by="tester", reason="enough"))
    timer.start()
    try:
        result = resume(run.id, store=store, client=counting_client)
    finally:
        timer.cancel()
    assert result.status == "cancelled" and counting_client.calls == 0
    assert store.get_run(run.id).status == "cancelled"


def test_a_worker_stopping_while_a_call_waits_releases_the_run_with_no_call(store, counting_client, monkeypatch):
    monkeypatch.setenv("DAYFLOW_LIMITS", json.dumps({"offline": {"max_concurrent": 1}}))
    run = store.create_run("a task", model="offline")
    store.acquire_limit("offline", key_fingerprint(), limits={"max_concurrent": 1}, tokens=0, run_id="other",
                        slot="someone-elses-slot", slot_expiry_s=60)
    stopping = threading.Event()
    timer = threading.Timer(0.5, stopping.set)  # SIGTERM to the worker while the call waits for its slot
    timer.start()
    try:
        resume(run.id, store=store, client=counting_client, should_stop=stopping.is_set)
    finally:
        timer.cancel()
    assert counting_client.calls == 0
    after = store.get_run(run.id)
    assert after.lease_token is None and after.step_count == 0  # free for any worker; nothing bought
    assert LimitSlot.select().where(LimitSlot.run_id == run.id).count() == 0
