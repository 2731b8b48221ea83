"""The offline model's replies are SDK-shaped without the SDK: compared against ``anthropic.types.Message``.

The offline model builds its replies with ``offline_message`` (no ``anthropic``
import). Here every reply of real runs is parsed by the real SDK as well, and
both must agree on every field the loop reads and serialise to the same bytes,
key order included: what a run stores does not depend on which one built it.
"""

from __future__ import annotations

import json

import pytest
from anthropic.types import Message, TextBlock, ToolUseBlock, Usage

from dayflow_tui.agent import offline_message
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.agent.request import wire_blocks
from dayflow_tui.agent.offline_message import OfflineMessage

from ..conftest import CountingClient
from ..loopback_api import LoopbackAPI


@pytest.fixture
def sqlite_store(db_path):
    """Reply shapes do not depend on the backend: SQLite only."""
    from dayflow_tui.store import open_store

    opened = open_store(db_path)
    yield opened
    opened.close()


class RecordingClient(CountingClient):
    """The offline model, keeping every reply it gave."""

    def __init__(self):
        super().__init__()
        self.replies: list[OfflineMessage] = []

    def create(self, **request):
        reply = super().create(**{**request, "stream": False})  # whole replies, to compare with the SDK's
        self.replies.append(reply)
        return reply


def _same_as_sdk(reply: OfflineMessage) -> None:
    sdk = Message.model_validate(reply.to_dict(mode="json"))
    assert json.dumps(reply.to_dict(mode="json")) == json.dumps(sdk.to_dict(mode="json"))  # order too
    assert reply.to_json() == sdk.to_json()
    assert wire_blocks(reply) == wire_blocks(sdk)
    assert [json.dumps(b.to_dict(mode="json")) for b in reply.content] == \
        [json.dumps(b.to_dict(mode="json")) for b in sdk.content]
    for name in ("id", "model", "role", "type", "stop_reason", "stop_sequence"):
        assert getattr(reply, name) == getattr(sdk, name), name
    for name in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
                 "server_tool_use", "service_tier"):
        assert getattr(reply.usage, name) == getattr(sdk.usage, name), name
    for mine, theirs in zip(reply.content, sdk.content, strict=True):
        for name in ("type", "text", "id", "name", "input", "citations"):
            assert getattr(mine, name, "absent") == getattr(theirs, name, "absent"), name


@pytest.mark.parametrize("compact_at", [None, 1500], ids=["plain", "compacted"])
def test_every_offline_reply_matches_the_sdk_message(sqlite_store, compact_at):
    client = RecordingClient()
    result = run_brief(sqlite_store, client=client, compact_at=compact_at)
    assert result.status == "done" and len(client.replies) >= 3
    kinds = {block.type for reply in client.replies for block in reply.content}
    assert kinds == {"text", "tool_use"}
    for reply in client.replies:
        _same_as_sdk(reply)


def test_a_run_stores_the_same_rows_through_the_real_sdk(sqlite_store, tmp_path, monkeypatch):
    """The loopback server sends the offline replies as JSON; the real SDK parses them; the rows match."""
    from dayflow_tui.store import open_store

    def rows(opened, run_id):
        return [(s.stop_reason, s.assistant, s.tool_results, s.input_tokens, s.output_tokens,
                 s.cache_creation_input_tokens, s.cache_read_input_tokens) for s in opened.steps(run_id)]

    offline = run_brief(sqlite_store, client=CountingClient())
    ours = rows(sqlite_store, offline.run_id)
    with LoopbackAPI() as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-offline-message")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        other = open_store(tmp_path / "sdk.db")  # a fresh database: the same tasks to read, the same replies
        try:
            via_sdk = run_brief(other, model="claude-loopback-1")
            assert via_sdk.status == "done" and api.calls == 3
            assert rows(other, via_sdk.run_id) == ours
        finally:
            other.close()


def test_field_orders_are_the_sdks():
    """An SDK upgrade that adds or moves a field fails here, not silently in stored JSON."""
    assert offline_message.MESSAGE_FIELDS == tuple(Message.model_fields)
    assert offline_message.USAGE_FIELDS == tuple(Usage.model_fields)
    assert offline_message.BLOCK_FIELDS["text"] == tuple(TextBlock.model_fields)
    assert offline_message.BLOCK_FIELDS["tool_use"] == tuple(ToolUseBlock.model_fields)


def test_a_resumed_offline_run_needs_no_sdk_objects(sqlite_store):
    client = RecordingClient()
    started = run_brief(sqlite_store, client=client, max_steps=1)
    assert started.status == "budget"
    assert resume(started.run_id, store=sqlite_store, client=client, max_steps=5).status == "done"
    assert all(isinstance(reply, OfflineMessage) for reply in client.replies)


def test_bad_messages_are_refused():
    with pytest.raises(ValueError):
        OfflineMessage.model_validate({"content": "not a list"})
    with pytest.raises(ValueError):
        OfflineMessage.model_validate({"content": [{"text": "no type"}]})
    with pytest.raises(AttributeError):
        OfflineMessage.model_validate({"content": []}).no_such_field
