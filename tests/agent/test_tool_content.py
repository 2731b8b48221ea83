"""Tools that return images and documents (issue #26): sent as the API's blocks, stored once by hash, and the
issue's whole agent (thinking, web search, 20,000 max_tokens, an image tool, a 1-hour cache) killed, resumed
and forked against the loopback server through the real console script."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import threading
import time
from decimal import Decimal

import pytest

from dayflow_tui import Document, Image
from dayflow_tui.agent.tool_content import ToolContentError, content_blocks
from dayflow_tui.agent.tools import tool_result
from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI
from ..reliability_helpers import cli_env

MODEL = "claude-sonnet-4-5"
SIGNATURE = "EqQBCkgIARABGAIiQL3N4eWR1MbWVudCBzaWduYXR1cmUgb2YgdGhpbmtpbmc+/=="
# Not random: the same bytes every run, and base64 of it is far past blobs.MIN_CHARS.
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 600

AGENT_FILE = f'''
from dayflow_tui import Agent, Image, tool


@tool(read_only=True)
def radar(city: str) -> list:
    """Today's rain radar for a city, as an image, with a caption.

    Args:
        city: The city's name.
    """
    return [f"Rain radar for {{city}}", Image({PNG!r}, "image/png")]


agent = Agent(name="forecaster", system="Answer with today's weather.", tools=(radar,), max_tokens=20000,
              thinking={{"type": "enabled", "budget_tokens": 2048}}, cache_ttl="1h",
              server_tools=[{{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}}])
'''


def test_content_blocks_are_the_apis_and_bad_ones_are_the_tools_error():
    blocks = content_blocks(["caption", Image(b"\x89PNG..", "image/png"), Document(b"%PDF-1.7", title="Q1"),
                             Document(b"plain words", "text/plain"), {"type": "text", "text": "as given"}])
    assert [b["type"] for b in blocks] == ["text", "image", "document", "document", "text"]
    assert blocks[1]["source"] == {"type": "base64", "media_type": "image/png",
                                   "data": base64.b64encode(b"\x89PNG..").decode()}
    assert blocks[2]["title"] == "Q1" and blocks[2]["source"]["media_type"] == "application/pdf"
    assert blocks[3]["source"] == {"type": "text", "media_type": "text/plain", "data": "plain words"}
    for bad, why in [(Image(b"x", "image/tiff"), "cannot be sent"), (Image(b"", "image/png"), "no bytes"),
                     (Image(b"x" * (5 * 1024 * 1024 + 1), "image/png"), "5 MB"),
                     (Document(b"\xff\xfe", "text/plain"), "not UTF-8")]:
        with pytest.raises(ToolContentError, match=why):
            content_blocks([bad])
    answer = tool_result({"id": "toolu_1"}, Image(b"x", "image/bmp"), False)
    assert answer["is_error"] is True and "bad_content" in answer["content"]


def _message(content, stop, n, *, searches=0):
    return {"id": f"msg_content{n:02d}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 800, "output_tokens": 150, "cache_creation_input_tokens": 2000,
                      "cache_read_input_tokens": 5000 * (n - 1),
                      "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 2000},
                      "server_tool_use": {"web_search_requests": searches, "web_fetch_requests": 0}}}


def _script(handler, body):
    """Step 1 and 2: think, then call the radar; after two radars: search the web and answer."""
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    n = turns + 1
    if turns < 2:
        content = [{"type": "thinking", "thinking": f"Step {n}: look at the radar.", "signature": SIGNATURE},
                   {"type": "tool_use", "id": f"toolu_content{n:02d}_{len(body['messages'])}", "name": "radar",
                    "input": {"city": "Lisbon"}}]
        return 200, {}, _message(content, "tool_use", n)
    searched = [{"type": "server_tool_use", "id": f"srvtoolu_content{n}", "name": "web_search",
                 "input": {"query": "Lisbon weather"}},
                {"type": "web_search_tool_result", "tool_use_id": f"srvtoolu_content{n}", "content": [
                    {"type": "web_search_result", "url": "https://weather.example/lisbon", "title": "Lisbon",
                     "encrypted_content": "EqgfCioIARgBIiQ3YTA0", "page_age": "December 5, 2026"}]},
                {"type": "text", "text": "Lisbon: dry, 21 °C."}]
    return 200, {}, _message(searched, "end_turn", n, searches=1)


def _images_sent(request: dict) -> list[str]:
    found = []
    for message in request["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            for part in block.get("content") or [] if block.get("type") == "tool_result" else []:
                if isinstance(part, dict) and part.get("type") == "image":
                    found.append(part["source"]["data"])
    return found


def test_the_issues_agent_is_killed_resumed_and_forked_with_one_paid_call_per_step(tmp_path):
    agent_path = tmp_path / "forecaster.py"
    agent_path.write_text(AGENT_FILE)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: _script for n in range(1, 20)}
        second = threading.Event()
        api.on_request = lambda number: second.set() if number == 2 else None
        lane_env = cli_env(**api.env(), DAYFLOW_API_MAX_RETRIES="0")
        proc = subprocess.Popen(dayflow_cmd("run", f"{agent_path}:agent", "Weather in Lisbon?", "--model", MODEL,
                                            "--db", str(db)), env=lane_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        api.delay = 3.0  # every answer waits: the kill lands while call 2 is in flight
        try:
            assert second.wait(90), proc.stderr.read() if proc.poll() is not None else "no second call"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        api.delay = 0.0
        store = open_store(db)
        try:
            (run,) = store.list_runs()
            assert run.step_count == 1
            resumed = subprocess.run(dayflow_cmd("resume", run.id, "--db", str(db)), env=lane_env,
                                     capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
            assert resumed.returncode == 0, resumed.stderr
            run = store.get_run(run.id)
            assert (run.status, run.step_count) == ("done", 3)
            assert api.calls <= run.step_count + 1  # one death: one call lost at most
            before_fork = api.calls
            forked = subprocess.run(dayflow_cmd("fork", run.id, "--at", "1", "--run", "--db", str(db)),
                                    env=lane_env, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
            assert forked.returncode == 0, forked.stderr
            fork = next(r for r in store.list_runs() if r.id != run.id)
            assert fork.status == "done" and fork.parent_id == run.id
            assert api.calls - before_fork == fork.step_count - 1  # the copied step is not paid again

            # What the API received: the image on every request after a radar call, thinking signed, options.
            last = api.requests[-1]
            assert last["max_tokens"] == 20000 and last["thinking"]["budget_tokens"] == 2048
            assert last["stream"] is True
            assert all(data == base64.b64encode(PNG).decode() for data in _images_sent(last))
            assert len(_images_sent(api.requests[run.step_count - 1 + (api.calls - before_fork) - 1])) >= 1
            # Stored once: the steps and the journal hold references; one blob row holds the bytes.
            db_rows = store.db.execute_sql("SELECT COUNT(*), MAX(size) FROM blobs").fetchone()
            assert db_rows[0] == 1 and db_rows[1] == len(base64.b64encode(PNG))
            for step in store.steps(run.id):
                assert step.tool_results is None or base64.b64encode(PNG).decode()[:200] not in step.tool_results
            # The cost is the list price (Claude Sonnet 4.5: $3 in, $15 out, $0.30 cache reads, $6 one-hour
            # cache writes per MTok; $10 per 1,000 searches).
            listed = json.loads(subprocess.run(dayflow_cmd("runs", "--json", "--db", str(db)),
                                               env=cli_env(), capture_output=True, timeout=60).stdout)
            shown = next(r for r in listed if r["id"] == run.id)
            steps = store.steps(run.id)
            expected = sum(Decimal(3) * s.input_tokens - Decimal(3) * (s.cache_creation_input_tokens
                                                                       + s.cache_read_input_tokens)
                           + Decimal("0.30") * s.cache_read_input_tokens + Decimal(6) * s.cache_creation_input_tokens
                           + Decimal(15) * s.output_tokens for s in steps) / 1_000_000
            expected += Decimal(10) * sum(s.web_search_requests for s in steps) / 1000
            assert abs(Decimal(str(shown["cost_usd"])) - expected) < Decimal("0.000001"), (shown["cost_usd"], expected)
        finally:
            store.close()
