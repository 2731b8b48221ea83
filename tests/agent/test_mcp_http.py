"""Tools from a real MCP server over streamable HTTP (``mcp.http``, issue #27): the counting server of the stdio
tests served by uvicorn on a loopback port in its own process, behind a bearer token. The same crash-safety as
stdio: annotations decide, a kill mid-call is counted, a server that is down or breaks is a failed attempt."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dayflow_tui.agent.define import IDEMPOTENT, PLAIN, READ_ONLY
from dayflow_tui.agent.registry import load_agent
from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI, message_reply
from .test_mcp_tools import MODEL, SERVER, _calls_then_answers, _only_run, _results, bodies, env_for

TOKEN = "mcp-http-bearer-4d9e1b77c2"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class CountingHttpServer:
    """The counting server as its own process on ``127.0.0.1:port``; every request must carry the token."""

    def __init__(self, tmp_path: Path, *, slow: float = 0.0):
        self.count = tmp_path / "calls.txt"
        self.log = tmp_path / "server.log"
        self.port = free_port()
        self.slow = slow
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> "CountingHttpServer":
        env = {**os.environ, "COUNT_FILE": str(self.count), "SLOW_S": str(self.slow), "EXPECT_TOKEN": TOKEN,
               "HTTP_PORT": str(self.port)}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, str(SERVER)], env=env, stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"the HTTP MCP server did not listen: {self.log.read_text()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def http_server(tmp_path):
    made: list[CountingHttpServer] = []

    def make(**options) -> CountingHttpServer:
        server = CountingHttpServer(tmp_path, **options)
        made.append(server)
        return server.start()

    yield make
    for server in made:
        server.kill()


def http_agent_file(tmp_path: Path, url: str, *, timeout: float = 20, token: str = TOKEN) -> str:
    path = tmp_path / "mcp_http_agent.py"
    path.write_text(f'''
from dayflow_tui import Agent, mcp

agent = Agent(name="mcphttp", system="Use the tools.", task="What's the weather in Lisbon?", mcp_servers=[
    mcp.http("counting", {url!r}, headers={{"X-Client": "dayflow-tests"}},
             secret_headers={{"Authorization": "Bearer {token}"}}, timeout_s={timeout}, auto_approve=["send"])])
''')
    return f"{path}:agent"


def run_cli(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(dayflow_cmd(*args), env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def assert_token_nowhere(tmp_path: Path, *texts: str) -> None:
    """The bearer token (and its header line) is in no file but the agent's source and in no output."""
    for text in texts:
        assert TOKEN not in text
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "mcp_http_agent.py":
            assert TOKEN.encode() not in path.read_bytes(), path


def test_the_annotations_over_http_decide_kind_and_approval_and_the_token_is_never_recorded(tmp_path, monkeypatch,
                                                                                            http_server):
    server = http_server()
    monkeypatch.setenv("DAYFLOW_STATE_DIR", str(tmp_path / "state"))
    agent = load_agent(http_agent_file(tmp_path, server.url))
    found = {t.name: (t.kind, bool(t.needs_approval), t.server) for t in agent.tools}
    assert found == {
        "counting__look": (READ_ONLY, False, "counting"),
        "counting__radar": (READ_ONLY, False, "counting"),
        "counting__put": (IDEMPOTENT, False, "counting"),
        "counting__send": (PLAIN, False, "counting"),
        "counting__wipe": (PLAIN, True, "counting"),
    }
    shape = json.dumps(agent.describe())
    assert '"secret_headers": ["Authorization"]' in shape and TOKEN not in shape  # the name, never the value
    assert "dayflow-tests" in shape  # a plain header is recorded
    (server_def,) = agent.mcp_servers
    assert TOKEN not in repr(server_def) and TOKEN not in repr(agent)


