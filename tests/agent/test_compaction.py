"""Compaction: the primitive, its summary, the API's rules, and compaction wired into runs."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from dayflow_tui.agent.messages import rebuild_messages
from dayflow_tui.agent.compaction import SUMMARY_PREFIX, compact, estimate_tokens, pairs_of, summarised_calls
from dayflow_tui.config.errors import DayflowError
from dayflow_tui.agent.request import build_request, next_request_preview, prepare_messages
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.agent.offline import OfflineClient
from dayflow_tui.store import dumps, open_store, step_blocks
from dayflow_tui.money.tokens import estimate_tokens as tokens_estimate

from .. import long_run_model
from ..api_rules import cache_breakpoints, problems, without_breakpoints
from ..conftest import dayflow_cmd
from ..long_run_model import LongRunClient, task_key, task_title
from ..loopback_api import LoopbackAPI

THRESHOLD = 8_000  # passed after about 11 steps of the long run


def long_run(store, steps: int = long_run_model.STEPS, **options):
    """A finished run of ``steps`` steps made by the real loop and tools; returns (result, client)."""
    client = LongRunClient(steps)
    result = run_brief(store, client=client, max_steps=steps + 5, **options)
    assert result.status == "done" and client.calls == steps
    return result, client


def summary_blocks(compacted: list[dict]) -> list[dict]:
    assert compacted[1]["role"] == "user"
    return compacted[1]["content"]  # the summary turn right after the task


def summary_text(compacted: list[dict]) -> str:
    return "\n".join(b["text"] for b in summary_blocks(compacted))


def b(obj) -> bytes:
    return dumps(obj).encode()


# -- the primitive ----------------------------------------------------------


def test_estimate_tokens_is_the_shared_one():
    assert estimate_tokens is tokens_estimate


def test_below_the_threshold_the_same_object_comes_back(store):
    result, _client = long_run(store, steps=12)
    history = rebuild_messages(store, result.run_id)
    size = estimate_tokens(history)
    assert compact(history, threshold_tokens=size) is history
    assert compact(history, threshold_tokens=10**9) is history
    assert compact(history, threshold_tokens=size - 1) is not history
    # No more pairs than keep_last: nothing to summarise.
    assert compact(history, keep_last=len(pairs_of(history)), threshold_tokens=0) is history
    task_only = history[:1]
    assert compact(task_only, threshold_tokens=0) is task_only
    assert prepare_messages(history, None).messages is history
    assert prepare_messages(history, size).messages is history


@pytest.mark.parametrize("keep_last", [1, 2, 3])
def test_task_and_last_pairs_are_untouched_byte_for_byte(store, keep_last):
    result, _client = long_run(store, steps=20)
    history = rebuild_messages(store, result.run_id)  # ends with the end_turn step
    history = history[:-1]  # a request in the middle of the run: ends with tool results
    before = copy.deepcopy(history)
    out = compact(history, keep_last=keep_last, threshold_tokens=0)
    assert history == before  # the input is not modified
    # Rule 1: the task and the kept pairs are the same bytes.
    assert out[0] is history[0] and b(out[0]) == b(before[0])
    assert b(out[2:]) == b(history[-2 * keep_last:])
    assert [m["role"] for m in out] == ["user", "user"] + ["assistant", "user"] * keep_last
    # Rule 2: the summary is a user turn of its own that starts with the label.
    assert out[1]["content"][0]["text"].startswith(SUMMARY_PREFIX)
    assert len(summary_blocks(out)) == 1 + len(pairs_of(history)) - keep_last
    assert problems(out) == []


def test_a_task_given_as_blocks_keeps_those_blocks_first():
    task = {"role": "user", "content": [{"type": "text", "text": "Plan my day."},
                                        {"type": "text", "text": "Ünïcode and \"quotes\" kept."}]}
    history = [task]
    for step in range(1, 6):
        history += [{"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{step}", "name": "read_inbox", "input": {"limit": 8}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{step}",
                                          "content": json.dumps({"ok": True, "count": 8, "pad": "x" * 2000})}]}]
    out = compact(history, threshold_tokens=0)
    assert out[0] is task and b(out[0]["content"]) == b(task["content"])
    assert out[1]["content"][0]["text"].startswith(SUMMARY_PREFIX)
    assert b(out[2:]) == b(history[-2:])
    assert problems(out) == []


def test_every_task_and_error_from_old_exchanges_is_in_the_summary_of_a_40_step_history(store):
    result, _client = long_run(store)
    steps = store.steps(result.run_id)
    history = rebuild_messages(store, result.run_id)
    assert len(pairs_of(history)) == 40
    out = compact(history, keep_last=1, threshold_tokens=THRESHOLD)
    text = summary_text(out)
    blocks = summary_blocks(out)[1:]
    assert len(blocks) == 39  # steps 1..39 summarised, the end_turn step kept
    tasks = {t.idempotency_key: t for t in store.list_tasks(run_id=result.run_id)}
    expected_keys = {task_key(n) for n in range(1, 40) if not long_run_model.makes_invalid_task(n)}
    assert set(tasks) == expected_keys
    for key, task in tasks.items():
        assert json.dumps(task.title, ensure_ascii=False) in text
        assert f'created task #{task.id} key "{key}"' in text
    errors_seen = 0
    for step in steps[:39]:
        block = blocks[step.n - 1]["text"]
        assert block.startswith(f"Step {step.n}:")
        results = {r["tool_use_id"]: r for r in step_blocks(step, "tool_results")}
        for call in (c for c in step_blocks(step, "assistant") if c["type"] == "tool_use"):
            line = f"- called {call['name']} {json.dumps(call['input'], ensure_ascii=False, separators=(',', ':'))}"
            assert line in block
            answer = results[call["id"]]
            if answer.get("is_error"):
                code = json.loads(answer["content"])["error"]["code"]
                assert f"-> error {code}:" in block
                errors_seen += 1
            else:
                assert "-> ok" in block
        # Payloads are dropped: no mail from the inbox reads appears in the summary.
        assert "Finance locks the sheet" not in block
    assert errors_seen == sum(1 for n in range(1, 40) if long_run_model.makes_invalid_task(n)) + sum(
        1 for n in range(1, 40) if long_run_model.calls_unknown_tool(n))
    assert "-> error invalid_input:" in text and "-> error unknown_tool:" in text
    assert "8 item(s)" in text
    assert estimate_tokens(out) < estimate_tokens(history) * 0.25


def test_the_summary_reads_back_as_the_calls_it_summarises(store):
    result, _client = long_run(store, steps=30)
    steps = store.steps(result.run_id)
    history = rebuild_messages(store, result.run_id)
    assert summarised_calls(history) == []  # not compacted: nothing summarised
    read_back = summarised_calls(compact(history, threshold_tokens=0))
    expected = []
    for step in steps[:-1]:
        results = {r["tool_use_id"]: r for r in step_blocks(step, "tool_results")}
        for call in (c for c in step_blocks(step, "assistant") if c["type"] == "tool_use"):
            payload = json.loads(results[call["id"]]["content"])
            expected.append((step.n, call["name"], call["input"], payload.get("ok", False),
                             (payload.get("error") or {}).get("code"), bool(payload.get("created"))))
    assert [(c.step, c.name, c.input, c.ok, c.error_code, c.created) for c in read_back] == expected


def test_the_offline_model_finishes_under_compaction_and_writes_the_same_brief(tmp_path):
    briefs, calls = [], []
    for name, compact_at in (("plain", 0), ("compacted", 1_500)):
        opened = open_store(tmp_path / f"{name}.db")
        try:
            client = OfflineClient(delay=0)
            result = run_brief(opened, client=client, compact_at=compact_at)
            assert result.status == "done"
            steps = opened.steps(result.run_id)
            keys = [t.idempotency_key for t in opened.list_tasks(run_id=result.run_id)]
            assert len(keys) == len(set(keys)) == 6
            briefs.append(result.final_text)
            calls.append((client.calls, [s.compacted_est_tokens is not None for s in steps]))
        finally:
            opened.close()
    assert calls[0] == (3, [False, False, False])
    # Steps 3 and 4 were sent compacted: the reads were summarised away, so the model read again (one
    # extra call) but did not create the tasks again, and its brief is the one it writes without compaction.
    assert calls[1] == (4, [False, False, True, True])
    assert briefs[1] == briefs[0] and briefs[0].count("new: Follow up:") == 6


def test_verbose_cli_says_which_requests_were_compacted(db_path):
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0"}
    done = subprocess.run(dayflow_cmd("brief", "-v", "--compact-at", "1500", "--db", str(db_path)),
                          capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    marked = [lines[i - 1].split("]")[0] + "]" for i, line in enumerate(lines)
              if line.startswith("    (request compacted: ~")]
    assert marked == ["[step 3]", "[step 4]"]
    opened = open_store(db_path, create=False)
    try:
        [run] = opened.list_runs()
        steps = opened.steps(run.id)
        assert f"~{steps[2].request_est_tokens:,} -> ~{steps[2].compacted_est_tokens:,}" in done.stdout
    finally:
        opened.close()


def test_every_compacted_request_of_a_run_passes_the_api_rules(store):
    result, _client = long_run(store, steps=25)
    history = rebuild_messages(store, result.run_id)
    checked = 0
    ends = [end for end in range(1, len(history) + 1) if history[end - 1]["role"] == "user"] + [len(history)]
    for end in ends:  # every request the run sent, and the finished history
        prefix = history[:end]
        for keep_last in (0, 1, 2, 3):
            for threshold in (0, 2_000, 6_000):
                out = compact(prefix, keep_last=keep_last, threshold_tokens=threshold)
                assert problems(out) == [], (end, keep_last, threshold)
                assert cache_breakpoints(build_request("m", out)) <= 4
                checked += out is not prefix
    assert checked > 100


def test_the_validator_catches_what_the_api_rejects():
    call = {"type": "tool_use", "id": "t1", "name": "read_inbox", "input": {}}
    answer = {"type": "tool_result", "tool_use_id": "t1", "content": "{}"}
    task = {"role": "user", "content": "task"}
    good = [task, {"role": "assistant", "content": [call]}, {"role": "user", "content": [answer]}]
    assert problems(good) == []
    assert problems([task, {"role": "user", "content": "more"}]) == []  # the API merges consecutive user turns
    broken = {
        "orphan tool_use": good[:2],
        "result answers nothing": [task, {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
                                   {"role": "user", "content": [answer]}],
        "two assistant turns": [task, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}],
        "merged turn puts a result after text": [*good[:2], {"role": "user", "content": "note"},
                                                 {"role": "user", "content": [answer]}],
        "starts with assistant": good[1:],
        "result not first": [*good[:2], {"role": "user", "content": [{"type": "text", "text": "x"}, answer]}],
        "wrong id": [*good[:2], {"role": "user", "content": [{**answer, "tool_use_id": "t2"}]}],
        "unsigned thinking": [task, {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]}],
        "empty text": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
        "duplicate id": [*good, {"role": "assistant", "content": [call]}, {"role": "user", "content": [answer]}],
    }
    for name, messages in broken.items():
        assert problems(messages), name


def test_a_trailing_end_turn_step_counts_as_a_pair_of_its_own(store):
    result, _client = long_run(store, steps=10)
    history = rebuild_messages(store, result.run_id)
    assert history[-1]["role"] == "assistant" and history[-2]["role"] == "user"
    pairs = pairs_of(history)
    assert len(pairs) == 10 and len(pairs[-1]) == 1
    one = compact(history, keep_last=1, threshold_tokens=0)
    assert b(one[2:]) == b(history[-1:])
    assert len(summary_blocks(one)) == 1 + 9
    two = compact(history, keep_last=2, threshold_tokens=0)
    assert b(two[2:]) == b(history[-3:])
    assert [m["role"] for m in two] == ["user", "user", "assistant", "user", "assistant"]
    assert len(summary_blocks(two)) == 1 + 8
    assert problems(one) == problems(two) == []


def _thinking_history(steps: int) -> list[dict]:
    history = [{"role": "user", "content": "Plan my day."}]
    for n in range(1, steps + 1):
        history.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": f"secret reasoning {n}", "signature": f"sig-{n}-" + "A" * 40},
            {"type": "redacted_thinking", "data": f"opaque-{n}"},
            {"type": "text", "text": f"Reading, step {n}."},
            {"type": "tool_use", "id": f"toolu_{n}", "name": "read_inbox", "input": {"limit": 8}}]})
        history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}",
             "content": json.dumps({"ok": True, "count": 8, "mails": ["x" * 250] * 8})}]})
    return history


def test_thinking_in_kept_turns_goes_back_byte_for_byte_and_old_thinking_is_dropped_whole():
    history = _thinking_history(8)
    out = compact(history, keep_last=2, threshold_tokens=0)
    assert problems(out) == []
    assert b(out[2:]) == b(history[-4:])  # signatures and redacted data untouched
    assert out[-2]["content"][0]["type"] == "thinking"  # the latest turn still starts with its thinking
    sent = json.dumps(out)
    for n in range(1, 7):  # summarised steps: no thinking text, signature or data survives, nothing is edited
        assert f"secret reasoning {n}" not in sent and f"sig-{n}-" not in sent and f"opaque-{n}" not in sent
        assert f"Reading, step {n}." in summary_text(out)
    for n in (7, 8):
        assert f"secret reasoning {n}" in sent and f"opaque-{n}" in sent
    assert not any(blk["type"] in ("thinking", "redacted_thinking") for blk in out[1]["content"])


def test_a_steps_summary_depends_only_on_that_step_so_the_prefix_stays_cacheable(store):
    result, _client = long_run(store, steps=16)
    history = rebuild_messages(store, result.run_id)[:-1]
    earlier = compact(history[:-2], threshold_tokens=0)
    later = compact(history, threshold_tokens=0)
    strip = [{k: v for k, v in blk.items() if k != "cache_control"} for blk in earlier[1]["content"]]
    assert later[1]["content"][: len(strip)] == strip
    marked = [blk for m in later for blk in m["content"] if isinstance(blk, dict) and "cache_control" in blk]
    assert marked == [later[1]["content"][-1]]


def test_compaction_never_makes_a_request_bigger():
    history = [{"role": "user", "content": "task"},
               {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
               {"role": "user", "content": "next"},
               {"role": "assistant", "content": [{"type": "text", "text": "done"}]}]
    assert compact(history, threshold_tokens=0) is history


def test_bad_input_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="keep_last"):
        compact([{"role": "user", "content": "x"}], keep_last=-1, threshold_tokens=0)
    with pytest.raises(ValueError, match="first message"):
        compact([{"role": "assistant", "content": "x" * 100}], threshold_tokens=0)
    with pytest.raises(ValueError, match="message 3: a 'user' turn cannot follow a 'user' turn"):
        compact([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                 {"role": "user", "content": "z"}, {"role": "user", "content": "w" * 100}], threshold_tokens=0)


# -- wired into runs -----------------------------------------------------------


def test_a_run_with_compaction_sends_compacted_requests_and_stores_every_step_in_full(store):
    result, client = long_run(store, compact_at=THRESHOLD)
    run = store.get_run(result.run_id)
    assert run.compact_at == THRESHOLD
    steps = store.steps(run.id)
    compacted = 0
    for k, (step, request) in enumerate(zip(steps, client.requests)):
        stored_history = rebuild_messages(store, run.id, steps[:k])
        assert step.request_est_tokens == estimate_tokens(stored_history)
        assert problems(request["messages"]) == []
        if step.request_est_tokens > THRESHOLD:
            compacted += 1
            assert step.compacted_est_tokens == estimate_tokens(request["messages"]) < step.request_est_tokens
            assert request["messages"][1]["content"][0]["text"].startswith(SUMMARY_PREFIX)
        else:
            assert step.compacted_est_tokens is None
            assert without_breakpoints(request["messages"]) == stored_history
        # What went over the wire is exactly the prepared view of what is stored.
        assert without_breakpoints(request["messages"]) == json.loads(json.dumps(
            prepare_messages(stored_history, THRESHOLD).messages))
    assert compacted >= 25
    # The database keeps every step in full: 40 assistant turns, every payload.
    full = rebuild_messages(store, run.id)
    assert len(full) == 1 + 2 * 39 + 1
    assert sum("Finance locks the sheet" in json.dumps(m) for m in full) == 39
    # The brief was written from the last, compacted request: every decision is still in it.
    # (the model lists every key it can find: the 34 created and the 5 refused for a bad due date)
    assert f"Tasks: {', '.join(task_key(n) for n in range(1, 40))}\n" in result.final_text
    assert result.final_text.endswith("Errors met: invalid_input, unknown_tool")
    # Compaction keeps the requests small: the last one is a fraction of the history.
    assert steps[-1].compacted_est_tokens < steps[-1].request_est_tokens / 4


def test_next_request_preview_is_exactly_what_the_next_call_sends(store):
    client = LongRunClient()
    stopped = run_brief(store, client=client, max_steps=20, compact_at=THRESHOLD)
    assert stopped.status == "budget"
    preview = next_request_preview(store, stopped.run_id)
    assert preview.compacted and preview.est_after < preview.est_before
    assert preview.est_before == estimate_tokens(rebuild_messages(store, stopped.run_id))
    assert preview.est_after == estimate_tokens(preview.messages)
    following = LongRunClient()
    resume(stopped.run_id, store=store, client=following, max_steps=21)
    assert without_breakpoints(following.requests[0]["messages"]) == json.loads(json.dumps(preview.messages))
    # Without compaction the preview is the history itself.
    store.update_limits(stopped.run_id, compact_at=0)
    plain = next_request_preview(store, stopped.run_id)
    assert not plain.compacted and plain.messages == rebuild_messages(store, stopped.run_id)


def test_resume_sets_or_clears_the_runs_threshold(store):
    stopped = run_brief(store, client=LongRunClient(), max_steps=3)
    assert store.get_run(stopped.run_id).compact_at is None
    resume(stopped.run_id, store=store, client=LongRunClient(), max_steps=4, compact_at=5_000)
    assert store.get_run(stopped.run_id).compact_at == 5_000
    resume(stopped.run_id, store=store, client=LongRunClient(), max_steps=5)
    assert store.get_run(stopped.run_id).compact_at == 5_000  # unchanged when not given
    resume(stopped.run_id, store=store, client=LongRunClient(), max_steps=6, compact_at=0)
    assert store.get_run(stopped.run_id).compact_at is None


def test_dayflow_compact_at_sets_the_default_threshold(store, monkeypatch):
    monkeypatch.setenv("DAYFLOW_COMPACT_AT", "7000")
    run = run_brief(store, client=LongRunClient(), max_steps=1)
    assert store.get_run(run.run_id).compact_at == 7000
    off = run_brief(store, client=LongRunClient(), max_steps=1, compact_at=0)
    assert store.get_run(off.run_id).compact_at is None
    monkeypatch.setenv("DAYFLOW_COMPACT_AT", "lots")
    with pytest.raises(DayflowError, match="DAYFLOW_COMPACT_AT"):
        run_brief(store, client=LongRunClient(), max_steps=1)


# -- the real console script ---------------------------------------------------


class LongRunAPI(LoopbackAPI):
    """The loopback API answering with the long-run script instead of the offline model."""

    def answer(self, body: dict) -> dict:
        return long_run_model.answer(body)


FAKE_KEY = "sk-ant-test-compaction-0123456789"


def _env(api: LoopbackAPI) -> dict:
    return {**os.environ, "ANTHROPIC_API_KEY": FAKE_KEY, "ANTHROPIC_BASE_URL": api.url,
            "DAYFLOW_FAKE_NOW": "2026-12-02T08:00:00+00:00", "DAYFLOW_OFFLINE_DELAY": "0"}


def _dayflow(api: LoopbackAPI, *args: str, db) -> subprocess.CompletedProcess:
    return subprocess.run(dayflow_cmd(*args, "--db", str(db)), capture_output=True, text=True, env=_env(api),
                          timeout=240, stdin=subprocess.DEVNULL)


BRIEF = ("brief", "--model", "claude-sonnet-5-5", "--compact-at", str(THRESHOLD), "--max-steps", "50")


def _outcome(db) -> tuple:
    from dayflow_tui.store import open_store

    opened = open_store(db, create=False)
    try:
        [run] = opened.list_runs()
        tasks = [(t.id, t.idempotency_key, t.title) for t in opened.list_tasks(run_id=run.id)]
        full = run.final_text, run.status, run.step_count, run.compact_at
        compacted = [s.compacted_est_tokens for s in opened.steps(run.id)]
        return full, tasks, compacted
    finally:
        opened.close()


@pytest.mark.slow  # 40-step runs through the real SDK, killed and resumed: left out of the quick loop
def test_cli_run_with_compaction_crashed_and_resumed_makes_the_same_calls_as_one_that_never_crashed(tmp_path):
    with LongRunAPI() as straight:
        done = _dayflow(straight, *BRIEF, db=tmp_path / "straight.db")
        assert done.returncode == 0, done.stderr
    with LongRunAPI() as crashed:
        first = _dayflow(crashed, *BRIEF, "--crash-after", "17", db=tmp_path / "crashed.db")
        assert first.returncode != 0 and "simulated crash after step 17" in first.stderr
        assert crashed.calls == 17
        second = _dayflow(crashed, "resume", db=tmp_path / "crashed.db")
        assert second.returncode == 0, second.stderr
        assert "replaying 17 committed step(s)" in second.stderr
    assert straight.calls == crashed.calls == 40
    assert crashed.requests == straight.requests  # the same 40 bodies, byte for byte as JSON
    compacted_requests = [r for r in straight.requests if len(r["messages"]) > 1 and r["messages"][1]["role"] == "user"
                          and r["messages"][1]["content"][0]["text"].startswith(SUMMARY_PREFIX)]
    assert len(compacted_requests) >= 25 and all(problems(r["messages"]) == [] for r in straight.requests)
    assert _outcome(tmp_path / "crashed.db") == _outcome(tmp_path / "straight.db")
    assert done.stdout == second.stdout and "Errors met: invalid_input, unknown_tool" in done.stdout
    show = subprocess.run(dayflow_cmd("show", _run_id(tmp_path / "crashed.db"), "--db", str(tmp_path / "crashed.db")),
                          capture_output=True, text=True, env=_env(crashed), timeout=60, stdin=subprocess.DEVNULL)
    assert show.returncode == 0, show.stderr
    assert show.stdout.count("request compacted: ~") == sum(1 for c in _outcome(tmp_path / "crashed.db")[2] if c)
    assert show.stdout.count("-> read_inbox") == 39  # every step shown in full


def _run_id(db) -> str:
    from dayflow_tui.store import open_store

    opened = open_store(db, create=False)
    try:
        return opened.list_runs()[0].id
    finally:
        opened.close()


@pytest.mark.slow  # 40-step runs through the real SDK, killed and resumed: left out of the quick loop
def test_cli_run_killed_during_a_call_resumes_with_the_same_calls(tmp_path):
    """SIGKILL while the model is answering call 23: that call is sent again, nothing else is."""
    with LongRunAPI() as straight:
        assert _dayflow(straight, *BRIEF, db=tmp_path / "straight.db").returncode == 0
    with LongRunAPI() as killed:
        hold = {}
        release = threading.Event()

        def never_answer(handler, body):
            hold["body"] = body
            release.wait(60)  # the process is killed while it waits for this answer
            return None

        killed.planned[23] = never_answer
        proc = subprocess.Popen(dayflow_cmd(*BRIEF, "--db", str(tmp_path / "killed.db")), env=_env(killed),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while "body" not in hold and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert "body" in hold, "call 23 never arrived"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        release.set()
        resumed = _dayflow(killed, "resume", db=tmp_path / "killed.db")
        assert resumed.returncode == 0, resumed.stderr
        assert "replaying 22 committed step(s)" in resumed.stderr
    assert killed.calls == 41
    assert killed.requests[22] == killed.requests[23]  # the unanswered call, sent again unchanged
    assert killed.requests[:23] + killed.requests[24:] == straight.requests
    assert _outcome(tmp_path / "killed.db") == _outcome(tmp_path / "straight.db")


def test_cli_compact_at_flag(tmp_path, db_path):
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0"}

    def run(*args):
        return subprocess.run(dayflow_cmd(*args, "--db", str(db_path)), capture_output=True, text=True, env=env,
                              timeout=60, stdin=subprocess.DEVNULL)

    bad = run("brief", "--compact-at", "lots")
    assert bad.returncode == 64 and len(bad.stderr.strip().splitlines()) == 1 and "--compact-at" in bad.stderr
    stopped = run("brief", "--compact-at", "30000", "--max-steps", "1")
    assert stopped.returncode == 3
    runs = json.loads(run("runs", "--json").stdout)
    assert runs[0]["compact_at"] == 30000
    from dayflow_tui.store import open_store

    opened = open_store(db_path, create=False)
    try:
        assert opened.get_run(runs[0]["id"]).compact_at == 30000
    finally:
        opened.close()
    assert run("resume", "--compact-at", "off", "--max-steps", "5").returncode == 0
    opened = open_store(db_path, create=False)
    try:
        assert opened.get_run(runs[0]["id"]).compact_at is None
    finally:
        opened.close()
    env["DAYFLOW_COMPACT_AT"] = "a lot"
    refused = run("brief")
    assert refused.returncode == 64 and refused.stderr.strip().splitlines() == [
        "dayflow: error: DAYFLOW_COMPACT_AT must be a number of tokens or 'off', got 'a lot'"]
