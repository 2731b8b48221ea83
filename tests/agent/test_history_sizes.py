"""The driver's running size estimate (agent/history_size.py) and a resume's history read once.

The estimate decides compaction, so it decides the request's bytes: the requests the loopback API receives
are compared with the same runs made with the estimate computed the old way (the whole history encoded for
every call). And it is cheap: a message is encoded once when it joins, and a resume encodes none of the
stored steps (their lengths are the stored text's).
"""

from __future__ import annotations

import pytest

from dayflow_tui.agent import history_size
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.money.tokens import estimate_tokens

from ..loopback_api import FAKE_KEY, LoopbackAPI, message_reply

MODEL = "claude-loopback-1"
STEPS = 14


def _planned(api: LoopbackAPI) -> None:
    """Replies 1..STEPS call read_inbox (step 6 is a pause_turn, whose continuation joins it), then a brief."""
    for k in range(1, STEPS + 1):
        if k == 6:
            api.planned[k] = message_reply([{"type": "text", "text": "Thinking about the inbox…"}], "pause_turn")
            continue
        api.planned[k] = message_reply([{"type": "text", "text": f"Step {k}: the inbox again, é ✓."},
                                        {"type": "tool_use", "id": f"toolu_hs{k:03d}", "name": "read_inbox",
                                         "input": {"limit": 20}}], "tool_use")
    api.planned[STEPS + 1] = message_reply([{"type": "text", "text": "Your day: nothing urgent."}], "end_turn")


def _crashed_then_resumed(store, monkeypatch) -> list[dict]:
    with LoopbackAPI() as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        _planned(api)
        with pytest.raises(SystemExit):
            run_brief(store, model=MODEL, compact_at=1500, max_steps=40, crash_after_step=8)
        [run] = [r for r in store.list_runs() if r.status != "done"]
        result = resume(run.id, store=store)
        assert result.status == "done"
        return api.requests


@pytest.fixture
def encodings(monkeypatch):
    """How many messages history_size encoded."""
    counted = []
    real = history_size.encoded_length

    def counting(message):
        counted.append(1)
        return real(message)

    monkeypatch.setattr(history_size, "encoded_length", counting)
    return counted


def test_the_requests_are_byte_for_byte_those_of_the_uncached_estimate(store, tmp_path, monkeypatch):
    cached = _crashed_then_resumed(store, monkeypatch)
    from dayflow_tui.store import open_store

    other = open_store(tmp_path / "uncached.db")
    monkeypatch.setattr(history_size.HistorySizes, "tokens", lambda self, messages: estimate_tokens(messages))
    uncached = _crashed_then_resumed(other, monkeypatch)
    other.close()
    assert len(cached) == STEPS + 1
    assert cached == uncached
    compacted = [r for r in cached if len(r["messages"]) > 1 and r["messages"][1]["role"] == "user"]
    assert compacted and len(compacted) < len(cached)  # the threshold was crossed mid-run, so the estimate mattered


def test_a_message_is_encoded_once_and_a_resume_encodes_no_stored_step(store, monkeypatch, encodings):
    requests = _crashed_then_resumed(store, monkeypatch)
    assert len(requests) == STEPS + 1
    # Each call: the new turns once plus the last one again; the resume: the task, then the same.
    # Encoding the whole history for every call would be ~STEPS**2 (about 200 here).
    assert 0 < len(encodings) <= 4 * (STEPS + 1)


def test_the_estimate_follows_a_history_changed_anywhere():
    messages = [{"role": "user", "content": "Prepare my day."},
                {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]
    sizes = history_size.HistorySizes()
    assert sizes.tokens(messages) == estimate_tokens(messages)
    messages.append({"role": "user", "content": [{"type": "text", "text": "ñ" * 50}]})
    assert sizes.tokens(messages) == estimate_tokens(messages)
    messages[-1]["content"].append({"type": "text", "text": "in place"})  # the last turn extended in place
    assert sizes.tokens(messages) == estimate_tokens(messages)
    messages[1] = {"role": "assistant", "content": [{"type": "text", "text": "an edit far back " * 9}]}
    assert sizes.tokens(messages) == estimate_tokens(messages)
    assert sizes.tokens(messages[:1]) == estimate_tokens(messages[:1])
    assert sizes.tokens([]) == estimate_tokens([])