def test_an_offline_run_over_http_counts_each_read_only_call_once_and_keeps_the_token_out(tmp_path, http_server):
    server = http_server()
    db = tmp_path / "dayflow.db"
    done = run_cli("run", http_agent_file(tmp_path, server.url), "--db", str(db), env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr
    assert sorted(bodies(server.count)) == ["end look", "end radar", "start look", "start radar"]
    results = _results(db)
    radar = next(r for r in results if isinstance(r["content"], list))
    assert [part["type"] for part in radar["content"]] == ["text", "image"]
    assert_token_nowhere(tmp_path, done.stdout, done.stderr)


def test_a_wrong_token_is_one_line_exit_75_with_nothing_written(tmp_path, http_server):
    server = http_server()
    db = tmp_path / "dayflow.db"
    refused = run_cli("run", http_agent_file(tmp_path, server.url, token="not-the-token-at-all"), "--db", str(db),
                      env=env_for(tmp_path))
    assert refused.returncode == 75
    assert "HTTP 401" in refused.stderr and "not-the-token-at-all" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert not db.exists() or open_store(db).list_runs() == []
    assert bodies(server.count) == []


@pytest.mark.parametrize("url, said", [
    ("ftp://127.0.0.1/mcp", "is not an http:// or https:// URL"),
    ("http:///mcp", "is not an http:// or https:// URL"),
    ("http://user:hunter2pass@127.0.0.1/mcp", "pass credentials in secret_headers"),
    ("http://127.0.0.1:notaport/mcp", "is not a URL"),
    ("https://mcp.example.com/mcp?access_token=hunter2pass", "access_token parameter looks like a credential"),
])
def test_a_bad_url_is_one_clear_line_at_the_agents_definition(tmp_path, url, said):
    path = tmp_path / "bad_agent.py"
    path.write_text(f'from dayflow_tui import Agent, mcp\nagent = Agent(name="bad", system="s", '
                    f'mcp_servers=[mcp.http("counting", {url!r})])\n')
    db = tmp_path / "dayflow.db"
    refused = run_cli("run", f"{path}:agent", "--db", str(db), env=env_for(tmp_path))
    assert refused.returncode == 1 and said in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "hunter2pass" not in refused.stderr
    assert not db.exists() or open_store(db).list_runs() == []


def test_a_timeout_of_zero_is_refused_at_definition():
    from dayflow_tui.agent import mcp_servers

    with pytest.raises(ValueError, match="timeout_s must be a number of seconds above 0"):
        mcp_servers.http("counting", "https://mcp.example.com/mcp", timeout_s=0)


def test_a_credential_in_plain_headers_is_refused_at_definition(tmp_path):
    path = tmp_path / "bad_agent.py"
    path.write_text('from dayflow_tui import Agent, mcp\nagent = Agent(name="bad", system="s", mcp_servers=['
                    f'mcp.http("counting", "https://mcp.example.com/mcp", headers={{"Authorization": "Bearer {TOKEN}"}})])\n')
    refused = run_cli("run", f"{path}:agent", "--db", str(tmp_path / "x.db"), env=env_for(tmp_path))
    assert refused.returncode == 1 and "carries a credential: pass it in secret_headers" in refused.stderr
    assert TOKEN not in refused.stderr


def _killed_mid_http_call(tmp_path, http_server, tool: str, arguments: dict, body: str):
    """``dayflow run`` SIGKILLed while the HTTP server runs the tool's body (the server lives on); resumed."""
    server = http_server(slow=30)
    ref = http_agent_file(tmp_path, server.url)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: _calls_then_answers(tool, arguments) for n in range(1, 10)}
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0")
        proc = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + 60
        while f"start {body}" not in bodies(server.count) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert f"start {body}" in bodies(server.count), proc.communicate(timeout=5)
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        (tmp_path / "calls.txt.fast").touch()  # a new call answers at once (the interrupted one sleeps on)
        resumed = run_cli("resume", _only_run(db), "--db", str(db), env=env)
        assert_token_nowhere(tmp_path, out, err, resumed.stdout, resumed.stderr)
        return api, db, server, resumed


def test_a_plain_http_tool_killed_mid_call_is_never_sent_again(tmp_path, http_server):
    api, db, server, resumed = _killed_mid_http_call(tmp_path, http_server, "counting__send", {"text": "hi"}, "send")
    assert resumed.returncode == 0, resumed.stderr
    assert bodies(server.count).count("start send") == 1
    (result,) = _results(db)
    assert result["is_error"] is True and "outcome_unknown" in result["content"]
    assert api.calls == 2


def test_an_idempotent_http_tool_killed_mid_call_runs_again(tmp_path, http_server):
    api, db, server, resumed = _killed_mid_http_call(tmp_path, http_server, "counting__put",
                                                     {"key": "k", "value": "v"}, "put")
    assert resumed.returncode == 0, resumed.stderr
    assert bodies(server.count).count("start put") == 2 and bodies(server.count).count("end put") == 1
    (result,) = _results(db)
    assert "stored k" in json.dumps(result) and not result.get("is_error")
    assert api.calls == 2


