"""Shared fixtures: every test gets its own database file and a quiet, offline environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dayflow_tui.offline import OfflineClient
from dayflow_tui.store import open_store

BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def offline_env(monkeypatch, tmp_path):
    """No API key, no delay, a database under tmp_path, a pinned clock."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("DAYFLOW_MODEL", raising=False)
    monkeypatch.delenv("DAYFLOW_CALL_LOG", raising=False)
    monkeypatch.delenv("DAYFLOW_COMPACT_AT", raising=False)
    monkeypatch.setenv("DAYFLOW_OFFLINE_DELAY", "0")
    monkeypatch.setenv("DAYFLOW_DB", str(tmp_path / "env.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "dayflow.db"


@pytest.fixture
def store(db_path):
    opened = open_store(db_path)
    yield opened
    opened.close()


class CountingClient:
    """A fake model client: the offline model's answers, every call counted and recorded.

    ``fail_on`` maps a 1-based call number to an exception to raise instead.
    """

    def __init__(self, fail_on: dict[int, BaseException] | None = None):
        self._offline = OfflineClient(delay=0)
        self.calls = 0
        self.requests: list[dict] = []
        self.fail_on = fail_on or {}
        self.messages = self

    def create(self, **request):
        self.calls += 1
        # Deep-copy via JSON: what was sent, frozen at call time.
        import json

        self.requests.append(json.loads(json.dumps(request)))
        if self.calls in self.fail_on:
            raise self.fail_on[self.calls]
        return self._offline.messages.create(**request)


@pytest.fixture
def counting_client():
    return CountingClient()


def dayflow_cmd(*args: str) -> list[str]:
    """The real console script installed beside this interpreter."""
    return [str(BIN / "dayflow"), *args]
