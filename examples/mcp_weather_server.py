"""A small local MCP server for examples/mcp_agent.py (the ``mcp`` SDK's ``MCPServer``, stdio).

``forecast`` is read-only (safe to run again after a crash); ``note`` has no annotations (plain: a side
effect Dayflow never runs twice); ``forget`` is destructive (a person decides first).
"""

from __future__ import annotations

import json
import os
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


server.run("stdio")