def test_a_server_down_at_start_is_exit_75_and_a_worker_gives_up_after_bounded_attempts(tmp_path, http_server):
    server = http_server()
    ref = http_agent_file(tmp_path, server.url)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: _calls_then_answers("counting__look", {"city": "Lisbon"}) for n in range(1, 10)}
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0", DAYFLOW_MAX_ATTEMPTS="3",
                      DAYFLOW_RETRY_BACKOFF="0.1")
        queued = run_cli("run", ref, "--model", MODEL, "--queue", "--db", str(db), env=env)
        assert queued.returncode == 0, queued.stderr
        run_id = _only_run(db)
        server.kill()
        down = run_cli("run", ref, "--model", MODEL, "--db", str(db), env=env)
        assert down.returncode == 75, down.stderr
        assert "MCP server counting could not be started" in down.stderr and "ConnectError" in down.stderr
        assert len(down.stderr.strip().splitlines()) == 1 and "Traceback" not in down.stderr
        assert _only_run(db) == run_id  # refused before a run was made
        # A worker claims the queued run with the server still down: each attempt fails and backs off, then the
        # run is given up (max_attempts), never retried in a loop.
        worker = run_cli("worker", "--once", "--db", str(db), env=env, timeout=180)
        store = open_store(db)
        try:
            run = store.get_run(run_id)
            assert run.status == "failed", (run.status, run.error, worker.stderr)
            assert "MCP server counting could not be started" in (run.error or "")
            assert 3 <= run.attempts <= 4
        finally:
            store.close()
        assert worker.stderr.count("could not be started") <= 4 and "Traceback" not in worker.stderr
        assert api.calls == 0 and bodies(server.count) == []  # nothing paid, no tool ran
        assert_token_nowhere(tmp_path, queued.stderr, down.stderr, worker.stdout, worker.stderr)


