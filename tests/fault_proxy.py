"""A fault-injecting TCP proxy between Dayflow and a real server (PostgreSQL in the tests).

Clients connect to the proxy (``FaultProxy.url`` turns a database URL into one
that goes through it); every connection is forwarded byte for byte to the
upstream server until the test injects a fault:

- ``cut_all()``: every connection is reset now, on both sides (the client sees
  the server vanish, the server sees its client vanish and rolls back);
- ``stall(seconds)``: every byte in either direction, on every connection
  (new ones too), is held for that long and then delivered in order, like a
  network that stops answering and comes back;
- ``refuse(seconds)``: the listening socket is closed for that long, so new
  connections are refused (a server that is down or restarting) while the
  existing ones go on; ``outage(seconds)`` is a cut plus a refusal;
  ``end_faults()`` ends a stall or an outage early (a test need not wait out a
  fault once what it checks has happened);
- ``arm(sql, ...)``: a fault at a chosen moment, when a client executes a
  statement whose SQL contains ``sql`` (several pieces match in order on one
  connection, e.g. a step's ``INSERT INTO "steps"`` then its ``COMMIT``). The
  connection is cut before the statement reaches the server (the server rolls
  the transaction back), or with ``deliver=True`` just after the server has
  answered it (the server committed; the client never learns it), or every
  connection is stalled.

Forwarding is protocol-blind; only the triggers read the client's side as
PostgreSQL frontend messages (``_PgStatements``), which works because the test
server runs without TLS (``url`` also sets ``sslmode=disable``).

One thread runs every socket (a ``selectors`` loop); the test's calls are
carried out by that thread and have taken effect when they return.
"""

from __future__ import annotations

import queue
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# How long a connection doomed by a ``deliver=True`` trigger waits for the server's answer
# before it is cut anyway (the server may never answer; the fault must still happen).
_DELIVER_GRACE_S = 5.0
_TICK_S = 0.02


@dataclass
class Trigger:
    """A fault armed on a byte pattern (see ``FaultProxy.arm``)."""

    patterns: tuple[str, ...]  # each a piece of one statement's SQL, matched in order
    action: str  # "cut", "stall" or "outage"
    deliver: bool = False  # cut after the server answered the matching message, not before it reached it
    scope: str = "link"  # "link": only the connection that sent it; "all": every connection
    seconds: float = 0.0  # how long a stall or an outage lasts
    times: int = 1  # how many matches fire; then the trigger is spent
    every: int = 1  # fire on the 1st, (1+every)th, ... match: 2 lets each retry of a cut write through
    matched: int = 0
    fired: int = 0
    when: list[float] = field(default_factory=list)  # monotonic times it fired
    event: threading.Event = field(default_factory=threading.Event)  # set on every firing

    def wait(self, timeout: float) -> bool:
        """True once the trigger has fired at least once."""
        return self.event.wait(timeout)

    @property
    def spent(self) -> bool:
        return self.fired >= self.times


class _PgStatements:
    """The statements a PostgreSQL client executes, read from its bytes (frontend protocol 3).

    A simple query (``Q``) is its SQL; in the extended protocol a statement is
    parsed once (``P``, named when psycopg prepares it after a few uses),
    bound to a portal (``B``) and executed (``E``): the SQL text is reported at
    ``E``, so a prepared ``COMMIT`` sent as a bare Bind/Execute still matches.
    Bytes before the startup message carry no type byte (SSL and GSS requests,
    the startup packet itself).
    """

    _UNTYPED_REQUESTS = (80877103, 80877104)  # SSLRequest, GSSENCRequest: the startup packet follows

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.started = False
        self.statements: dict[bytes, str] = {}
        self.portals: dict[bytes, str] = {}

    def feed(self, data: bytes) -> list[str]:
        self.buffer += data
        executed: list[str] = []
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return executed
                length, code = struct.unpack("!II", self.buffer[:8])
                if len(self.buffer) < length:
                    return executed
                del self.buffer[:length]
                self.started = code not in self._UNTYPED_REQUESTS
                continue
            if len(self.buffer) < 5:
                return executed
            kind = self.buffer[0:1]
            length = struct.unpack("!I", self.buffer[1:5])[0]
            if len(self.buffer) < 1 + length:
                return executed
            body = bytes(self.buffer[5:1 + length])
            del self.buffer[:1 + length]
            if kind == b"Q":
                executed.append(body.split(b"\0", 1)[0].decode("utf-8", "replace"))
            elif kind == b"P":
                name, rest = body.split(b"\0", 1)
                self.statements[name] = rest.split(b"\0", 1)[0].decode("utf-8", "replace")
            elif kind == b"B":
                portal, statement, _rest = body.split(b"\0", 2)
                self.portals[portal] = self.statements.get(statement, "")
            elif kind == b"E":
                portal = body.split(b"\0", 1)[0]
                executed.append(self.portals.get(portal, ""))


