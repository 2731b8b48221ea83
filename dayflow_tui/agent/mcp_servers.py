"""Tools from MCP servers, made crash-safe by the servers' own annotations (issue #27).

```python
from dayflow_tui import Agent, mcp

agent = Agent(name="files", system="...", mcp_servers=[
    mcp.stdio("notes", "python", "notes_server.py", secrets={"NOTES_TOKEN": token}, auto_approve=["append"]),
    mcp.http("tickets", "https://mcp.example.com/mcp", secret_headers={"Authorization": f"Bearer {key}"}),
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

``mcp.http`` reaches a server over MCP's streamable HTTP with the same rules: a session opened on the first
call, a per-call timeout, and a server that is down, answers 4xx/5xx or drops the connection mid-call is
``McpUnavailable``. ``secret_headers`` (a bearer token) are sent with every request and treated like
``secrets``: the fingerprint keeps their names. The SDK's own log lines go to ``STATE_DIR/mcp/client.log``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import AsyncIterator
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.errors import McpUnavailable
from ..redaction import also_secret, redact, redact_and_cut

READ_ONLY, IDEMPOTENT, PLAIN = "read_only", "idempotent", "plain"
SEPARATOR = "__"
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")
START_TIMEOUT_S = 30.0


def _check_common(name: str, overrides: tuple[tuple[str, str], ...]) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or SEPARATOR in name:
        raise ValueError(f"MCP server name {name!r}: letters, digits, _ and - (no '__'), at most 40")
    for _tool, kind in overrides:
        if kind not in (READ_ONLY, IDEMPOTENT, PLAIN):
            raise ValueError(f"MCP server {name}: override kind {kind!r} is not read_only, idempotent or plain")


@dataclass(frozen=True)
class StdioServer:
    """One MCP server an agent starts as a subprocess (``mcp.stdio``): how to start it, how to treat its tools."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # plain environment, part of the fingerprint
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)  # never recorded
    timeout_s: float = 60.0
    auto_approve: tuple[str, ...] = ()  # tool names (or "*") that never ask a person
    overrides: tuple[tuple[str, str], ...] = ()  # tool name: kind, over the server's hints

    def __post_init__(self) -> None:
        _check_common(self.name, self.overrides)
        for _key, value in self.secrets:
            also_secret(value)

    def describe(self) -> dict:
        """What the fingerprint records of the server: never a secret's value."""
        return {"command": self.command, "args": list(self.args), "env": dict(self.env),
                "secrets": sorted(key for key, _value in self.secrets), "auto_approve": list(self.auto_approve),
                "overrides": dict(self.overrides), "timeout_s": self.timeout_s}

    def where(self) -> str:
        """Where a person looks when the server fails: its stderr."""
        return f"its stderr: {log_path(self)}"

    @asynccontextmanager
    async def streams(self) -> AsyncIterator[tuple[Any, Any]]:
        """The started subprocess's (read, write) streams; its stderr goes to the server's log file."""
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.command, args=list(self.args),
                                       env={**os.environ, **dict(self.env), **dict(self.secrets)})
        with open(log_path(self), "a", encoding="utf-8", errors="replace") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                yield read, write


# Headers that carry a credential: given in ``headers`` (recorded in the run) they are refused.
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"})
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")  # RFC 9110's token


def _is_credential(header: str) -> bool:
    lowered = header.lower()
    return lowered in _CREDENTIAL_HEADERS or "token" in lowered or "secret" in lowered


