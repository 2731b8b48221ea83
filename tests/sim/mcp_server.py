"""The simulation's MCP server: a real stdio server (the ``mcp`` SDK) whose tools count their calls in a file.

Started by a simulated agent that has ``mcp.stdio("sim", ...)`` (``agent_file.py``), by every ``dayflow``
process that drives or looks at one of its runs. Three tools, one per crash-safety kind Dayflow reads from
MCP's annotations: ``look`` (``readOnlyHint``), ``put`` (``idempotentHint``, not destructive) and ``send``
(no annotations: plain; the agent auto-approves it). Each call appends to ``SIM_MCP_LEDGER``, one ``write``
a line, so the test counts bodies from outside every process:

    mcp-start TOOL CALL NOTE CLIENT_PID PID TIME   the body began (CLIENT_PID: the dayflow process that
    mcp-end TOOL CALL NOTE CLIENT_PID PID TIME     started this server) ... and finished

``put`` and ``send`` sleep ``SIM_BODY_PAUSE`` seconds between their two lines, so a kill of the client
can land inside the body. The server is the client's child but not killed with it: a ``kill -9`` of the
``dayflow`` process leaves it running until its body ends and it reads the end of its stdin.
"""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("sim")
LEDGER = os.environ["SIM_MCP_LEDGER"]
CLIENT = os.getppid()  # read at start: once the client is killed the server is re-parented


def _log(what: str, tool: str, call: str, note: str) -> None:
    line = f"{what} {tool} {call} {note or '-'} {CLIENT} {os.getpid()} {time.time():.6f}\n"
    with open(LEDGER, "a", encoding="utf-8") as fh:
        fh.write(line)


def _pause() -> None:
    seconds = float(os.environ.get("SIM_BODY_PAUSE") or 0)
    if seconds:
        time.sleep(seconds)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def look(call: str, note: str = "") -> str:
    """Read something; no side effect."""
    _log("mcp-start", "look", call, note)
    _log("mcp-end", "look", call, note)
    return f"seen {note}"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def put(call: str, key: str, note: str = "") -> str:
    """Store a value under a key (the same call twice leaves the same value)."""
    _log("mcp-start", "put", call, note)
    _pause()
    _log("mcp-end", "put", call, note)
    return f"stored {key}"


@server.tool()
def send(call: str, note: str = "") -> str:
    """Send something: a side effect that must never happen twice (no annotations: plain)."""
    _log("mcp-start", "send", call, note)
    _pause()
    _log("mcp-end", "send", call, note)
    return f"sent {note}"


server.run("stdio")
