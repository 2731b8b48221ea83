"""The real ``anthropic.Anthropic`` client over HTTP against a loopback stub.

Exercises the SDK-object-to-JSON path for real: what is stored is what the
server sent, and it goes back to the server verbatim.
"""

from __future__ import annotations

import pytest

from dayflow_tui.agent.messages import rebuild_messages
from dayflow_tui.config.errors import ModelCallFailed
from dayflow_tui.agent.runs import resume, run_brief

from ..loopback_api import LoopbackAPI

FAKE_KEY = "sk-ant-test-0123456789abcdefSECRET"


@pytest.fixture
def api(monkeypatch):
    with LoopbackAPI() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        yield server


def test_real_sdk_run_stores_the_wire_blocks_and_resends_them_verbatim(store, api, db_path):
    result = run_brief(store, model="claude-sonnet-5-5")
    assert result.status == "done" and api.calls == 3
    assert all(FAKE_KEY in h.get("x-api-key", "") + h.get("authorization", "") for h in api.headers)
    steps = store.steps(result.run_id)
    # Request k+1 carries step k's assistant turn exactly as stored: no added fields such as caller: null.
    for k in range(2):
        sent_back = api.requests[k + 1]["messages"][-2]["content"]
        assert sent_back == rebuild_messages(store, result.run_id, steps[: k + 1])[-2]["content"]
        assert all("caller" not in block for block in sent_back)
    assert api.requests[0]["system"][-1]["cache_control"] == {"type": "ephemeral"}
    if store.dialect.name == "postgres":  # no file to read: every row of every table, as text
        rows = [row for table in store.db.get_tables() for row in store.db.execute_sql(f"SELECT * FROM {table}")]
        assert len(rows) > 3 and FAKE_KEY not in repr(rows)
    store.close()
    for suffix in ("", "-wal"):
        path = f"{db_path}{suffix}"
        try:
            data = open(path, "rb").read()
        except FileNotFoundError:
            continue
        assert FAKE_KEY.encode() not in data


def test_server_fields_unknown_to_us_survive_the_round_trip(store, monkeypatch):
    with LoopbackAPI(extra_block_fields={"tool_use": {"caller": {"type": "direct"}}}) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        run_brief(store, model="claude-sonnet-5-5")
        resent = server.requests[1]["messages"][1]["content"]
        assert all(b.get("caller") == {"type": "direct"} for b in resent if b["type"] == "tool_use")


def test_auth_error_is_one_line_without_the_key_and_the_run_resumes(store, api):
    api.planned[2] = (401, {}, {"type": "error", "error": {"type": "authentication_error",
                                                             "message": "invalid x-api-key"}})
    with pytest.raises(ModelCallFailed) as failure:
        run_brief(store, model="claude-sonnet-5-5", run_id="feedfeedfeed")
    message = str(failure.value)
    assert "401" in message and "invalid x-api-key" in message and "\n" not in message
    assert FAKE_KEY not in message
    run = store.get_run("feedfeedfeed")
    assert run.status == "failed" and run.step_count == 1 and FAKE_KEY not in run.error
    result = resume("feedfeedfeed", store=store)
    assert result.status == "done" and api.calls == 4
    assert [s.n for s in store.steps("feedfeedfeed")] == [1, 2, 3]
