"""The simulation's model: a deterministic script served over loopback HTTP to the real ``anthropic`` SDK.

The built-in offline model calls only read-only tools of a user's agent, so
it cannot drive plain, idempotent or approval tools. This server can: each
reply is decided from the request alone (which step it is, which tools the
request offers, the run's task) and a seed, so a resumed, forked or
re-driven run gets the same kind of answer as the first time, with fresh
tool-use ids (a serial the server hands out, so every paid call's ids are
unique across runs and processes).

Every request is recorded with the process that sent it (the
``x-sim-process`` header each ``dayflow`` process is given) and what it was
answered: only a 200 is a paid call. Every reply is streamed as server-sent
events when the request asks for it (Dayflow's always do).
``burst(status, count, retry_after)`` answers the next ``count`` requests 429
or 529 with ``retry-after``; ``break_streams(count, error_type)`` cuts the
next ``count`` replies' streams part-way (recorded as ``BROKEN``, not paid);
some seeded steps' replies fill the context window (``model_context_window_exceeded``: compacted and
continued on a run with ``--compact-at``, else the run fails saying why);
``delay`` holds each answer (a call in flight, for kills mid-call);
``on_request(tag)`` runs as a request arrives, before it is answered; ``on_child(tag, event)`` as a child
run's request arrives (``"request"``) and as one is answered with its final reply (``"final"``).
A call of the subagent tool (its schema asks for a ``task``) gets a task naming the call, so each child run
has its own script (half the replies that call it call it twice: two children side by side) and its requests are told apart by their first message; a child's request must offer
the helper agent's tools (``child_tools``).
Requests are checked against the Messages API's structural rules
(``tests/api_rules.py``); a request the API would reject is recorded as a
problem.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from ..api_rules import problems as request_problems
from .agent_file import CHILD_TASK
from dayflow_tui.agent.streaming import events_of, sse_bytes

from ..loopback_api import FAKE_KEY, error_reply

PROCESS_HEADER = "x-sim-process"
MODEL = "claude-loopback-1"
BROKEN = 0  # a reply whose stream was cut: recorded with this status, never paid  # any name but "offline": the real SDK is used


@dataclass
class Request:
    tag: str  # the process that sent it
    status: int  # what it was answered (200: a paid reply)
    step: int  # which step of its run it asked for (assistant turns sent + 1)
    task: str = ""  # the run's task (its first user message): which run asked, unless a fork shares it
    arrived: float = 0.0  # time.monotonic() when the request arrived


def first_text(messages: list) -> str:
    """The text of the first user message: the run's task (step 1's carries a cache breakpoint, so it comes as
    a list of blocks; later steps' as a string)."""
    first = next((m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"), "")
    if isinstance(first, list):
        return "".join(b.get("text", "") for b in first if isinstance(b, dict) and b.get("type") == "text")
    return first if isinstance(first, str) else ""


class ScriptedModel:
    """A loopback Messages API whose answers are a seeded script; a context manager."""

    def __init__(self, seed: int):
        self.seed = seed
        self.delay = 0.0
        self.on_request: Callable[[str], None] | None = None
        self.on_child: Callable[[str, str], None] | None = None
        self.child_tools: set[str] | None = None  # the tools a child run's request must offer: the helper's
        self.requests: list[Request] = []
        self.problems: list[str] = []
        self.agent_tools: set[str] | None = None  # the tools every request must offer: the simulated agent's
        self._serial = 0
        self._burst: list[tuple[int, float]] = []
        self._breaks: list[tuple[int, str | None]] = []  # replies to cut: (events sent first, error event type)
        self._rng = random.Random(seed)
        self.replies: dict[str, int] = {}  # by stop reason, and "broken" for a cut stream
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.stopping = threading.Event()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # -- the test's side ---------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def env(self, tag: str) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": self.url, "ANTHROPIC_API_KEY": FAKE_KEY,
                "ANTHROPIC_CUSTOM_HEADERS": f"{PROCESS_HEADER}: {tag}"}

    def burst(self, status: int, count: int, retry_after: float) -> None:
        """Answer the next ``count`` requests with ``status`` (429 or 529) and ``retry-after``."""
        with self._lock:
            self._burst = [(status, retry_after)] * count

    def end_burst(self) -> int:
        with self._lock:
            left, self._burst = len(self._burst), []
        return left

    def paid(self, tags: set[str] | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.status == 200 and (tags is None or r.tag in tags))

    def recorded(self) -> list[Request]:
        """Every request so far (a copy: the server goes on recording)."""
        with self._lock:
            return list(self.requests)

    def refused(self, tags: set[str]) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.status != 200 and r.tag in tags)

    def __enter__(self) -> "ScriptedModel":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # -- the script --------------------------------------------------------

    def reply(self, body: dict) -> dict:
        """The assistant message for ``body``: a few tool calls per step, then a final answer."""
        messages = body.get("messages") or []
        step = sum(1 for m in messages if m.get("role") == "assistant") + 1
        task = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        task = task if isinstance(task, str) else json.dumps(task, sort_keys=True)
        rng = random.Random(hashlib.sha256(f"{self.seed}|{task[:200]}|{step}".encode()).hexdigest())
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name")]
        last_step = random.Random(f"{self.seed}|{task[:200]}").randint(2, 4)
        with self._lock:
            self._serial += 1
            serial = self._serial
        overflow = step >= 2 and rng.random() < 0.15  # the seeded steps whose reply fills the context window
        if overflow and step < last_step:
            content = [{"type": "text", "text": f"Step {step}: the context window is full (reply {serial})."}]
            stop = "model_context_window_exceeded"
        elif step >= last_step or not tools:
            content = [{"type": "text", "text": f"Done after {step - 1} step(s) of tools (reply {serial})."}]
            stop = "end_turn"
        else:
            content = [{"type": "text", "text": f"Step {step}: calling tools."}]
            for i, spec in enumerate(rng.sample(tools, min(len(tools), rng.randint(1, 3)))):
                call = f"toolu_sim{serial:05d}{i}"
                args = {"call": call, "note": f"n{serial}x{i}"}
                properties = (spec.get("input_schema") or {}).get("properties", {})
                if "key" in properties:
                    args["key"] = f"k{rng.randint(0, 3)}"
                if "task" in properties:  # the subagent tool: a child run with a script of its own
                    args = {"task": f"{CHILD_TASK} {call}: find what the parent needs"}
                if spec["name"] == "set_title":  # the built-in tool: a title of a few, so some repeat
                    args = {"title": f"sim title {rng.randint(0, 2)}"}
                content.append({"type": "tool_use", "id": call, "name": spec["name"], "input": args})
            # Half the replies that call the subagent tool call it twice: two children side by side. Drawn
            # from a generator of its own, so the rest of every script stays as it was.
            twice = random.Random(f"{self.seed}|{task[:200]}|{step}|twice").random() < 0.5
            helper = next((b for b in content if b.get("type") == "tool_use" and "task" in b["input"]), None)
            if helper is not None and twice:
                call = f"toolu_sim{serial:05d}9"
                content.append({"type": "tool_use", "id": call, "name": helper["name"],
                                "input": {"task": f"{CHILD_TASK} {call}: find what the parent needs"}})
            stop = "tool_use"
        return {"id": f"msg_sim_{serial:06d}", "type": "message", "role": "assistant",
                "model": body.get("model", MODEL), "content": content, "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": 50 + 10 * len(messages), "output_tokens": 20,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}

    # -- HTTP ----------------------------------------------------------------

    def paid_for(self, task: str, since: float) -> int:
        """Paid calls of the run with ``task`` that arrived after ``since`` (a ``time.monotonic()``)."""
        with self._lock:
            return sum(1 for r in self.requests if r.status == 200 and r.task == task and r.arrived > since)

    def _answer(self, tag: str, body: dict) -> tuple[int, dict, dict]:
        arrived = time.monotonic()
        messages = body.get("messages") or []
        step = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant") + 1
        found = request_problems(messages)
        offered = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        first = first_text(messages)
        child = first.startswith(CHILD_TASK)
        wanted = self.child_tools if child else self.agent_tools
        with self._lock:
            if found:
                self.problems.append(f"{tag} sent a request the API would reject: {found[:3]}")
            if wanted is not None and offered != wanted:
                self.problems.append(f"{tag} asked for step {step} with tools {sorted(offered)}, not the run's "
                                     f"agent's {sorted(wanted)}")
            planned = self._burst.pop(0) if self._burst else None
            breaking = None
            if planned is None and self._breaks:
                breaking = self._breaks.pop(0)
        if self.on_request is not None:
            self.on_request(tag)
        if child and self.on_child is not None:
            self.on_child(tag, "request")
        if planned is not None:
            status, retry_after = planned
            reply = error_reply(status, "simulated back-pressure", {"retry-after": f"{retry_after:g}"})
        else:
            if self.delay:
                self.server.stopping.wait(self.delay)
            reply = (200, {}, self.reply(body))
            if breaking is not None:
                reply = (BROKEN, {"after": breaking[0], "error_type": breaking[1]}, reply[2])
            elif child and self.on_child is not None and reply[2]["stop_reason"] == "end_turn":
                self.on_child(tag, "final")
        with self._lock:
            if reply[0] in (200, BROKEN):
                kind = "broken" if reply[0] == BROKEN else str(reply[2].get("stop_reason"))
                self.replies[kind] = self.replies.get(kind, 0) + 1
            self.requests.append(Request(tag, reply[0], step, first, arrived))
        return reply

    def break_streams(self, count: int, error_type: str | None) -> None:
        """Cut the next ``count`` replies' streams part-way (the connection closes, or an ``error`` event such
        as ``overloaded_error`` ends it): no reply is delivered, so none is paid."""
        with self._lock:
            self._breaks = [(self._rng.randint(1, 6), error_type)] * count

    def end_breaks(self) -> int:
        with self._lock:
            left, self._breaks = len(self._breaks), []
        return left

    def _handler(self):
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def handle(self) -> None:
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed mid-request: the simulation does that

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                if self.path.split("?")[0].endswith("/count_tokens"):
                    status, headers, reply = 200, {}, {"input_tokens": 100}
                else:
                    status, headers, reply = model._answer(self.headers.get(PROCESS_HEADER, "?"), body)
                if status in (200, BROKEN) and body.get("stream"):
                    events = list(events_of(reply))
                    if status == BROKEN:
                        events = events[:headers["after"]]
                        if headers["error_type"]:
                            events.append({"type": "error", "error": {"type": headers["error_type"],
                                                                      "message": "simulated"}})
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    self.wfile.write(sse_bytes(events))
                    self.close_connection = True
                    return
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
