"""A real-model resume builds the SDK client in a background thread while it reads the history.

The subprocess test drives ``runs.resume`` in a fresh interpreter (``anthropic``
not yet imported) against the loopback API and looks inside while the
history is read: the build thread is already running. The in-process tests
pin down the hand-over: a failed background build is done again (and fails)
in the caller's thread, and a client built for another environment (another
base URL or key) is never handed out.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from dayflow_tui.agent import sdk_client
from dayflow_tui.agent.request import make_client
from dayflow_tui.agent.runs import run_brief
from dayflow_tui.config.errors import DayflowError
from dayflow_tui.store import open_store

from ..loopback_api import FAKE_KEY, LoopbackAPI

RESUME_IN_A_FRESH_PROCESS = r"""
import sys, threading
from dayflow_tui.agent import runs
from dayflow_tui.store import open_store, Store

seen = {}
original = Store.replay_steps

def watching(self, run_id):
    # While the history is read: is the SDK being built beside us, and by whom?
    seen.setdefault("threads", sorted(t.name for t in threading.enumerate()))
    return original(self, run_id)

Store.replay_steps = watching
assert "anthropic" not in sys.modules
store = open_store(sys.argv[1], create=False)
result = runs.resume(sys.argv[2], store=store)
print(result.status, "dayflow-sdk-client" in seen["threads"])
"""


@pytest.mark.slow  # two SDK imports (this process and a fresh one): left out of the quick loop
def test_a_real_model_resume_imports_the_sdk_while_it_reads_the_history(db_path, monkeypatch):
    with LoopbackAPI() as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        store = open_store(db_path)
        with pytest.raises(SystemExit):
            run_brief(store, model="claude-loopback-1", crash_after_step=1, run_id="bac000000001")
        store.close()
        assert api.calls == 1
        done = subprocess.run([sys.executable, "-c", RESUME_IN_A_FRESH_PROCESS, str(db_path), "bac000000001"],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["done", "True"]
        assert api.calls == 3  # the two steps that were missing, and no more


def test_a_failed_background_build_is_built_again_where_its_error_is_seen(monkeypatch):
    import anthropic

    built_in = []

    def flaky(**options):
        built_in.append(threading.current_thread().name)
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("transient")
        return ("client", options)

    monkeypatch.setattr(anthropic, "Anthropic", flaky)
    sdk_client.start({"max_retries": 7})
    assert sdk_client.build({"max_retries": 7}) == ("client", {"max_retries": 7})
    assert built_in == ["dayflow-sdk-client", "MainThread"]


def test_a_client_built_for_another_environment_is_not_handed_out(monkeypatch):
    import anthropic

    monkeypatch.setattr(anthropic, "Anthropic", lambda **options: object())
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-first")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
    sdk_client.start({})
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:2")
    second = sdk_client.build({})
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
    first = sdk_client.build({})  # the one started under the first URL, waited for
    assert first is not second
    assert sdk_client.build({}) is not first  # handed out once


def test_make_client_still_refuses_a_missing_key_and_bad_options(monkeypatch):
    with pytest.raises(DayflowError, match="ANTHROPIC_API_KEY"):
        make_client("claude-loopback-1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("DAYFLOW_API_TIMEOUT", "soon")
    with pytest.raises(DayflowError, match="DAYFLOW_API_TIMEOUT"):
        make_client("claude-loopback-1")
