"""The two log formats in process: one line per event, redacted before it is cut, inert whatever it carries."""

from __future__ import annotations

import io
import json
import logging

import pytest

from dayflow_tui import redaction
from dayflow_tui.ops import logs

KEY = "sk-ant-api03-0123456789abcdefghijklmnop"


@pytest.fixture
def captured(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    stream = io.StringIO()

    def emit(fmt: str, message: str, **fields) -> list[str]:
        stream.seek(0)
        stream.truncate()
        logs.configure(log_format=fmt, log_level="debug", stream=stream)
        logs.event(logging.ERROR, "run.failed", message, **fields)
        return stream.getvalue().splitlines()

    yield emit
    logs.configure(log_format="text", log_level="info")


def test_json_is_one_object_per_line_with_the_fields(captured):
    lines = captured("json", "dayflow worker: run r1 failed: boom\nsecond line", run_id="r1", step=3, attempt=2,
                     duration_s=1.23456789, reason=None)
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["level"] == "error" and entry["event"] == "run.failed" and entry["msg"].endswith("second line")
    assert entry["run_id"] == "r1" and entry["step"] == 3 and entry["attempt"] == 2
    assert entry["duration_s"] == 1.234568 and "reason" not in entry  # None fields are left out
    assert entry["time"].endswith("Z") and ":" in entry["worker_id"]


def test_text_is_the_message_on_one_line_with_controls_escaped(captured):
    lines = captured("text", "dayflow worker: run r1 failed: \x1b[2J\x9b31m\u202eevil\nFORGED")
    assert lines == ["dayflow worker: run r1 failed: \\x1b[2J\\x9b31m\\u202eevil\\nFORGED"]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_secret_is_redacted_before_the_cut(captured, fmt):
    redaction.also_secret("pg-password-4b1d")
    width = logs.JSON_WIDTH if fmt == "json" else logs.TEXT_WIDTH + 200
    # The key starts just before the cut: cut first, a piece of it would survive.
    message = "x" * (width - 20) + KEY + " and pg-password-4b1d"
    line = captured(fmt, message, reason=message)[0]
    assert KEY[:8] not in line and "pg-password-4b1d" not in line and "[redacted]" in line


def test_info_hides_debug_and_text_hides_events_without_a_line(monkeypatch):
    stream = io.StringIO()
    logs.configure(log_format="text", log_level="info", stream=stream)
    try:
        logs.event(logging.DEBUG, "model.call", "a call")
        logs.event(logging.INFO, "run.finished", "finished (its line is on stdout)", in_text=False)
        logs.event(logging.WARNING, "db.wait", "waiting")
        assert stream.getvalue().splitlines() == ["waiting"]
        logs.configure(log_format="json", log_level="info", stream=stream)
        logs.event(logging.INFO, "run.finished", "finished", in_text=False)
        assert json.loads(stream.getvalue().splitlines()[-1])["event"] == "run.finished"
    finally:
        logs.configure(log_format="text", log_level="info")
