"""Shared fixtures: every test gets its own database (a file, or a PostgreSQL schema) and a quiet,
offline environment.

The ``store`` fixture (and ``db_target``, the same database as a ``--db`` value) is parametrised by
backend: every test using it runs on SQLite and, when ``DAYFLOW_TEST_PG_URL`` names a server, on
PostgreSQL in a schema of its own that is dropped afterwards (tests run in any order, or in parallel).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from dayflow_tui.agent.offline import OfflineClient
from dayflow_tui.store import open_store

BIN = Path(sys.executable).parent


# The quick loop (README: ``-m quick``, under a minute): the core tested in process or through a few
# short commands. Left out: the dashboard, tests that kill or race many processes, and ``slow`` ones.
QUICK_MODULES = {"test_store", "test_loop", "test_backends", "test_faults", "test_compaction", "test_cli",
                 "test_offline_message", "test_safe_text", "test_hostile_replies", "test_sdk_loopback",
                 "test_storage_size", "test_sdk_client", "test_startup_imports", "test_bench_items"}


def pytest_collection_modifyitems(config, items):
    """Mark the quick loop; put the long tests (``slow``: the crash trials) first, so under ``-n 2``
    both workers end together.

    The order is the same in every xdist worker (it depends only on the collected items).
    """
    for item in items:
        if item.module.__name__.rpartition(".")[2] in QUICK_MODULES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.quick)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def offline_env(monkeypatch, tmp_path):
    """No API key, no delay, a database under tmp_path, a pinned clock.

    The state directory (the spool of paid replies) and the config directory are the test's own too:
    tests run side by side (xdist) and reuse fixed run ids, so a spool shared through ``~/.local/state``
    could hand one test's reply to another; a developer's config file changes nothing here.
    """
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("DAYFLOW_MODEL", raising=False)
    monkeypatch.delenv("DAYFLOW_CALL_LOG", raising=False)
    monkeypatch.delenv("DAYFLOW_COMPACT_AT", raising=False)
    monkeypatch.delenv("DAYFLOW_OTEL_ENDPOINT", raising=False)  # a developer's live export stays out of tests
    monkeypatch.delenv("DAYFLOW_OTEL_CONTENT", raising=False)
    monkeypatch.setenv("DAYFLOW_OFFLINE_DELAY", "0")
    monkeypatch.setenv("DAYFLOW_DB", str(tmp_path / "env.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))  # the spool and the price cache stay in the test's folder
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.delenv("DAYFLOW_STATE_DIR", raising=False)
    monkeypatch.delenv("DAYFLOW_CONFIG", raising=False)
    monkeypatch.delenv("DAYFLOW_EDITOR", raising=False)


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "dayflow.db"


PG_URL = os.environ.get("DAYFLOW_TEST_PG_URL")
PG_SKIP_REASON = ("PostgreSQL backend not tested: DAYFLOW_TEST_PG_URL is not set "
                  "(e.g. postgresql://postgres@127.0.0.1:5432/test; .ci/run sets it)")


@contextlib.contextmanager
def pg_schema():
    """A fresh schema on the test server; yields a URL whose search_path points at it. Dropped after."""
    if not PG_URL:
        pytest.skip(PG_SKIP_REASON)
    import psycopg

    name = f"dayflow_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:  # the variable is set, so a missing server is a failure, not a skip
        pytest.fail(f"DAYFLOW_TEST_PG_URL={PG_URL}: cannot connect ({str(exc).strip().splitlines()[0]})")
    with admin:
        admin.execute("SET lock_timeout = '20s'")  # a leaked transaction fails the drop instead of hanging
        admin.execute(f'CREATE SCHEMA "{name}"')
        try:
            sep = "&" if "?" in PG_URL else "?"
            yield f"{PG_URL}{sep}options={quote(f'-csearch_path={name}', safe='')}"
        finally:
            admin.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request) -> str:
    return request.param


@pytest.fixture
def db_target(backend, db_path):
    """An empty database as a ``--db`` value: ``db_path`` on SQLite, a URL on PostgreSQL."""
    if backend == "sqlite":
        yield str(db_path)
        return
    with pg_schema() as url:
        yield url


@pytest.fixture
def pg_url():
    """PostgreSQL only: a URL to an empty schema of its own."""
    with pg_schema() as url:
        yield url


@pytest.fixture
def pg_proxy():
    """PostgreSQL only: a fault-injecting proxy (tests/fault_proxy.py) in front of the test server.

    ``pg_proxy.url(pg_url)`` is the same schema reached through it.
    """
    if not PG_URL:
        pytest.skip(PG_SKIP_REASON)
    from urllib.parse import urlsplit

    from .fault_proxy import FaultProxy

    server = urlsplit(PG_URL)
    with FaultProxy((server.hostname or "127.0.0.1", server.port or 5432)) as proxy:
        yield proxy


@pytest.fixture
def store(db_target):
    opened = open_store(db_target)
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
def api(monkeypatch):
    """A loopback Messages API (``loopback_api.LoopbackAPI``) that this process's real SDK talks to: the key and
    base URL in the environment, no SDK retries (a planned failure is seen at once), short back-offs."""
    from .loopback_api import LoopbackAPI

    with LoopbackAPI() as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("DAYFLOW_API_MAX_RETRIES", "0")
        monkeypatch.setenv("DAYFLOW_RETRY_BACKOFF", "0.05")
        yield server


@pytest.fixture
def counting_client():
    return CountingClient()


def dayflow_cmd(*args: str) -> list[str]:
    """The real console script installed beside this interpreter."""
    return [str(BIN / "dayflow"), *args]


def run_on_a_terminal(argv: list[str], *, stream: str, env: dict, timeout: float = 60):
    """Run ``argv`` with its ``stream`` ("stdout" or "stderr") on a pseudo-terminal; the other is piped.

    Returns the finished process and every byte written to the terminal.
    """
    import pty

    leader, follower = pty.openpty()
    other = "stderr" if stream == "stdout" else "stdout"
    done = subprocess.run(argv, env=env, timeout=timeout, stdin=subprocess.DEVNULL,
                          **{stream: follower, other: subprocess.PIPE})
    os.close(follower)
    written = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal is closed once everything written was read
            break
        if not chunk:
            break
        written += chunk
    os.close(leader)
    return done, written


@pytest.fixture
def private_pg(tmp_path):
    """A private PostgreSQL cluster of the test's own, to restart, crash or starve (tests/private_pg.py);
    stopped (``pg_ctl stop -m immediate``) at the end; skipped with the reason where initdb/pg_ctl are missing."""
    from .private_pg import PrivatePostgres, missing_reason

    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = PrivatePostgres(tmp_path / "cluster")
    cluster.init()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop("immediate")
