"""Fixtures of the CLI tests: ``collect``, a running ``dayflow collect`` (tests/cli/test_otlp_collect*.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from ..conftest import dayflow_cmd
from ..reliability_helpers import cli_env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Collect:
    """A running ``dayflow collect`` on a free port."""

    def __init__(self, db, tmp_path, **env):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/traces"
        self.log = tmp_path / f"collect-{self.port}.log"
        self.err = self.log.open("wb")
        self.proc = subprocess.Popen(dayflow_cmd("collect", "--otlp-http", f"127.0.0.1:{self.port}", "--db", str(db)),
                                     stdout=subprocess.DEVNULL, stderr=self.err, stdin=subprocess.DEVNULL,
                                     env=cli_env(**env))
        deadline = time.monotonic() + 60
        while "listening on" not in self.said():
            assert self.proc.poll() is None, self.said()
            assert time.monotonic() < deadline, self.said()
            time.sleep(0.05)

    def said(self) -> str:
        return self.log.read_bytes().decode("utf-8", "replace")

    def post(self, body: bytes, content_type="application/json", path="/v1/traces", method="POST", **headers):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body if method == "POST" else None,
                                         method=method, headers={"Content-Type": content_type, **headers})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read()

    def stop(self, how=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(how)
        code = self.proc.wait(timeout=30)
        self.err.close()
        return code


@pytest.fixture
def collect(tmp_path):
    running = []

    def start(db, **env):
        running.append(Collect(db, tmp_path, **env))
        return running[-1]

    yield start
    for one in running:
        if one.proc.poll() is None:
            one.proc.kill()
            one.proc.wait()


