"""Tools from MCP servers, made crash-safe by the servers' own annotations (issue #27).

```python
from dayflow_tui import Agent, mcp

agent = Agent(name="files", system="...", mcp_servers=[
    mcp.stdio("notes", "python", "notes_server.py", secrets={"NOTES_TOKEN": token}, auto_approve=["append"]),
])
```

The tool list comes from the server (``tools/list``) when a run of the agent is driven or looked at (the
server starts then, not when the agent is imported); each tool is offered to the model as
``SERVER__TOOL`` with its schema as given. What may happen after a crash is read from MCP's annotations:

| annotation | kind | after a kill mid-call | asks a person first |
|---|---|---|---|
| ``readOnlyHint: true`` | read_only | runs again | no |
| ``idempotentHint: true`` | idempotent | runs again (the server promised the same effect) | unless ``destructiveHint: false`` or auto-approved |
| anything else | plain | never runs twice: answered "outcome unknown" | unless ``destructiveHint: false`` or auto-approved |

``overrides={"tool": "read_only"}`` replaces a server's hint (the user's choice, recorded in the run). The
server names, every tool's schema and rule are part of the agent's fingerprint: a tool list that changed
between a crash and a resume is a changed agent, refused until a person allows it.

A call that the server cannot answer (the process died, the per-call timeout passed, the connection broke)
is not the tool's outcome: it ends the attempt (``McpUnavailable``), the run backs off and is tried again
at most ``max_attempts`` times with a fresh server, and a plain call it interrupted is answered "outcome
unknown" then. A tool's own error (``isError``) is its result. The server's stderr goes to a log file
(``STATE_DIR/mcp/SERVER.log``), never the terminal; the values of ``secrets`` reach the server's environment only: never
the database, the fingerprint or any message (they are redacted like the API key).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.errors import McpUnavailable
from ..redaction import also_secret, redact_and_cut

READ_ONLY, IDEMPOTENT, PLAIN = "read_only", "idempotent", "plain"
SEPARATOR = "__"
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class McpServer:
    """One MCP server an agent uses (``mcp.stdio``): how to start it and how to treat its tools."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # plain environment, part of the fingerprint
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)  # never recorded
    timeout_s: float = 60.0
    auto_approve: tuple[str, ...] = ()  # tool names (or "*") that never ask a person
    overrides: tuple[tuple[str, str], ...] = ()  # tool name: kind, over the server's hints

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or SEPARATOR in self.name:
            raise ValueError(f"MCP server name {self.name!r}: letters, digits, _ and - (no '__'), at most 40")
        for _name, kind in self.overrides:
            if kind not in (READ_ONLY, IDEMPOTENT, PLAIN):
                raise ValueError(f"MCP server {self.name}: override kind {kind!r} is not read_only, idempotent "
                                 "or plain")
        for _key, value in self.secrets:
            also_secret(value)

    def describe(self) -> dict:
        """What the fingerprint records of the server: never a secret's value."""
        return {"command": self.command, "args": list(self.args), "env": dict(self.env),
                "secrets": sorted(key for key, _value in self.secrets), "auto_approve": list(self.auto_approve),
                "overrides": dict(self.overrides), "timeout_s": self.timeout_s}


