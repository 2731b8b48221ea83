"""Every call streams (issue #26): the reply folded from its events is the message the API meant, pieces reach
a watcher as they arrive, and a stream that breaks is a failed attempt, never a reply bought twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest
from anthropic.types import Message
from hypothesis import given, settings as hsettings, strategies as st

from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.agent.streaming import MessageFolder, events_of, sse_bytes, sse_events, sse_lines
from dayflow_tui.agent.worker import work
from dayflow_tui.config.errors import StreamBroken
from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI, broken_stream, raw_reply, slow_stream

MODEL = "claude-loopback-1"
CITATION = {"type": "web_search_result_location", "cited_text": "x", "encrypted_index": "e", "title": "A page",
            "url": "https://example.com"}


# -- folding -------------------------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
_json = st.recursive(st.none() | st.booleans() | st.integers() | _text,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                     max_leaves=8)
_blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _text),
    st.builds(lambda t, c: {"type": "text", "text": t, "citations": [c]}, _text, st.dictionaries(_text, _text)),
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, _text, _text),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, _text),
    st.builds(lambda i, n, a: {"type": "tool_use", "id": "toolu_" + i, "name": n, "input": a},
              st.text("abc123", min_size=1, max_size=8), st.text("abcdef_", min_size=1, max_size=12),
              st.dictionaries(_text, _json, max_size=4)),
    st.builds(lambda a, extra: {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": a,
                                **extra}, st.dictionaries(_text, _json, max_size=3),
              st.dictionaries(st.sampled_from(["caller", "x_new_field"]), _json, max_size=2)),
    st.builds(lambda x: {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": x}, _json),
)


def _message(blocks, stop="end_turn", usage=None):
    return {"id": "msg_fold", "type": "message", "role": "assistant", "model": MODEL, "content": blocks,
            "stop_reason": stop, "stop_sequence": None,
            "usage": usage or {"input_tokens": 12, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 4,
                               "output_tokens": 9}}


@hsettings(max_examples=150, deadline=None)
@given(st.lists(_blocks, max_size=5), st.sampled_from(["end_turn", "tool_use", "max_tokens", None]),
       st.integers(1, 7))
def test_a_message_streamed_and_folded_is_the_same_message_field_for_field_and_in_order(blocks, stop, piece):
    message = _message(blocks, stop)
    framed = sse_bytes(events_of(message, piece=piece))
    chunks = [framed[at:at + 7] for at in range(0, len(framed), 7)]  # lines and characters cut across chunks
    folder = MessageFolder()
    for name, data in sse_events(sse_lines(chunks)):
        folder.feed_sse(name, data)
    assert json.loads(folder.body()) == message
    assert folder.body() == json.dumps(message, ensure_ascii=False, separators=(",", ":"))  # order kept too


def test_the_folder_applies_the_apis_delta_rules():
    """The rules of the SDK's ``accumulate_event``: usage totals replace, citations append, a signature is set."""
    folder = MessageFolder()
    for event in [
        {"type": "message_start", "message": _message([], None, {"input_tokens": 5, "output_tokens": 1})},
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "", "citations": None}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Per the page"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta",
                                                               "citation": CITATION}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "create_task", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"ti'}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": 'tle": "x"}'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 40, "input_tokens": None, "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}}},
        {"type": "message_stop"},
    ]:
        folder.feed(event)
    folded = json.loads(folder.body())
    assert folded["content"][0]["text"] == "Per the page"
    assert folded["content"][0]["citations"] == [CITATION]
    assert folded["content"][1]["input"] == {"title": "x"}
    assert folded["stop_reason"] == "tool_use"
    assert folded["usage"] == {"input_tokens": 5, "output_tokens": 40,
                               "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}}
    Message.model_validate(folded)  # the SDK reads what was folded


@pytest.mark.parametrize("events, why", [
    ("event: message_start\ndata: {not json\n\n", "is not JSON"),
    ('event: content_block_start\ndata: {"type":"content_block_start","index":0,'
     '"content_block":{"type":"text","text":""}}\n\n', "before message_start"),
])
def test_events_that_make_no_message_are_kept_as_received_with_the_reason(events, why):
    """Kept as framed by the folder (one event per frame), which is what a person reads with `show --raw`."""
    folder = MessageFolder()
    for name, data in sse_events(sse_lines([events.encode()])):
        folder.feed_sse(name, data)
    assert why in folder.problem
    assert folder.body().endswith(events)  # the bytes as received, for `dayflow show --raw`


# -- through the real SDK over a loopback socket --------------------------------------------------------------

def test_a_run_streams_every_call_and_a_watcher_sees_each_piece_as_it_arrives(store, api):
    api.planned = {1: slow_stream(0.005)}
    pieces = []
    result = run_brief(store, model=MODEL, on_delta=pieces.append)
    assert (result.status, api.calls) == ("done", result.steps)
    assert all(r.get("stream") is True for r in api.requests)
    steps = store.steps(result.run_id)
    for step in steps:
        mine = [p for p in pieces if p.n == step.n]
        for index, block in enumerate(json.loads(step.assistant)):
            got = [p for p in mine if p.index == index]
            assert got[0].kind == "start" and got[0].text.startswith(block["type"])
            if block["type"] == "text":
                assert "".join(p.text for p in got if p.kind == "text") == block["text"]
            if block["type"] == "tool_use":
                assert got[0].text == f"tool_use:{block['name']}"
                assert json.loads("".join(p.text for p in got if p.kind == "input")) == block["input"]
    assert len(pieces) > 3 * len(steps)  # small pieces, not one per block


def test_a_server_that_answers_a_stream_with_a_whole_message_is_taken_at_its_word(store, api):
    api.streams = False
    result = run_brief(store, model=MODEL)
    assert (result.status, api.calls) == ("done", result.steps)


@pytest.mark.parametrize("error_type", [None, "overloaded_error"], ids=["connection-closed", "overloaded-event"])
def test_a_stream_that_breaks_is_a_failed_attempt_then_resume_pays_once_per_step(store, api, error_type):
    api.planned = {1: broken_stream(4, error_type)}
    with pytest.raises(StreamBroken) as caught:
        run_brief(store, model=MODEL, run_id="broken000001")
    assert caught.value.exit_code == 75 and caught.value.error_type == error_type
    run = store.get_run("broken000001")
    assert run.step_count == 0 and run.status != "failed"
    assert "stream" in run.error and run.attempts == 1
    assert api.calls == 1
    done = resume("broken000001", store=store)
    assert done.status == "done"
    assert api.calls == done.steps + 1  # the broken reply was never delivered; every other call is one step


def test_streams_that_keep_breaking_end_the_run_failed_after_max_attempts_never_a_loop(store, api, monkeypatch):
    monkeypatch.setenv("DAYFLOW_MAX_ATTEMPTS", "3")
    api.planned = {n: broken_stream(2, "overloaded_error") for n in range(1, 20)}
    store.create_run("brief", model=MODEL, run_id="breaks000001", status="queued")
    for _ in range(6):
        work(store, once=True)
        if store.get_run("breaks000001").status == "failed":
            break
        time.sleep(0.05)
    run = store.get_run("breaks000001")
    assert run.status == "failed" and "gave up after 3 attempts" in run.error and "stream" in run.error
    assert api.calls == 3 and run.step_count == 0


def test_a_stream_whose_events_make_no_message_is_committed_once_and_the_run_fails(store, api):
    api.planned = {1: lambda handler, body: handler.send_events([
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                              "model": MODEL, "usage": {"input_tokens": 1, "output_tokens": 1}}},
        {"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "?"}},
        {"type": "message_stop"}])}
    result = run_brief(store, model=MODEL)
    assert (result.status, api.calls, result.steps) == ("failed", 1, 1)
    assert "cannot be used" in result.error
    (step,) = store.steps(result.run_id)
    assert "content_block_delta" in (step.raw or "")
    assert work(store, once=True).finished == [] and api.calls == 1  # no worker buys it again on its own


