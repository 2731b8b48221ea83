"""A small local MCP server for examples/mcp_agent.py (the ``mcp`` SDK's ``MCPServer``): stdio, or MCP's
streamable HTTP with ``--http PORT`` (``http://127.0.0.1:PORT/mcp``; with ``WEATHER_MCP_TOKEN`` set, every
request must carry ``Authorization: Bearer WEATHER_MCP_TOKEN``).

``forecast`` is read-only (safe to run again after a crash); ``note`` has no annotations (plain: a side
effect Dayflow never runs twice); ``forget`` is destructive (a person decides first).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("weather")
NOTES = Path(os.environ.get("WEATHER_NOTES", "weather-notes.jsonl"))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def forecast(city: str) -> str:
    """Today's forecast for a city."""
    return f"{city}: dry, 21 °C, light wind"


@server.tool()
def note(text: str) -> str:
    """Keep a note for later (appends to the notes file)."""
    with NOTES.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"text": text}) + "\n")
    return "noted"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def forget() -> str:
    """Delete every note."""
    NOTES.unlink(missing_ok=True)
    return "forgotten"


def serve_http(port: int) -> None:
    """The SDK's streamable-HTTP app under uvicorn, behind a bearer token when one is set."""
    import uvicorn
    from starlette.responses import PlainTextResponse

    app = server.streamable_http_app()
    token = os.environ.get("WEATHER_MCP_TOKEN")

    async def bearer_only(scope, receive, send):
        if token and scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {token}".encode():
            return await PlainTextResponse("unauthorised", status_code=401)(scope, receive, send)
        return await app(scope, receive, send)

    uvicorn.run(bearer_only, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        serve_http(int(sys.argv[2]))
    else:
        server.run("stdio")
