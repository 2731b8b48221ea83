"""A real stdio MCP server for the tests, on the ``mcp`` SDK (``MCPServer``, FastMCP's successor in mcp 2.x).

Its tools cover every annotation the crash-safety table reads, and each call appends a line to the file
``COUNT_FILE`` names (``start TOOL`` before its effect and ``end TOOL`` after), so a test counts bodies.
``SLOW_S`` makes ``send`` and ``put`` sleep between the two lines (a kill lands mid-call); a file
``COUNT_FILE.v2`` makes it list one more tool (the same server, its tool list changed); ``send`` with ``text="crash"`` kills the server itself.

With ``HTTP_PORT`` set it serves MCP's streamable HTTP on ``127.0.0.1:HTTP_PORT/mcp`` instead of stdio (uvicorn,
as the SDK's ``streamable-http`` transport does). Then every request must carry ``Authorization: Bearer
EXPECT_TOKEN`` when ``EXPECT_TOKEN`` is set (401 otherwise), and while a file ``COUNT_FILE.500`` exists every
request is answered 500 (a broken gateway).
"""

from __future__ import annotations

import base64
import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent, ToolAnnotations

server = MCPServer("counting")
COUNT_FILE = os.environ["COUNT_FILE"]
SLOW_S = float(os.environ.get("SLOW_S", "0"))
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(64)).decode()


def pause() -> None:
    """``SLOW_S`` seconds, unless the test has made ``COUNT_FILE.fast`` before this call began (a resumed run's
    call answers at once: the agent, and so its env, unchanged; a call the kill interrupted sleeps on)."""
    if not os.path.exists(COUNT_FILE + ".fast"):
        time.sleep(SLOW_S)


def note(line: str) -> None:
    with open(COUNT_FILE, "a", encoding="utf-8") as fh:
        fh.write(f"{line} {os.getpid()}\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def look(city: str) -> str:
    """Today's forecast for a city."""
    note("start look")
    note("end look")
    return f"{city}: dry, 21 C"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def radar(city: str) -> list:
    """The rain radar for a city, as an image."""
    note("start radar")
    note("end radar")
    return [f"radar for {city}", ImageContent(type="image", data=PNG, mime_type="image/png")]


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def put(key: str, value: str) -> str:
    """Store a value under a key (the same call twice leaves the same value)."""
    note("start put")
    pause()
    note("end put")
    return f"stored {key}"


@server.tool()
def send(text: str) -> str:
    """Send a message (no annotations: a side effect that must not happen twice)."""
    note("start send")
    if text == "crash":
        os._exit(3)
    pause()
    note("end send")
    return f"sent {text!r}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def wipe(key: str) -> str:
    """Delete a key for good."""
    note("start wipe")
    note("end wipe")
    return f"wiped {key}"


if os.path.exists(COUNT_FILE + ".v2"):
    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def extra() -> str:
        """A tool the second version of the server adds."""
        return "new"




def serve_http(port: int) -> None:
    import uvicorn
    from starlette.responses import PlainTextResponse

    app = server.streamable_http_app()
    expected = os.environ.get("EXPECT_TOKEN")

    async def gate(scope, receive, send):  # ASGI middleware: the token checked, a 500 on demand
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if os.path.exists(COUNT_FILE + ".500"):
                return await PlainTextResponse("broken", status_code=500)(scope, receive, send)
            if expected and headers.get(b"authorization") != f"Bearer {expected}".encode():
                # Echoes what it got, as careless servers do: the client must not pass the body on unredacted.
                got = headers.get(b"authorization", b"").decode("latin-1")
                return await PlainTextResponse(f"who are you? {got}", status_code=401)(scope, receive, send)
        return await app(scope, receive, send)

    uvicorn.run(gate, host="127.0.0.1", port=port, log_level="warning")


print("counting server up", file=sys.stderr)  # stderr: the run's MCP log, never the terminal
if os.environ.get("HTTP_PORT"):
    serve_http(int(os.environ["HTTP_PORT"]))
else:
    server.run("stdio")