@dataclass(frozen=True)
class HttpServer:
    """One MCP server an agent reaches over MCP's streamable HTTP (``mcp.http``)."""

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()  # plain headers, part of the fingerprint
    secret_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)  # never recorded
    timeout_s: float = 60.0
    auto_approve: tuple[str, ...] = ()
    overrides: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check_common(self.name, self.overrides)
        check_url(self.name, self.url)
        if not self.timeout_s > 0:
            raise ValueError(f"MCP server {self.name}: timeout_s must be a number of seconds above 0")
        for header, value in self.headers + self.secret_headers:
            if not isinstance(header, str) or not _HEADER_NAME.match(header):
                raise ValueError(f"MCP server {self.name}: {header!r} is not an HTTP header name")
            if not isinstance(value, str) or any(ch in value for ch in "\r\n\x00"):
                raise ValueError(f"MCP server {self.name}: header {header}'s value must be one line of text")
        for header, _value in self.headers:
            if _is_credential(header):
                raise ValueError(f"MCP server {self.name}: header {header} carries a credential: pass it in "
                                 "secret_headers (never recorded) instead of headers")
        for _header, value in self.secret_headers:
            also_secret(value)
            scheme, _space, credential = value.partition(" ")
            if credential and scheme.isalpha():  # "Bearer TOKEN": the token alone is kept out of text too
                also_secret(credential.strip())

    def describe(self) -> dict:
        """What the fingerprint records of the server: a secret header's name, never its value."""
        return {"transport": "http", "url": self.url, "headers": dict(self.headers),
                "secret_headers": sorted(header for header, _value in self.secret_headers),
                "auto_approve": list(self.auto_approve), "overrides": dict(self.overrides),
                "timeout_s": self.timeout_s}

    def where(self) -> str:
        return f"at {redact(self.url)}"

    @asynccontextmanager
    async def streams(self) -> AsyncIterator[tuple[Any, Any]]:
        """An HTTP client with the headers (secret ones too), and the session's (read, write) streams over it.

        The client never retries a request on its own (httpx does not): a ``tools/call`` is sent once, and
        a connection that breaks is ``McpUnavailable`` for the caller to judge."""
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async def note_status(response: Any) -> None:  # the SDK reports any 4xx/5xx as one "error response"
            if response.status_code >= 400 and response.request.method == "POST":  # a request's, not the GET stream's
                _http_status[self.name] = response.status_code

        timeout = httpx2.Timeout(min(self.timeout_s, START_TIMEOUT_S), read=max(self.timeout_s, 300.0))
        async with httpx2.AsyncClient(headers={**dict(self.headers), **dict(self.secret_headers)},
                                      timeout=timeout, event_hooks={"response": [note_status]}) as client:
            async with streamable_http_client(self.url, http_client=client) as (read, write):
                yield read, write


_http_status: dict[str, int] = {}  # server name: the last 4xx/5xx it answered (for the error line)


def check_url(name: str, url: Any) -> None:
    """An http(s) URL with a host, without a password in it (that belongs in ``secret_headers``)."""
    from urllib.parse import parse_qsl, urlsplit

    if not isinstance(url, str) or not url or any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise ValueError(f"MCP server {name}: the URL must be one http:// or https:// address without spaces")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        raise ValueError(f"MCP server {name}: {redact_and_cut(url, 120)!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"MCP server {name}: {redact_and_cut(url, 120)!r} is not an http:// or https:// URL "
                         "with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"MCP server {name}: the URL carries a user or password, which would be recorded: "
                         "pass credentials in secret_headers")
    for key, _value in parse_qsl(parts.query, keep_blank_values=True):
        if _is_credential(key) or key.lower() in ("key", "apikey", "api_key", "password", "sig", "signature"):
            raise ValueError(f"MCP server {name}: the URL's {key} parameter looks like a credential, which "
                             "would be recorded: pass credentials in secret_headers")


McpServer = StdioServer | HttpServer


def stdio(name: str, command: str, *args: str, env: dict[str, str] | None = None,
          secrets: dict[str, str] | None = None, timeout_s: float = 60.0, auto_approve: Any = (),
          overrides: dict[str, str] | None = None) -> StdioServer:
    """An MCP server started as a subprocess speaking MCP on its stdin and stdout."""
    return StdioServer(name, command, tuple(args), tuple(sorted((env or {}).items())),
                       tuple(sorted((secrets or {}).items())), float(timeout_s), tuple(auto_approve),
                       tuple(sorted((overrides or {}).items())))


