"""``dayflow worker --metrics-port``: a real worker's /metrics scraped over HTTP, its counters checked against the
loopback API's call count and the store; ``dayflow metrics`` prints the database-derived gauges once."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request

import pytest

prometheus_client = pytest.importorskip("prometheus_client")  # the metrics extra (in the test extra too)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from dayflow_tui.store import Run, open_store  # noqa: E402

from ..conftest import dayflow_cmd  # noqa: E402
from ..loopback_api import LoopbackAPI, error_reply  # noqa: E402
from ..worker_process import WorkerProcess  # noqa: E402


def dayflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(dayflow_cmd(*args), capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=120, stdin=subprocess.DEVNULL)


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of ``url``: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def total(samples: dict, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(value for (found, have), value in samples.items()
               if found == name and set(labels.items()) <= set(have))


def queue_runs(db: str, count: int, env: dict[str, str]) -> list[str]:
    ids = []
    for _ in range(count):
        done = dayflow("brief", "--queue", "--db", db, "--model", "claude-loopback", env=env)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    return ids


def wait_until_finished(db: str, ids: list[str], timeout: float = 90) -> list:
    deadline = time.monotonic() + timeout
    store = open_store(db)
    try:
        while True:
            runs = [store.get_run(run_id) for run_id in ids]
            if all(run.status == "done" for run in runs):
                return runs
            assert time.monotonic() < deadline, [(r.id, r.status, r.error) for r in runs]
            time.sleep(0.2)
    finally:
        store.close()


def test_a_scrape_counts_what_the_api_and_the_store_saw(db_target):
    with LoopbackAPI() as api:
        # The second call is pushed back once (429, retry after 1 s): the run waits and is driven again.
        api.planned[2] = error_reply(429, "slow down", headers={"retry-after": "1"})
        env = {**api.env(), "DAYFLOW_API_MAX_RETRIES": "0"}
        ids = queue_runs(db_target, 3, env)
        worker = WorkerProcess("--db", db_target, "--metrics-port", "0", "--poll", "0.2", env=env)
        try:
            url = worker.wait_for(r"metrics at (http://127\.0\.0\.1:\d+/metrics)").group(1)
            runs = wait_until_finished(db_target, ids)
            time.sleep(1.1)  # past the gauges' cache: the scrape reads the database as it is now
            samples = scrape(url)
            calls = api.calls
        finally:
            assert worker.stop() == 0, "\n".join(worker.lines)
    assert total(samples, "dayflow_model_calls_total") == calls
    assert total(samples, "dayflow_model_calls_total", outcome="rate_limited") == 1
    assert total(samples, "dayflow_model_calls_total", outcome="ok", model="claude-loopback", agent="brief") == calls - 1
    assert total(samples, "dayflow_rate_limit_waits_total", status="429") == 1
    assert total(samples, "dayflow_tokens_total", kind="input") == sum(run.input_tokens for run in runs)
    assert total(samples, "dayflow_tokens_total", kind="output") == sum(run.output_tokens for run in runs)
    assert total(samples, "dayflow_tokens_total", kind="cache_read") == sum(run.cache_read_tokens for run in runs)
    steps = sum(run.step_count for run in runs)
    assert total(samples, "dayflow_step_commit_duration_seconds_count") == steps
    # Every run claimed once, and the one pushed back claimed again.
    assert total(samples, "dayflow_claims_total", result="claimed") == len(ids) + 1
    assert total(samples, "dayflow_claim_duration_seconds_count") >= len(ids) + 1
    assert total(samples, "dayflow_worker_runs_total", outcome="finished") == len(ids)
    assert total(samples, "dayflow_worker_runs_total", outcome="paused") == 1
    # The database-derived gauges, read at the scrape.
    assert total(samples, "dayflow_store_up") == 1
    assert total(samples, "dayflow_runs", status="done") == len(ids)
    assert total(samples, "dayflow_queue_depth") == 0 and total(samples, "dayflow_runs_held") == 0
    assert total(samples, "dayflow_spool_files") == 0


def test_the_gauges_follow_the_queue_with_one_read_per_scrape(db_target):
    from prometheus_client import CollectorRegistry, generate_latest

    from dayflow_tui.ops.gauges import StoreGauges

    store = open_store(db_target)
    try:
        for n in range(3):
            store.create_run(f"queued {n}", model="offline", run_id=f"gauge0000000{n}")
        store.create_run("backing off", model="offline", run_id="gauge00000009")
        Run.update(not_before="2999-01-01T00:00:00.000Z").where(Run.id == "gauge00000009").execute()
        Run.update(created_at="2000-01-01T00:00:00.000Z").where(Run.id == "gauge00000000").execute()
        gauges = StoreGauges(store, cache_s=60.0)
        registry = CollectorRegistry(auto_describe=True)
        registry.register(gauges)
        assert gauges.reads == 0  # registering reads nothing
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}
        assert gauges.reads == 1  # every gauge of a scrape from one read
        generate_latest(registry)
        assert gauges.reads == 1  # a second scrape within the cache reads nothing
    finally:
        store.close()
    assert total(samples, "dayflow_runs", status="queued") == 4
    assert total(samples, "dayflow_queue_depth") == 3 and total(samples, "dayflow_runs_backing_off") == 1
    assert total(samples, "dayflow_queue_oldest_age_seconds") > 20 * 365 * 86400


def test_dayflow_metrics_prints_the_gauges_once(db_target):
    with LoopbackAPI() as api:
        queue_runs(db_target, 2, api.env())
    done = dayflow("metrics", "--db", db_target)
    assert done.returncode == 0, done.stderr
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(done.stdout) for s in f.samples}
    assert total(samples, "dayflow_runs", status="queued") == 2 and total(samples, "dayflow_queue_depth") == 2
    assert total(samples, "dayflow_store_up") == 1


def test_a_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = dayflow("worker", "--once", "--db", str(tmp_path / "p.db"), "--metrics-port", str(port))
    assert done.returncode == 64 and "cannot serve metrics on 127.0.0.1" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    bad = dayflow("worker", "--once", "--db", str(tmp_path / "p.db"), "--metrics-port", "70000")
    assert bad.returncode == 64 and bad.stderr.count("\n") == 1
    assert not (tmp_path / "p.db").exists()  # refused before the database was opened (or made)