def test_a_whole_body_that_is_not_json_still_fails_once(store, api):
    api.planned = {1: lambda handler, body: raw_reply("not json at all")}
    result = run_brief(store, model=MODEL)
    assert (result.status, api.calls) == ("failed", 1)


def test_kill_9_mid_stream_is_one_process_death_and_resume_pays_once_per_step(db_target, tmp_path):
    with LoopbackAPI() as server:
        arrived = threading.Event()
        server.on_request = lambda n: arrived.set() if n == 2 else None
        server.planned = {2: slow_stream(0.2)}  # the second reply takes seconds to stream
        env = {**os.environ, **server.env(), "DAYFLOW_API_MAX_RETRIES": "0", "DAYFLOW_OFFLINE_DELAY": "0"}
        proc = subprocess.Popen(dayflow_cmd("brief", "--model", MODEL, "--db", db_target), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            assert arrived.wait(60)
            time.sleep(0.6)  # some events are out, the reply is not finished
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        store = open_store(db_target)
        try:
            (run,) = store.list_runs()
            assert run.step_count == 1
            resumed = subprocess.run(dayflow_cmd("resume", run.id, "--db", db_target), env=env, capture_output=True,
                                     text=True, timeout=120, stdin=subprocess.DEVNULL)
            assert resumed.returncode == 0, resumed.stderr
            run = store.get_run(run.id)
            assert run.status == "done"
            assert server.calls <= run.step_count + 1  # the invariant: one death, one call lost at most
            assert server.calls == run.step_count + 1
        finally:
            store.close()
