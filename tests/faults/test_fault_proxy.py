"""The fault proxy itself: it forwards faithfully and its faults are real (reset sockets, held bytes,
refused connects, a PostgreSQL transaction cut before or after its COMMIT reached the server)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
import uuid

import pytest

from ..conftest import PG_URL
from ..fault_proxy import FaultProxy


class _Echo(socketserver.ThreadingTCPServer):
    """An upstream that echoes every byte and records how each of its connections ended."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.ended: list[str] = []
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    while data := self.request.recv(4096):
                        self.request.sendall(data)
                    server.ended.append("closed")
                except ConnectionResetError:
                    server.ended.append("reset")

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


def _client(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(proxy.address, timeout=5)
    sock.settimeout(5)
    return sock


def _echoed(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def _gone(sock: socket.socket) -> bool:
    """The connection was cut: a read sees the end or a reset, not a timeout."""
    try:
        sock.sendall(b"after the cut")
        return sock.recv(4096) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def _wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_bytes_go_through_unchanged_both_ways():
    with _Echo() as echo, FaultProxy(echo.server_address) as proxy:
        payload = bytes(range(256)) * 400  # 100 KB: several reads and writes on each side
        with _client(proxy) as sock:
            assert _echoed(sock, payload) == payload
        assert proxy.accepted == 1


def test_cut_all_resets_every_connection_on_both_sides_and_new_ones_still_work():
    with _Echo() as echo, FaultProxy(echo.server_address) as proxy:
        first, second = _client(proxy), _client(proxy)
        assert _echoed(first, b"a") == b"a" and _echoed(second, b"b") == b"b"
        assert proxy.cut_all() == 2
        assert _gone(first) and _gone(second)
        assert _wait(lambda: len(echo.ended) == 2), echo.ended  # the server saw its clients vanish
        assert proxy.connections == 0
        with _client(proxy) as third:
            assert _echoed(third, b"c") == b"c"
        first.close()
        second.close()


def test_a_stall_holds_every_byte_then_delivers_it_in_order():
    with _Echo() as echo, FaultProxy(echo.server_address) as proxy:
        with _client(proxy) as sock:
            proxy.stall(1.0)
            started = time.monotonic()
            sock.sendall(b"one ")
            sock.sendall(b"two")
            sock.settimeout(0.5)
            with pytest.raises(socket.timeout):
                sock.recv(4096)  # nothing gets through while stalled
            sock.settimeout(10)
            got = b""
            while len(got) < 7:
                got += sock.recv(4096)
            assert got == b"one two"
            assert time.monotonic() - started >= 1.0
            assert _echoed(sock, b"flowing") == b"flowing"


def test_a_stall_can_be_ended_early():
    with _Echo() as echo, FaultProxy(echo.server_address) as proxy:
        with _client(proxy) as sock:
            proxy.stall(60.0)
            sock.sendall(b"held")
            sock.settimeout(0.3)
            with pytest.raises(socket.timeout):
                sock.recv(4096)
            proxy.end_stall()
            sock.settimeout(10)
            assert sock.recv(4096) == b"held"


def test_a_refusal_turns_new_connections_away_while_open_ones_go_on():
    with _Echo() as echo, FaultProxy(echo.server_address) as proxy:
        with _client(proxy) as open_one:
            proxy.refuse(1.0)
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(proxy.address, timeout=5)
            assert _echoed(open_one, b"still here") == b"still here"
            assert _wait(lambda: _connects(proxy), timeout=10)  # back on the same port afterwards


def test_an_outage_cuts_and_refuses():
    with _Echo() as echo, FaultProxy(echo.server_address) as proxy:
        sock = _client(proxy)
        assert proxy.outage(1.0) == 1
        assert _gone(sock)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(proxy.address, timeout=5)
        assert _wait(lambda: _connects(proxy), timeout=10)
        sock.close()


def test_an_outage_and_a_stall_can_be_ended_early():
    with _Echo() as echo, FaultProxy(echo.server_address) as proxy:
        proxy.outage(60.0)
        assert proxy.refusing
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(proxy.address, timeout=5)
        proxy.stall(60.0)
        proxy.end_faults()
        assert not proxy.refusing and not proxy.stalled
        assert _wait(lambda: _connects(proxy), timeout=10)  # long before the 60 s were up
        with _client(proxy) as sock:
            assert _echoed(sock, b"flowing") == b"flowing"


def _connects(proxy: FaultProxy) -> bool:
    try:
        socket.create_connection(proxy.address, timeout=5).close()
        return True
    except ConnectionRefusedError:
        return False


# -- triggers, on the real PostgreSQL server ------------------------------------------------------


@pytest.fixture
def pg_table():
    """A table of its own on the test server, and an admin connection to look at it directly."""
    if not PG_URL:
        pytest.skip("DAYFLOW_TEST_PG_URL is not set")
    import psycopg

    name = f"proxy_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f"CREATE TABLE {name} (v int)")
        try:
            yield name, admin
        finally:
            admin.execute(f"DROP TABLE {name}")


def _connect_through(proxy: FaultProxy):
    import psycopg

    app = f"proxytest_{uuid.uuid4().hex[:8]}"
    return psycopg.connect(proxy.url(PG_URL) + f"&application_name={app}", connect_timeout=5), app


def _sessions(admin, app: str) -> int:
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                         (app,)).fetchone()[0]


@pytest.mark.postgres
def test_a_cut_before_the_commit_reaches_the_server_rolls_the_transaction_back(pg_table):
    import psycopg

    table, admin = pg_table
    with FaultProxy() as proxy:
        conn, app = _connect_through(proxy)
        trigger = proxy.arm(f"INSERT INTO {table}", "COMMIT")
        conn.execute(f"INSERT INTO {table} VALUES (1)")
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
        assert trigger.fired == 1
        assert admin.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
        assert _wait(lambda: _sessions(admin, app) == 0)  # the server ended the session too
        conn.close()


@pytest.mark.postgres
def test_deliver_cuts_after_the_server_committed_and_the_client_never_hears_it(pg_table):
    import psycopg

    table, admin = pg_table
    with FaultProxy() as proxy:
        conn, _app = _connect_through(proxy)
        trigger = proxy.arm(f"INSERT INTO {table}", "COMMIT", deliver=True)
        conn.execute(f"INSERT INTO {table} VALUES (1)")
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
        assert trigger.fired == 1
        assert admin.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 1
        conn.close()


@pytest.mark.postgres
def test_a_trigger_matches_statements_psycopg_has_prepared(pg_table):
    """After a few uses psycopg sends COMMIT as a bare Bind/Execute of a prepared statement."""
    import psycopg

    table, admin = pg_table
    with FaultProxy() as proxy:
        conn, _app = _connect_through(proxy)
        for i in range(8):
            conn.execute(f"INSERT INTO {table} VALUES (%s)", (i,))
            conn.commit()
        trigger = proxy.arm(f"INSERT INTO {table}", "COMMIT")
        conn.execute(f"INSERT INTO {table} VALUES (%s)", (99,))
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
        assert trigger.fired == 1
        assert admin.execute(f"SELECT count(*) FROM {table} WHERE v = 99").fetchone()[0] == 0
        conn.close()


@pytest.mark.postgres
def test_an_outage_trigger_cuts_everything_and_refuses_with_no_gap_for_a_reconnect(pg_table):
    import psycopg

    table, admin = pg_table
    with FaultProxy() as proxy:
        conn, _app = _connect_through(proxy)
        bystander, _ = _connect_through(proxy)
        outage = proxy.arm(f"INSERT INTO {table}", action="outage", seconds=1.5)
        with pytest.raises(psycopg.OperationalError):
            conn.execute(f"INSERT INTO {table} VALUES (1)")
        assert outage.fired == 1
        with pytest.raises(psycopg.OperationalError):
            bystander.execute("SELECT 1")
        with pytest.raises(psycopg.OperationalError, match="(?i)refused"):
            _connect_through(proxy)
        assert _wait(lambda: _connects(proxy), timeout=10)
        again, _ = _connect_through(proxy)
        assert again.execute("SELECT 1").fetchone() == (1,)
        assert admin.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
        for c in (conn, bystander, again):
            c.close()


@pytest.mark.postgres
def test_a_stall_trigger_holds_the_statement_and_scope_all_cuts_the_others(pg_table):
    import psycopg

    table, _admin = pg_table
    with FaultProxy() as proxy:
        conn, _app = _connect_through(proxy)
        stall = proxy.arm(f"INSERT INTO {table}", action="stall", seconds=1.0)
        started = time.monotonic()
        conn.execute(f"INSERT INTO {table} VALUES (1)")
        assert time.monotonic() - started >= 1.0 and stall.fired == 1
        conn.commit()
        other, _ = _connect_through(proxy)
        proxy.arm(f"SELECT count(*) FROM {table}", scope="all")
        with pytest.raises(psycopg.OperationalError):
            conn.execute(f"SELECT count(*) FROM {table}")
        with pytest.raises(psycopg.OperationalError):
            other.execute("SELECT 1")
        conn.close()
        other.close()
