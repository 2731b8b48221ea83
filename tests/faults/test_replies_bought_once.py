"""A reply is bought once: odd replies, poison runs, damaged histories and leaked keys (issue #11).

The real SDK talks to the loopback server, which counts every call it
answers. For every odd reply, through ``brief``, ``resume`` and a worker, on
both backends: calls answered <= committed steps + 1, the run ends ``done``
or ``failed`` with its reason, and another worker pass calls nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from dayflow_tui.agent.runs import queue_brief, resume, run_brief
from dayflow_tui.agent.replies import stored_raw
from dayflow_tui.agent.worker import work
from dayflow_tui.config.errors import ModelCallFailed
from dayflow_tui.store import Run, Step, open_store
from dayflow_tui.store.leases import forget_token

from ..conftest import BIN
from ..loopback_api import FAKE_KEY, LoopbackAPI, error_reply, message_reply, raw_reply

MODEL = "claude-loopback-1"


def _message(**overrides) -> dict:
    body = {"id": "msg_odd", "type": "message", "role": "assistant", "model": MODEL,
            "content": [{"type": "text", "text": "## Today\nnothing"}], "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}
    body.update(overrides)
    return body


def _usage(**counts) -> dict:
    return {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, **counts}


# name -> (reply plan, expected status, a word the error or final text holds)
ODD_REPLIES = {
    "json-array-body": (raw_reply(json.dumps([_message()])), "failed", "JSON list"),
    "huge-usage": (raw_reply(json.dumps(_message(usage=_usage(input_tokens=2 ** 63)))), "failed", "out of range"),
    "negative-usage": (raw_reply(json.dumps(_message(usage=_usage(output_tokens=-5)))), "failed", "out of range"),
    "nul-in-text": (raw_reply(json.dumps(_message(content=[{"type": "text", "text": "## Today\nA\u0000B"}]))),
                    "done", "A\\u0000B"),
    "nul-in-tool-key": (message_reply([{"type": "tool_use", "id": "toolu_nul", "name": "read_tasks",
                                        "input": {"include\u0000done": True}}], "tool_use"), "done", "## Today"),
    "long-model-name": (raw_reply(json.dumps(_message(model="m" * 130))), "done", "## Today"),
    "unknown-stop-reason": (raw_reply(json.dumps(_message(stop_reason="s" * 40))), "failed", "stop_reason"),
    "unknown-block-type": (raw_reply(json.dumps(_message(content=[{"type": "mystery_block", "x": 1},
                                                                  {"type": "text", "text": "## Today"}]))),
                           "done", "## Today"),
    "empty-content": (raw_reply(json.dumps(_message(content=[]))), "done", None),
    "not-json": (raw_reply("this is not json {"), "failed", "not JSON"),
    "duplicate-tool-ids": (raw_reply(json.dumps(_message(stop_reason="tool_use", content=[
        {"type": "tool_use", "id": "toolu_x", "name": "read_tasks", "input": {}},
        {"type": "tool_use", "id": "toolu_x", "name": "read_inbox", "input": {}}]))), "failed", "share one id"),
}


def _steps(store, run_id: str) -> int:
    return len(store.steps(run_id))


def _check_outcome(store, api, run_id: str, expected: str, word: str | None, calls_before: int = 0) -> None:
    run = store.get_run(run_id)
    committed = _steps(store, run_id)
    assert [s.n for s in store.steps(run_id)] == list(range(1, committed + 1))
    assert api.calls - calls_before <= committed + 1, (api.calls, committed)
    assert run.status == expected, (run.status, run.error)
    if word is not None:
        assert word in ((run.error or "") + (run.final_text or ""))
    if expected == "failed":
        assert run.error and "\n" not in run.error
    # The reply as the API sent it is kept for `dayflow show --raw`.
    assert all(s.raw is not None for s in store.steps(run_id))
    # Another worker pass makes no call.
    before = api.calls
    work(store, once=True)
    assert api.calls == before and store.get_run(run_id).status == expected


@pytest.mark.parametrize("odd", sorted(ODD_REPLIES))
def test_an_odd_reply_through_brief_is_bought_once(store, api, odd):
    plan, expected, word = ODD_REPLIES[odd]
    api.planned[1] = plan
    try:
        result = run_brief(store, model=MODEL)
        run_id = result.run_id
    except ModelCallFailed:
        pytest.fail("an odd 200 reply is not an API failure")
    _check_outcome(store, api, run_id, expected, word)


@pytest.mark.parametrize("odd", sorted(ODD_REPLIES))
def test_an_odd_reply_met_by_a_resume_is_bought_once(store, api, odd):
    plan, expected, word = ODD_REPLIES[odd]
    stopped = run_brief(store, model=MODEL, max_steps=1)
    assert stopped.status == "budget" and api.calls == 1
    api.planned[2] = plan
    resume(stopped.run_id, store=store, max_steps=12)
    _check_outcome(store, api, stopped.run_id, expected, word)


@pytest.mark.parametrize("odd", sorted(ODD_REPLIES))
def test_an_odd_reply_met_by_a_worker_is_bought_once(store, api, odd):
    plan, expected, word = ODD_REPLIES[odd]
    run_id = queue_brief(store, model=MODEL)
    api.planned[1] = plan
    work(store, once=True)
    _check_outcome(store, api, run_id, expected, word)


def test_the_raw_reply_is_kept_byte_for_byte_and_nul_survives_postgres(store, api):
    body = json.dumps(_message(content=[{"type": "text", "text": "## Today\nA\u0000B \udcff"}]))
    api.planned[1] = raw_reply(body)
    result = run_brief(store, model=MODEL)
    [step] = store.steps(result.run_id)
    assert stored_raw(step.raw, step.assistant) == body
    assert result.status == "done" and "\x00" not in store.get_run(result.run_id).final_text


def test_a_poison_run_ahead_of_healthy_runs_is_given_up_and_the_worker_finishes(store, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("DAYFLOW_RETRY_BACKOFF", "0.05")
    poison = queue_brief(store, model="claude-needs-a-key")
    healthy = [queue_brief(store, model="offline") for _ in range(2)]
    report = work(store, once=True)  # returns: --once always terminates
    for run_id in healthy:
        assert store.get_run(run_id).status == "done"
    run = store.get_run(poison)
    assert run.status == "failed" and run.error.startswith("gave up after 3 attempts: ")
    assert "ANTHROPIC_API_KEY" in run.error
    assert len(report.finished) == 2


def test_worker_once_waits_out_a_backoff_that_ends_while_a_busy_host_looks(store, monkeypatch):
    """On a loaded host the backoff can end between a claim that found nothing and the next read."""
    import time

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("DAYFLOW_RETRY_BACKOFF", "0.05")
    poison = queue_brief(store, model="claude-needs-a-key")
    claim_next = store.claim_next

    def slow_claim(**kwargs):
        lease = claim_next(**kwargs)
        if lease is None:
            time.sleep(0.3)  # longer than the backoff: the host was busy after the claim
        return lease

    monkeypatch.setattr(store, "claim_next", slow_claim)
    work(store, once=True)
    run = store.get_run(poison)
    assert run.status == "failed" and run.error.startswith("gave up after 3 attempts: "), (run.status, run.error)


def test_worker_once_terminates_on_a_poison_run_from_the_console_script(db_path, tmp_path):
    env = {**os.environ, "DAYFLOW_RETRY_BACKOFF": "0.05"}
    env.pop("ANTHROPIC_API_KEY", None)
    store = open_store(db_path)
    poison = queue_brief(store, model="claude-needs-a-key")
    healthy = queue_brief(store, model="offline")
    store.close()
    done = subprocess.run([str(BIN / "dayflow"), "worker", "--once", "--db", str(db_path)], env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    store = open_store(db_path)
    assert store.get_run(healthy).status == "done"
    assert store.get_run(poison).status == "failed" and "gave up after 3 attempts" in store.get_run(poison).error


def test_a_run_killed_every_attempt_is_given_up_not_retried_forever(store, monkeypatch):
    """Each claim is an attempt: a run whose driver dies each time is failed after the bounded count."""
    run_id = queue_brief(store, model="offline")
    for _ in range(3):
        lease = store.claim_next()
        assert lease is not None and lease.run_id == run_id
        lease.stop_heartbeat()  # the process 'dies': its lease is never released ...
        forget_token(lease.token)  # ... and this process no longer counts as its owner
    work(store, once=True)
    run = store.get_run(run_id)
    assert run.status == "failed" and "gave up after 3 attempts" in run.error and run.step_count == 0


def test_a_persons_resume_of_a_given_up_run_starts_a_fresh_count(store, monkeypatch):
    monkeypatch.setenv("DAYFLOW_RETRY_BACKOFF", "0.05")
    run_id = queue_brief(store, model="offline")
    with store.bound():
        Run.update(status="failed", attempts=3, error="gave up after 3 attempts: x").where(Run.id == run_id).execute()
    result = resume(run_id, store=store)
    assert result.status == "done" and store.get_run(run_id).attempts == 0


# -- damaged histories: refused before the claim, nothing written ------------------------------------


def _file_digest(path: Path) -> str:
    return hashlib.sha256(b"".join(Path(f"{path}{suffix}").read_bytes() if Path(f"{path}{suffix}").exists()
                                   else b"-" for suffix in ("", "-wal"))).hexdigest()


@pytest.mark.parametrize("damage", ["gap", "one-number-row", "three-number-row", "not-json", "orphan-results",
                                    "unanswered-tool-call", "results-for-other-ids"])
def test_a_damaged_history_is_refused_before_the_claim_with_the_file_unchanged(db_path, damage):
    store = open_store(db_path)
    stopped = run_brief(store, model="offline", max_steps=2)
    assert stopped.status == "budget"
    steps = {s.n: s for s in store.steps(stopped.run_id)}
    with store.bound():
        where = (Step.run == stopped.run_id)
        if damage == "gap":
            Step.delete().where(where & (Step.n == 1)).execute()
        elif damage == "one-number-row":
            Step.update(assistant="[1]").where(where & (Step.n == 2)).execute()
        elif damage == "three-number-row":
            Step.update(assistant="[1,2,3]").where(where & (Step.n == 2)).execute()
        elif damage == "not-json":
            Step.update(assistant="{oops").where(where & (Step.n == 2)).execute()
        elif damage == "orphan-results":
            Step.update(assistant='[{"type":"text","text":"hi"}]').where(where & (Step.n == 2)).execute()
        elif damage == "unanswered-tool-call":
            Step.update(tool_results=None).where(where & (Step.n == 1)).execute()
        elif damage == "results-for-other-ids":
            bad = json.loads(steps[1].tool_results)
            bad[0]["tool_use_id"] = "toolu_nobody"
            Step.update(tool_results=json.dumps(bad)).where(where & (Step.n == 1)).execute()
    store.db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    before = _file_digest(db_path)
    result = subprocess.run([str(BIN / "dayflow"), "resume", stopped.run_id, "--db", str(db_path)],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and stopped.run_id in lines[0] and "step" in lines[0]
    assert "Traceback" not in result.stderr
    assert _file_digest(db_path) == before


# -- the key never leaks, not even in part ------------------------------------------------------------


def _pieces(key: str, size: int = 12) -> list[str]:
    return [key[i:i + size] for i in range(len(key) - size + 1)]


def test_an_error_echoing_the_key_at_every_offset_leaks_no_piece_of_it(db_target, api):
    store = open_store(db_target)
    run_ids = []
    for offset in range(0, 420, 3):
        message = "x" * offset + f"invalid x-api-key {FAKE_KEY} given" + " tail" * 20
        api.planned[api.calls + 1] = error_reply(400, message)
        with pytest.raises(ModelCallFailed) as failure:
            run_brief(store, model=MODEL)
        assert not any(piece in str(failure.value) for piece in _pieces(FAKE_KEY))
        run_ids.append(store.list_runs(limit=1)[0].id)
    errors = [store.get_run(r).error for r in run_ids]
    assert all(errors) and not any(piece in e for e in errors for piece in _pieces(FAKE_KEY))
    runs_json = subprocess.run([str(BIN / "dayflow"), "runs", "--json", "--limit", "500", "--db", db_target],
                               capture_output=True, text=True, timeout=60, env={**os.environ, **api.env()},
                               stdin=subprocess.DEVNULL)
    assert runs_json.returncode == 0
    assert not any(piece in runs_json.stdout + runs_json.stderr for piece in _pieces(FAKE_KEY))
    store.close()
    if not db_target.startswith("postgresql"):
        blob = b"".join(Path(f"{db_target}{s}").read_bytes() for s in ("", "-wal") if Path(f"{db_target}{s}").exists())
        assert not any(piece.encode() in blob for piece in _pieces(FAKE_KEY))


def test_the_cli_error_line_for_a_key_echo_holds_no_piece_of_the_key(db_path):
    with LoopbackAPI() as server:
        for offset in (0, 150, 287, 299, 300, 301, 320):
            server.planned[server.calls + 1] = error_reply(400, "y" * offset + FAKE_KEY + " z" * 200)
            env = {**os.environ, **server.env(), "DAYFLOW_API_MAX_RETRIES": "0"}
            result = subprocess.run([str(BIN / "dayflow"), "brief", "--model", MODEL, "--db", str(db_path)],
                                    capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
            assert result.returncode == 5
            assert not any(piece in result.stderr + result.stdout for piece in _pieces(FAKE_KEY)), offset


def test_usage_errors_exit_64_and_write_nothing(tmp_path):
    db = tmp_path / "never.db"
    for args in (["brief", "--budget", "99999999999999999999"], ["worker", "--concurrency", "100000"],
                 ["runs", "--status", "sideways"], ["brief", "--max-steps", "-1"]):
        result = subprocess.run([str(BIN / "dayflow"), *args, "--db", str(db)], capture_output=True, text=True,
                                timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 64 and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
    for name, value in (("DAYFLOW_OFFLINE_DELAY", "nan"), ("DAYFLOW_COMPACT_AT", "-3"),
                        ("DAYFLOW_COMMIT_RETRY_S", "inf")):
        result = subprocess.run([str(BIN / "dayflow"), "brief", "--db", str(db)], capture_output=True, text=True,
                                timeout=60, env={**os.environ, name: value}, stdin=subprocess.DEVNULL)
        assert result.returncode == 64 and name in result.stderr and "Traceback" not in result.stderr
    assert not db.exists()


def test_a_compact_body_is_not_stored_twice_and_comes_back_byte_for_byte(store, api):
    body = json.dumps(_message(content=[{"type": "text", "text": "## Today\n" + "é" * 2000}]),
                      ensure_ascii=False, separators=(",", ":"))
    api.planned[1] = raw_reply(body)
    result = run_brief(store, model=MODEL)
    [step] = store.steps(result.run_id)
    assert len(step.raw) < 600 < len(body)  # the content array is kept once, in the step's blocks
    assert stored_raw(step.raw, step.assistant) == body
