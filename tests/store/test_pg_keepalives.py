"""PostgreSQL connections carry TCP keepalives and ``tcp_user_timeout`` by default, on the client (libpq) and on
the server's side of the session, so a blackholed connection is found dead in about a minute on both ends
instead of hours (issue #29); the settings change them, and the URL's own parameters win."""

from __future__ import annotations

import pytest

from dayflow_tui.config import settings
from dayflow_tui.store import open_store

pytestmark = pytest.mark.postgres


def session(store) -> tuple[dict, dict]:
    """(libpq's connection parameters, the server's settings) of this thread's connection."""
    conn = store.db.connection()
    client = conn.info.get_parameters()
    server = {name: conn.execute(f"SHOW {name}").fetchone()[0]
              for name in ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
                           "tcp_user_timeout", "idle_in_transaction_session_timeout")}
    return client, server


def test_keepalives_are_on_by_default(pg_url):
    store = open_store(pg_url)
    try:
        client, server = session(store)
    finally:
        store.close()
    assert client["keepalives"] == "1" and client["keepalives_idle"] == "30"
    assert client["keepalives_interval"] == "10" and client["keepalives_count"] == "3"
    assert client["tcp_user_timeout"] == "60000"
    # The server's side (TCP connections only: a Unix socket has no keepalives and shows 0).
    assert server["tcp_user_timeout"] in ("60000", "0")  # milliseconds
    if server["tcp_user_timeout"] != "0":  # a TCP connection, as here
        assert server["tcp_keepalives_idle"] in ("30", "30s") and server["tcp_keepalives_count"] == "3"
    assert server["idle_in_transaction_session_timeout"] == "1min"  # still set, in the same round trip


def test_settings_change_them_and_the_url_wins(pg_url, monkeypatch):
    monkeypatch.setenv("DAYFLOW_PG_KEEPALIVES_IDLE", "0")
    monkeypatch.setenv("DAYFLOW_PG_TCP_USER_TIMEOUT", "5")
    store = open_store(pg_url)
    try:
        client, _server = session(store)
    finally:
        store.close()
    assert "keepalives_idle" not in client and client["tcp_user_timeout"] == "5000"
    monkeypatch.delenv("DAYFLOW_PG_KEEPALIVES_IDLE")
    store = open_store(pg_url + "&keepalives_idle=7")
    try:
        client, server = session(store)
    finally:
        store.close()
    assert client["keepalives_idle"] == "7"


def test_a_bad_setting_is_one_line(monkeypatch):
    monkeypatch.setenv("DAYFLOW_PG_KEEPALIVES_COUNT", "many")
    with pytest.raises(Exception) as caught:
        settings.load()
    assert "DAYFLOW_PG_KEEPALIVES_COUNT must be a number of probes" in str(caught.value)