class _Link:
    """One client connection and its upstream twin, with bytes waiting to be written each way."""

    def __init__(self, client: socket.socket, upstream: socket.socket, number: int):
        self.client = client
        self.upstream = upstream
        self.number = number
        self.to_upstream = bytearray()
        self.to_client = bytearray()
        self.closed = False
        self.reader = _PgStatements()  # what the client executes, for triggers
        self.progress: dict[int, int] = {}  # id(trigger) -> index of its next pattern
        self.doomed_at: float | None = None  # a deliver=True trigger fired: cut on the server's answer

    def peer_of(self, sock: socket.socket) -> socket.socket:
        return self.upstream if sock is self.client else self.client

    def buffer_for(self, sock: socket.socket) -> bytearray:
        """The bytes waiting to be written to ``sock``."""
        return self.to_client if sock is self.client else self.to_upstream


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0): an abrupt loss, not a polite FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream``; use as a context manager."""

    def __init__(self, upstream: tuple[str, int] = ("127.0.0.1", 5432), *, host: str = "127.0.0.1"):
        self.upstream = upstream
        self.host = host
        self.port = 0
        self.accepted = 0  # connections forwarded so far
        self.refused_at: list[float] = []
        self.cuts = 0  # connections cut by any fault
        self._links: dict[socket.socket, _Link] = {}
        self._triggers: list[Trigger] = []
        self._stalled_until = 0.0
        self._refuse_until = 0.0
        self._listener: socket.socket | None = None
        self._selector = selectors.DefaultSelector()
        self._commands: queue.Queue[tuple[Callable[[], object], queue.Queue]] = queue.Queue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._running = False
        self._thread = threading.Thread(target=self._loop, name="fault-proxy", daemon=True)

    # -- life -------------------------------------------------------------

    def __enter__(self) -> "FaultProxy":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self._listen()
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._running = True
        self._thread.start()

    def close(self) -> None:
        if not self._running:
            return
        self._call(self._shutdown)
        self._thread.join(timeout=5)
        self._wake_r.close()
        self._wake_w.close()

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def url(self, db_url: str) -> str:
        """``db_url`` (postgresql://...) pointed at the proxy, TLS off so the bytes can be matched."""
        parts = urlsplit(db_url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@{self.host}:{self.port}" if user else f"{self.host}:{self.port}"
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "sslmode"]
        query.append(("sslmode", "disable"))
        return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), parts.fragment))

    # -- faults (called from the test's threads) ---------------------------

    @property
    def connections(self) -> int:
        """Connections open through the proxy right now."""
        return self._call(lambda: len({id(link) for link in self._links.values()}))

    def cut_all(self) -> int:
        """Reset every connection now; returns how many were cut."""
        return self._call(self._cut_everything)

    def stall(self, seconds: float) -> None:
        """Hold every byte, both ways, on every connection (new ones too) for ``seconds``; returns at once."""
        def start() -> None:
            self._stalled_until = max(self._stalled_until, time.monotonic() + seconds)
        self._call(start)

    @property
    def stalled(self) -> bool:
        return time.monotonic() < self._stalled_until

    def refuse(self, seconds: float) -> None:
        """Refuse new connections for ``seconds`` (the listener is closed); existing ones go on."""
        self._call(lambda: self._refuse_for(seconds))

    def outage(self, seconds: float) -> int:
        """The server goes away for ``seconds``: every connection cut, new ones refused meanwhile."""
        def start() -> int:
            self._refuse_for(seconds)
            return self._cut_everything()
        return self._call(start)

    def end_stall(self) -> None:
        """Let the bytes held by a stall go now."""
        def end() -> None:
            self._stalled_until = 0.0
        self._call(end)

    def end_faults(self) -> None:
        """End a stall and an outage now: bytes flow, and new connections are taken again."""
        def end() -> None:
            self._stalled_until = 0.0
            self._refuse_until = 0.0
        self._call(end)

    @property
    def refusing(self) -> bool:
        """New connections are refused right now (an outage or ``refuse`` is on)."""
        return time.monotonic() < self._refuse_until

    def arm(self, *patterns: str, action: str = "cut", deliver: bool = False, scope: str = "link",
            seconds: float = 0.0, times: int = 1, every: int = 1) -> Trigger:
        """Fire ``action`` when a client executes statements containing ``patterns`` (in order, on one connection).

        ``action="cut"``: the connection (``scope="all"``: every connection) is
        reset. The write holding the statement is dropped, so the server never
        sees it, unless ``deliver=True``: then it is forwarded and the cut comes
        when the server answers (the answer is dropped).
        ``action="stall"``: everything is held for ``seconds`` from that
        moment, that statement included. ``action="outage"``: every connection
        is cut (that statement never arrives) and new ones are refused for
        ``seconds``, with no gap for a reconnect to slip through.
        ``times``: how many firings; ``every=2`` fires on every other match,
        so a write that is retried after a cut gets through the second time.
        """
        if action not in ("cut", "stall", "outage") or scope not in ("link", "all") or not patterns:
            raise ValueError("arm(sql..., action='cut'|'stall'|'outage', scope='link'|'all')")
        trigger = Trigger(tuple(patterns), action, deliver, scope, seconds, times, max(1, every))

        def add() -> None:
            self._triggers.append(trigger)
        self._call(add)
        return trigger

    def disarm(self, trigger: Trigger) -> None:
        def remove() -> None:
            if trigger in self._triggers:
                self._triggers.remove(trigger)
        self._call(remove)

    # -- the loop ---------------------------------------------------------

    def _call(self, fn: Callable[[], object]) -> object:
        """Run ``fn`` on the proxy's thread and return its result (the fault has happened on return)."""
        if threading.current_thread() is self._thread:
            return fn()
        answer: queue.Queue = queue.Queue(maxsize=1)
        self._commands.put((fn, answer))
        self._wake_w.send(b"x")
        ok, value = answer.get(timeout=30)
        if not ok:
            raise value
        return value

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(128)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._selector.register(listener, selectors.EVENT_READ, "accept")

    def _unlisten(self) -> None:
        if self._listener is None:
            return
        self._selector.unregister(self._listener)
        _reset(self._listener)  # connections waiting in the backlog are refused too
        self._listener = None

    def _refuse_for(self, seconds: float) -> None:
        self._refuse_until = max(self._refuse_until, time.monotonic() + seconds)
        self.refused_at.append(time.monotonic())
        self._unlisten()

    def _shutdown(self) -> None:
        self._cut_everything()
        if self._listener is not None:
            self._unlisten()
        self._running = False

    def _loop(self) -> None:
        while self._running:
            now = time.monotonic()
            if self._listener is None and now >= self._refuse_until:
                try:
                    self._listen()
                except OSError:
                    pass  # the port is not free again yet: next tick
            for link in list({id(l): l for l in self._links.values()}.values()):
                if link.doomed_at is not None and now - link.doomed_at > _DELIVER_GRACE_S:
                    self._cut(link)
            self._update_interest()
            for key, _mask in self._selector.select(timeout=_TICK_S):
                if key.data == "wake":
                    self._run_commands()
                elif key.data == "accept":
                    self._accept()
                else:
                    self._service(key.fileobj, _mask)
        self._selector.close()

    def _run_commands(self) -> None:
        try:
            self._wake_r.recv(4096)
        except BlockingIOError:
            pass
        while True:
            try:
                fn, answer = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                answer.put((True, fn()))
            except Exception as exc:  # handed back to the caller's thread
                answer.put((False, exc))

    def _accept(self) -> None:
        try:
            client, _addr = self._listener.accept()
        except (BlockingIOError, OSError):
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _reset(client)
            return
        for sock in (client, upstream):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.accepted += 1
        link = _Link(client, upstream, self.accepted)
        self._links[client] = link
        self._links[upstream] = link
        self._selector.register(client, selectors.EVENT_READ, link)
        self._selector.register(upstream, selectors.EVENT_READ, link)

    def _update_interest(self) -> None:
        flowing = not self.stalled
        for sock, link in list(self._links.items()):
            if link.closed:
                continue
            events = selectors.EVENT_READ
            if flowing and link.buffer_for(sock):
                events |= selectors.EVENT_WRITE
            try:
                if self._selector.get_key(sock).events != events:
                    self._selector.modify(sock, events, link)
            except (KeyError, ValueError):
                pass

    def _service(self, sock: socket.socket, mask: int) -> None:
        link = self._links.get(sock)
        if link is None or link.closed:
            return
        if mask & selectors.EVENT_WRITE and not self.stalled:
            pending = link.buffer_for(sock)
            try:
                sent = sock.send(pending)
                del pending[:sent]
            except BlockingIOError:
                pass
            except OSError:
                self._cut(link)
                return
        if mask & selectors.EVENT_READ:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._cut(link)  # one side went away: the other must see it too
                return
            if sock is link.client:
                self._from_client(link, data)
            elif link.doomed_at is not None:
                self._cut(link)  # the server answered the delivered message: drop the answer, cut
            else:
                link.to_client += data

    def _from_client(self, link: _Link, data: bytes) -> None:
        statements = link.reader.feed(data)  # always read, so the framing stays in step
        for statement in statements:
            for trigger in list(self._triggers):
                if trigger.spent or not self._matches(link, trigger, statement):
                    continue
                trigger.matched += 1
                if (trigger.matched - 1) % trigger.every:
                    continue
                self._fire(link, trigger, data)
                return
        link.to_upstream += data

    def _fire(self, link: _Link, trigger: Trigger, data: bytes) -> None:
        trigger.fired += 1
        trigger.when.append(time.monotonic())
        if trigger.spent:
            self._triggers.remove(trigger)
        if trigger.action == "stall":
            link.to_upstream += data
            self._stalled_until = max(self._stalled_until, time.monotonic() + trigger.seconds)
        elif trigger.action == "outage":
            self._refuse_for(trigger.seconds)
            self._cut_everything()
        elif trigger.deliver:
            link.to_upstream += data
            link.doomed_at = time.monotonic()
            if trigger.scope == "all":
                for other in {id(l): l for l in self._links.values()}.values():
                    if other is not link:
                        self._cut(other)
        elif trigger.scope == "all":
            self._cut_everything()
        else:
            self._cut(link)  # the bytes of this write never reach the server
        trigger.event.set()

    @staticmethod
    def _matches(link: _Link, trigger: Trigger, statement: str) -> bool:
        """Advance ``trigger``'s match on this connection by one executed statement; True on the last pattern."""
        index = link.progress.get(id(trigger), 0)
        if trigger.patterns[index] not in statement:
            return False
        index += 1
        if index == len(trigger.patterns):
            link.progress.pop(id(trigger), None)
            return True
        link.progress[id(trigger)] = index
        return False

    def _cut(self, link: _Link) -> None:
        if link.closed:
            return
        link.closed = True
        self.cuts += 1
        for sock in (link.client, link.upstream):
            self._links.pop(sock, None)
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            _reset(sock)

    def _cut_everything(self) -> int:
        links = list({id(l): l for l in self._links.values()}.values())
        for link in links:
            self._cut(link)
        return len(links)