def http(name: str, url: str, *, headers: dict[str, str] | None = None,
         secret_headers: dict[str, str] | None = None, timeout_s: float = 60.0, auto_approve: Any = (),
         overrides: dict[str, str] | None = None) -> HttpServer:
    """An MCP server reached over streamable HTTP at ``url`` (http or https). ``secret_headers`` (an
    ``Authorization: Bearer ...``) are sent with every request and never stored, logged or shown."""
    return HttpServer(name, url, tuple(sorted((headers or {}).items())),
                      tuple(sorted((secret_headers or {}).items())), float(timeout_s), tuple(auto_approve),
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
            _sdk_logs_to_file()
            _loop = _Loop()
        return _loop


class _RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _sdk_logs_to_file() -> None:
    """The SDK's and its HTTP client's warnings (a session that could not be ended, a stream that broke) go
    to ``mcp/client.log`` in the state directory, redacted: never the terminal (Python's last-resort
    handler would print them, tracebacks too, over the command's one line)."""
    from ..config import settings

    folder = settings.current().state_home / "mcp"
    folder.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(folder / "client.log", encoding="utf-8", errors="replace")
    handler.setFormatter(_RedactingFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name in ("mcp", "httpx2", "httpcore2"):
        logger = logging.getLogger(name)
        if not logger.handlers:  # an embedding program that set up its own keeps it
            logger.addHandler(handler)
            logger.setLevel(logging.WARNING)
            logger.propagate = False


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

        try:
            async with self.server.streams() as (read, write):
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
        _http_status.pop(server.name, None)
        fresh = _Session(server)
        fresh.task = asyncio.ensure_future(fresh.hold())
        await fresh.ready.wait()
        return fresh

    try:
        fresh = loop.run(start(), START_TIMEOUT_S)
    except FutureTimeout:
        raise McpUnavailable(f"MCP server {server.name} did not start within {START_TIMEOUT_S:.0f} s "
                             f"({server.where()})") from None
    if fresh.session is None:
        raise McpUnavailable(f"MCP server {server.name} could not be started: "
                             f"{_describe(fresh.failure, server)} ({server.where()})")
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


def _describe(exc: BaseException | None, server: McpServer | None = None) -> str:
    status = _http_status.pop(server.name, None) if server is not None else None
    if exc is None:
        return "it closed"
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    said = f"HTTP {status}: " if status is not None else ""
    return redact_and_cut(f"{said}{type(exc).__name__}: {exc}", 200)


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
        raise McpUnavailable(f"MCP server {server.name} could not list its tools: {_describe(exc, server)}") from exc
    listed = []
    for item in tools:
        annotations = item.annotations.model_dump(by_alias=True, exclude_none=True) if item.annotations else {}
        kind, asks = kind_of(annotations, server, item.name)
        listed.append(ListedTool(server.name, item.name, item.description or item.name,
                                 dict(item.input_schema or {"type": "object"}), kind, asks, annotations))
    _listed[server] = tuple(listed)
    return _listed[server]


def call(server: McpServer, name: str, arguments: dict, *, again: bool = True) -> tuple[Any, bool]:
    """One ``tools/call``: ``(payload, is_error)`` as a Dayflow tool returns it; ``McpUnavailable`` when the
    server could not answer. (``again``: whether an HTTP session the server ended may be opened afresh.)"""
    session = _session(server)

    async def one() -> Any:
        _http_status.pop(server.name, None)  # an earlier request's status says nothing about this one
        return await session.call_tool(name, arguments)

    try:
        result = _the_loop().run(one(), server.timeout_s)
    except FutureTimeout:
        _forget(server)
        raise McpUnavailable(f"MCP server {server.name}: {name} did not answer within {server.timeout_s:g} s") from None
    except Exception as exc:
        _forget(server)
        if again and _session_ended(server, exc):
            # The server ended the session (it restarted since the last call): MCP's streamable HTTP answers a
            # request under an ended session 404 without processing it, so the call never ran; one fresh
            # session sends it once more (a second refusal is McpUnavailable like any other).
            return call(server, name, arguments, again=False)
        raise McpUnavailable(f"MCP server {server.name}: {name} failed: {_describe(exc, server)}") from exc
    return _payload(result), bool(getattr(result, "is_error", False))


def _session_ended(server: McpServer, exc: BaseException) -> bool:
    """The HTTP server refused the request because its session is gone: a 404 to a request of a session that
    was open (the URL answered ``initialize``), which the specification says the server sends unprocessed."""
    return isinstance(server, HttpServer) and _http_status.get(server.name) == 404


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