def test_a_server_killed_mid_call_is_a_failed_attempt_and_the_resume_answers_outcome_unknown(tmp_path, http_server):
    server = http_server(slow=30)
    ref = http_agent_file(tmp_path, server.url)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: _calls_then_answers("counting__send", {"text": "hi"}) for n in range(1, 10)}
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0")
        proc = subprocess.Popen(dayflow_cmd("run", ref, "--model", MODEL, "--db", str(db)), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + 60
        while "start send" not in bodies(server.count) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        server.kill()  # the connection drops mid-call: the dayflow process sees it, not a timeout
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 75, err
        assert "MCP server counting: send failed" in err and "Traceback" not in err
        restarted = CountingHttpServer(tmp_path)
        restarted.port = server.port  # the same URL (part of the agent's fingerprint)
        restarted.start()
        try:
            resumed = run_cli("resume", _only_run(db), "--db", str(db), env=env)
        finally:
            restarted.kill()
        assert resumed.returncode == 0, resumed.stderr
        assert bodies(server.count).count("start send") == 1
        (result,) = _results(db)
        assert "outcome_unknown" in result["content"]
        assert api.calls == 2
        assert_token_nowhere(tmp_path, out, err, resumed.stdout, resumed.stderr)


def test_a_server_that_hangs_over_http_is_cut_at_its_per_call_timeout(tmp_path, http_server):
    server = http_server(slow=60)
    ref = http_agent_file(tmp_path, server.url, timeout=2)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned = {n: _calls_then_answers("counting__put", {"key": "k", "value": "v"}) for n in range(1, 10)}
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0")
        hung = run_cli("run", ref, "--model", MODEL, "--db", str(db), env=env)
        assert hung.returncode == 75 and "did not answer within 2 s" in hung.stderr, hung.stderr
        # The command ended while the body still slept (no "end put"): the call was cut, not waited out.
        assert bodies(server.count) == ["start put"] and api.calls == 1


def test_a_server_restarted_between_two_calls_gets_the_second_call_once_on_a_new_session(tmp_path, http_server):
    """The server restarts between the steps of a run: the old session's call is refused (404, not run), and one
    new session sends it, once; the plain call is not lost as "outcome unknown"."""
    server = http_server()
    ref = http_agent_file(tmp_path, server.url)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        def look_first(handler, body):
            turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
            if turns == 0:
                return message_reply([{"type": "tool_use", "id": "toolu_look", "name": "counting__look",
                                       "input": {"city": "Lisbon"}}], "tool_use")(handler, body)
            if turns == 1:  # the first session is open in the dayflow process: the server restarts now
                server.kill()
                server.start()
                return message_reply([{"type": "tool_use", "id": "toolu_send", "name": "counting__send",
                                       "input": {"text": "hi"}}], "tool_use")(handler, body)
            return message_reply([{"type": "text", "text": "Done."}])(handler, body)
        api.planned = {n: look_first for n in range(1, 10)}
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0")
        done = run_cli("run", ref, "--model", MODEL, "--db", str(db), env=env)
        assert done.returncode == 0, done.stderr
        assert bodies(server.count) == ["start look", "end look", "start send", "end send"]
        results = _results(db)
        assert "sent 'hi'" in json.dumps(results) and api.calls == 3


def test_a_5xx_from_the_server_is_a_failed_attempt_not_the_tools_outcome(tmp_path, http_server):
    server = http_server()
    ref = http_agent_file(tmp_path, server.url)
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        def broken_then_call(handler, body):  # the gateway breaks once the model asked for the tool
            (tmp_path / "calls.txt.500").touch()
            return _calls_then_answers("counting__put", {"key": "k", "value": "v"})(handler, body)
        api.planned = {1: broken_then_call}
        api.planned.update({n: _calls_then_answers("counting__put", {"key": "k", "value": "v"}) for n in range(2, 10)})
        env = env_for(tmp_path, **api.env(), DAYFLOW_API_MAX_RETRIES="0")
        broken = run_cli("run", ref, "--model", MODEL, "--db", str(db), env=env)
        assert broken.returncode == 75 and "HTTP 500" in broken.stderr, broken.stderr
        assert "start put" not in bodies(server.count)
        (tmp_path / "calls.txt.500").unlink()
        resumed = run_cli("resume", _only_run(db), "--db", str(db), env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert bodies(server.count).count("start put") == 1  # idempotent: sent again once the server was back
        assert "stored k" in json.dumps(_results(db)) and api.calls == 2


def test_a_tool_list_changed_on_the_http_server_is_refused_on_resume(tmp_path, http_server):
    server = http_server()
    ref = http_agent_file(tmp_path, server.url)
    db = tmp_path / "dayflow.db"
    started = run_cli("run", ref, "--max-steps", "1", "--db", str(db), env=env_for(tmp_path))
    assert started.returncode in (0, 3), started.stderr
    run_id = _only_run(db)
    before = db.read_bytes()
    server.kill()
    Path(str(server.count) + ".v2").touch()  # the server comes back listing one more tool
    server.start()
    refused = run_cli("resume", run_id, "--db", str(db), env=env_for(tmp_path))
    assert refused.returncode == 1 and "changed" in refused.stderr and "counting__extra" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert db.read_bytes() == before


def test_the_example_http_agent_runs_offline_against_the_example_server(tmp_path):
    examples = Path(__file__).parents[2] / "examples"
    port, token = free_port(), "example-token-5b1e0c9d"
    with open(tmp_path / "server.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, str(examples / "mcp_weather_server.py"), "--http", str(port)],
                                env={**os.environ, "WEATHER_MCP_TOKEN": token}, stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "server.log").read_text()
                time.sleep(0.05)
        db = tmp_path / "x.db"
        done = subprocess.run(dayflow_cmd("run", f"{examples / 'mcp_http_agent.py'}:agent", "--db", str(db)),
                              env=env_for(tmp_path, WEATHER_MCP_URL=f"http://127.0.0.1:{port}/mcp",
                                          WEATHER_MCP_TOKEN=token),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "weather__forecast" in done.stdout and "21 °C" in done.stdout
        assert token.encode() not in db.read_bytes() and token not in done.stdout + done.stderr
    finally:
        proc.kill()
        proc.wait(30)


def test_a_changed_hint_or_server_setting_is_named_when_a_resume_is_refused():
    from dayflow_tui.agent.registry import what_changed

    before = {"tools": {"counting__send": {}}, "mcp_tools": {"counting__send": {"server": "counting",
                                                                                 "annotations": {}}},
              "mcp_servers": {"counting": {"url": "http://127.0.0.1:1/mcp"}}}
    after = {"tools": {"counting__send": {}}, "mcp_tools": {"counting__send": {"server": "counting",
                                                                                "annotations": {"openWorldHint": True}}},
             "mcp_servers": {"counting": {"url": "http://127.0.0.1:2/mcp"}}}
    assert what_changed(before, after) == ["MCP server counting's settings", "tool counting__send's MCP annotations"]
    assert what_changed(before, before) == ["its definition"]
    recorded_before_hints = {key: value for key, value in before.items() if key != "mcp_tools"}
    assert what_changed(recorded_before_hints, before) == ["tool counting__send's MCP annotations"]