def stdio(name: str, command: str, *args: str, env: dict[str, str] | None = None,
          secrets: dict[str, str] | None = None, timeout_s: float = 60.0, auto_approve: Any = (),
          overrides: dict[str, str] | None = None) -> McpServer:
    """An MCP server started as a subprocess speaking MCP on its stdin and stdout."""
    return McpServer(name, command, tuple(args), tuple(sorted((env or {}).items())),
                     tuple(sorted((secrets or {}).items())), float(timeout_s), tuple(auto_approve),
                     tuple(sorted((overrides or {}).items())))


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server listed it, with what Dayflow makes of it."""

    server: str
    name: str  # the server's own name
    description: str
    input_schema: dict
    kind: str
    needs_approval: bool
    annotations: dict  # as the server sent them (camelCase, the wire's)

    @property
    def offered_name(self) -> str:
        return f"{self.server}{SEPARATOR}{self.name}"[:64]


def kind_of(annotations: dict, server: McpServer, name: str) -> tuple[str, bool]:
    """(kind, needs approval) for a tool with these annotations (the table in this module's docstring)."""
    overrides = dict(server.overrides)
    if name in overrides:
        kind = overrides[name]
    elif annotations.get("readOnlyHint") is True:
        kind = READ_ONLY
    elif annotations.get("idempotentHint") is True:
        kind = IDEMPOTENT
    else:
        kind = PLAIN
    approved = "*" in server.auto_approve or name in server.auto_approve
    asks = kind != READ_ONLY and annotations.get("destructiveHint") is not False and not approved
    return kind, asks


# -- the connections: one event loop thread per process, one session per server ----------------------------

class _Loop:
    """An asyncio loop on a daemon thread: the MCP SDK is async, Dayflow's drive is not."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self.loop.run_forever, name="dayflow-mcp", daemon=True)
        thread.start()

    def run(self, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise


_loop: _Loop | None = None
_loop_lock = threading.Lock()
_sessions: dict[McpServer, "_Session"] = {}


def _the_loop() -> _Loop:
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = _Loop()
        return _loop


class _Session:
    """A started server: its ``ClientSession`` kept open by a task on the loop until ``close``."""

    def __init__(self, server: McpServer):
        self.server = server
        self.session: Any = None
        self.ready = asyncio.Event()
        self.done = asyncio.Event()
        self.failure: BaseException | None = None
        self.task: Any = None

    async def hold(self) -> None:
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.server.command, args=list(self.server.args),
                                       env={**os.environ, **dict(self.server.env), **dict(self.server.secrets)})
        try:
            with open(log_path(self.server), "a", encoding="utf-8", errors="replace") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        self.session = session
                        self.ready.set()
                        await self.done.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller waiting on ``ready``
            self.failure = exc
        finally:
            self.session = None
            self.ready.set()


def log_path(server: McpServer) -> Path:
    """Where a server's stderr goes: ``mcp/SERVER.log`` in the state directory (``DAYFLOW_STATE_DIR``)."""
    from ..config import settings

    folder = settings.current().state_home / "mcp"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{server.name}.log"


def _session(server: McpServer) -> Any:
    """The server's open session, started now if it is not running (or died)."""
    loop = _the_loop()
    held = _sessions.get(server)
    if held is not None and held.session is not None and not held.task.done():
        return held.session

    async def start() -> _Session:
        fresh = _Session(server)
        fresh.task = asyncio.ensure_future(fresh.hold())
        await fresh.ready.wait()
        return fresh

    try:
        fresh = loop.run(start(), START_TIMEOUT_S)
    except FutureTimeout:
        raise McpUnavailable(f"MCP server {server.name} did not start within {START_TIMEOUT_S:.0f} s "
                             f"(its stderr: {log_path(server)})") from None
    if fresh.session is None:
        raise McpUnavailable(f"MCP server {server.name} could not be started: "
                             f"{_describe(fresh.failure)} (its stderr: {log_path(server)})")
    _sessions[server] = fresh
    return fresh.session


def close_all() -> None:
    """Stop every server this process started (a run's end; a resume starts them again)."""
    loop = _loop
    if loop is None:
        return
    for server, held in list(_sessions.items()):
        loop.loop.call_soon_threadsafe(held.done.set)
        _sessions.pop(server, None)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "it closed"
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return redact_and_cut(f"{type(exc).__name__}: {exc}", 200)


_listed: dict[McpServer, tuple[ListedTool, ...]] = {}


def list_tools(server: McpServer) -> tuple[ListedTool, ...]:
    """The server's tools (``tools/list``, every page), once per process."""
    if server in _listed:
        return _listed[server]
    session = _session(server)

    async def every_page() -> list:
        tools, cursor = [], None
        while True:
            from mcp import types

            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                return tools

    try:
        tools = _the_loop().run(every_page(), server.timeout_s)
    except FutureTimeout:
        raise McpUnavailable(f"MCP server {server.name} did not list its tools within {server.timeout_s:g} s") from None
    except Exception as exc:
        raise McpUnavailable(f"MCP server {server.name} could not list its tools: {_describe(exc)}") from exc
    listed = []
    for item in tools:
        annotations = item.annotations.model_dump(by_alias=True, exclude_none=True) if item.annotations else {}
        kind, asks = kind_of(annotations, server, item.name)
        listed.append(ListedTool(server.name, item.name, item.description or item.name,
                                 dict(item.input_schema or {"type": "object"}), kind, asks, annotations))
    _listed[server] = tuple(listed)
    return _listed[server]


def call(server: McpServer, name: str, arguments: dict) -> tuple[Any, bool]:
    """One ``tools/call``: ``(payload, is_error)`` as a Dayflow tool returns it; ``McpUnavailable`` when the
    server could not answer."""
    session = _session(server)

    async def one() -> Any:
        return await session.call_tool(name, arguments)

    try:
        result = _the_loop().run(one(), server.timeout_s)
    except FutureTimeout:
        _forget(server)
        raise McpUnavailable(f"MCP server {server.name}: {name} did not answer within {server.timeout_s:g} s") from None
    except Exception as exc:
        _forget(server)
        raise McpUnavailable(f"MCP server {server.name}: {name} failed: {_describe(exc)}") from exc
    return _payload(result), bool(getattr(result, "is_error", False))


def _forget(server: McpServer) -> None:
    """A server that failed a call is started afresh by the next one (a resume's)."""
    held = _sessions.pop(server, None)
    if held is not None and _loop is not None:
        _loop.loop.call_soon_threadsafe(held.done.set)


def _payload(result: Any) -> Any:
    """MCP's content as a Dayflow tool's return value: text joined, images as ``Image``, embedded resources as
    their text (or a PDF ``Document``); anything else as its JSON."""
    from .tool_content import Document, Image

    parts: list[Any] = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", None)
        if kind == "text":
            parts.append(item.text)
        elif kind == "image":
            parts.append(Image(base64.b64decode(item.data), item.mime_type))
        elif kind == "resource":
            resource = item.resource
            if getattr(resource, "text", None) is not None:
                parts.append(resource.text)
            elif getattr(resource, "mime_type", None) == "application/pdf":
                parts.append(Document(base64.b64decode(resource.blob), "application/pdf", str(resource.uri)))
            else:
                parts.append(json.dumps(resource.model_dump(mode="json", exclude={"blob"}), ensure_ascii=False))
        else:
            parts.append(json.dumps(item.model_dump(mode="json", by_alias=True), ensure_ascii=False))
    if not parts and getattr(result, "structured_content", None) is not None:
        return result.structured_content
    if all(isinstance(part, str) for part in parts):
        return "\n".join(parts)
    return parts


def fingerprint_of(servers: tuple[McpServer, ...]) -> str:
    return hashlib.sha256(json.dumps({s.name: s.describe() for s in servers}, sort_keys=True).encode()).hexdigest()
