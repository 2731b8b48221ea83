"""17. One MCP tool call over streamable HTTP against the same call over stdio (issue #27's ``mcp.http``).

The counting server of the tests (``tests/agent/mcp_fixtures/counting_server.py``, the SDK's ``MCPServer``)
runs twice: as a stdio subprocess and as a uvicorn server on a loopback port behind a bearer token. Dayflow's
own client (``mcp_servers.call``: the loop thread, the session, the result as a tool's payload) calls the
read-only ``look`` on each, interleaved. Also timed: the first call of a run (session start and ``tools/list``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.common import Row, interleaved, median, ms, workdir

SERVER = Path(__file__).parents[1] / "tests" / "agent" / "mcp_fixtures" / "counting_server.py"
TOKEN = "bench-token-0f3c"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the HTTP MCP server did not listen")


def run(quick: bool = False) -> list[Row]:
    from dayflow_tui.agent import mcp_servers

    rounds = 12 if quick else 48
    with workdir("mcp") as tmp:
        os.environ["DAYFLOW_STATE_DIR"] = str(tmp / "state")
        count = str(tmp / "calls.txt")
        port = _free_port()
        proc = subprocess.Popen([sys.executable, str(SERVER)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, "COUNT_FILE": count,
                                                                "HTTP_PORT": str(port), "EXPECT_TOKEN": TOKEN})
        try:
            _listening(port, proc)
            stdio = mcp_servers.stdio("bstdio", sys.executable, str(SERVER), env={"COUNT_FILE": count})
            http = mcp_servers.http("bhttp", f"http://127.0.0.1:{port}/mcp",
                                    secret_headers={"Authorization": f"Bearer {TOKEN}"})

            def first_call(server) -> float:
                started = time.perf_counter()
                mcp_servers.list_tools(server)
                mcp_servers.call(server, "look", {"city": "Lisbon"})
                return time.perf_counter() - started

            start_stdio, start_http = first_call(stdio), first_call(http)
            per_stdio, per_http = interleaved(lambda: mcp_servers.call(stdio, "look", {"city": "Lisbon"}),
                                              lambda: mcp_servers.call(http, "look", {"city": "Lisbon"}),
                                              rounds=rounds)
            mcp_servers.close_all()
        finally:
            proc.kill()
            proc.wait(30)
    s, h = median(per_stdio), median(per_http)
    return [Row("18 mcp", f"one tools/call, median of {rounds} interleaved (loopback)", f"HTTP {ms(h)}",
                f"stdio {ms(s)}", h / s, note=f"max HTTP {ms(max(per_http))}, stdio {ms(max(per_stdio))}"),
            Row("18 mcp", "first call of a run: session start, tools/list, one call", f"HTTP {ms(start_http)}",
                f"stdio {ms(start_stdio)}", start_http / start_stdio,
                note="stdio starts a Python process; HTTP connects to a running server")]


def main() -> int:
    from bench.run_all import table

    print(table(run(quick="--quick" in sys.argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
