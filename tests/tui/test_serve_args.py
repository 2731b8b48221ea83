"""``dayflow-tui --serve``'s address and what it says without textual-serve (no browser needed here)."""

from __future__ import annotations

import sys

import pytest

from dayflow_tui.config.errors import UsageError
from dayflow_tui.config.values import BadValue, address

from ..reliability_helpers import cli_env, text
from ..tui_helpers import TUI_BIN


@pytest.mark.parametrize(("given", "expected"), [("8001", ("127.0.0.1", 8001)), ("0.0.0.0:9000", ("0.0.0.0", 9000)),
                                                 ("localhost", ("localhost", 8000)), ("[::1]:8080", ("::1", 8080))])
def test_an_address_is_host_and_port_loopback_unless_told(given, expected):
    assert address(given) == expected


@pytest.mark.parametrize("given", ["::1", "host:0", "host:70000", "a b:80", ":80", "[::1"])
def test_a_bad_address_is_refused_with_the_form(given):
    with pytest.raises(BadValue, match="HOST:PORT"):
        address(given)


def test_a_bad_address_is_one_line_before_anything_is_served(tmp_path):
    import subprocess

    done = subprocess.run([str(TUI_BIN), "--db", str(tmp_path / "x.db"), "--serve", "host:70000"],
                          capture_output=True, env=cli_env(), timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "Traceback" not in text(done.stderr)
    assert "HOST:PORT with a port from 1 to 65535" in text(done.stderr) and not (tmp_path / "x.db").exists()


def test_without_textual_serve_it_says_what_to_install(monkeypatch):
    from dayflow_tui.tui.serve import make_server

    monkeypatch.setitem(sys.modules, "textual_serve.server", None)  # as if not installed
    with pytest.raises(UsageError, match=r"pip install 'dayflow-tui\[serve\]'"):
        make_server("true", "127.0.0.1", 8000, "token")
