"""Example databases for the dashboard's tests, screenshots and benchmark.

Runs are made by the real loop on the offline model (crashes, failures and
budgets included), at pinned clock times and with fixed ids, so a database
built here looks the same on every machine. Only the hostile-content run is
written step by step: no model would produce it on request.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime, timedelta
from typing import Iterator

from ..agent import runs
from ..config.settings import OFFLINE_MODEL
from ..config.errors import ModelCallFailed
from ..agent.offline import OfflineClient
from ..store import Lease, StepRecord, Store

BASE_TIME = datetime(2026, 12, 2, 8, 0, 0)
# What clock.now() reads while the app is on screen in tests and screenshots.
SCREEN_TIME = "2026-12-02T09:30:00"
# Untrusted text that must show literally: Rich/Textual markup, ANSI colour, an OSC hyperlink, a title change.
HOSTILE = ("[bold]not bold[/] [link=https://evil.example]click[/link] \x1b[31mred?\x1b[0m "
           "\x1b]8;;https://evil.example\x07osc link\x1b]8;;\x07 \x1b]0;retitled\x07 [/] [@click=app.quit]q[/]")


@contextlib.contextmanager
def clock_at(moment: datetime) -> Iterator[None]:
    """Pin ``clock.now()`` (via DAYFLOW_FAKE_NOW) while a run is written."""
    before = os.environ.get("DAYFLOW_FAKE_NOW")
    os.environ["DAYFLOW_FAKE_NOW"] = moment.isoformat()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("DAYFLOW_FAKE_NOW", None)
        else:
            os.environ["DAYFLOW_FAKE_NOW"] = before


class FailingClient:
    """The offline model, except that call number ``fail_on`` raises like an overloaded API."""

    def __init__(self, fail_on: int) -> None:
        self._offline = OfflineClient(delay=0)
        self.fail_on = fail_on
        self.calls = 0
        self.messages = self

    def create(self, **request):
        self.calls += 1
        if self.calls == self.fail_on:
            raise RuntimeError("529 overloaded_error: the API is overloaded, try again later")
        return self._offline.messages.create(**request)


def done_run(store: Store, run_id: str, at: datetime) -> None:
    with clock_at(at):
        runs.run_brief(store, run_id=run_id, model=OFFLINE_MODEL, client=OfflineClient(delay=0))


def waiting_run(store: Store, run_id: str, at: datetime) -> None:
    """A run stopped after step 2: its create_task calls wait for a person's decision."""
    with clock_at(at):
        runs.run_brief(store, run_id=run_id, model=OFFLINE_MODEL, client=OfflineClient(delay=0),
                       approval_tools=("create_task",))


def interrupted_run(store: Store, run_id: str, at: datetime, *, after_step: int = 1) -> None:
    """A run whose process died after committing ``after_step`` steps (status stays ``running``)."""
    with clock_at(at):
        try:
            runs.run_brief(store, run_id=run_id, model=OFFLINE_MODEL, client=OfflineClient(delay=0),
                           crash_after_step=after_step)
        except SystemExit:
            pass


def failed_run(store: Store, run_id: str, at: datetime) -> None:
    with clock_at(at):
        try:
            runs.run_brief(store, run_id=run_id, model=OFFLINE_MODEL, client=FailingClient(fail_on=2))
        except ModelCallFailed:
            pass


def budget_run(store: Store, run_id: str, at: datetime) -> None:
    with clock_at(at):
        runs.run_brief(store, run_id=run_id, model=OFFLINE_MODEL, client=OfflineClient(delay=0), max_steps=1)


def queued_run(store: Store, run_id: str, at: datetime) -> None:
    with clock_at(at):
        store.create_run(runs.DEFAULT_TASK, model=OFFLINE_MODEL, run_id=run_id)


def running_run(store: Store, run_id: str, at: datetime) -> Lease:
    """A run this process holds the lease on (so its owner is alive). Release the lease when done."""
    with clock_at(at):
        _run, lease = store.create_claimed_run(runs.DEFAULT_TASK, model=OFFLINE_MODEL, run_id=run_id)
    return lease


def hostile_run(store: Store, run_id: str, at: datetime) -> None:
    """A finished run whose task, text, tool arguments and payloads carry markup and escape codes,
    with one tool call that failed (``is_error``)."""
    with clock_at(at):
        run = store.create_run(f"Summarise: {HOSTILE}", model=OFFLINE_MODEL, run_id=run_id,
                               status="running")
    with clock_at(at + timedelta(seconds=2)):
        assistant = [{"type": "text", "text": f"Reading mail titled {HOSTILE}"},
                     {"type": "tool_use", "id": "toolu_h1", "name": "read_inbox", "input": {"limit": 2}},
                     {"type": "tool_use", "id": "toolu_h2", "name": "create_task",
                      "input": {"title": HOSTILE, "idempotency_key": "mail-[bold]x[/]"}}]
        store.append_step(run.id, StepRecord(n=1, stop_reason="tool_use", assistant=assistant, input_tokens=812,
                                             output_tokens=96, model=OFFLINE_MODEL, duration_ms=640))
        mails = {"ok": True, "count": 2, "mails": [
            {"id": "m-1", "subject": HOSTILE, "from": "[link=x]boss[/link] <boss@example.com>"},
            {"id": "m-2", "subject": "\x1b[2J\x1b[Hscreen wipe", "from": "ansi@example.com"}]}
        error = {"ok": False, "error": {"code": "invalid_input",
                                        "message": f"field 'due' must be a date YYYY-MM-DD, got {HOSTILE!r}"}}
        results = [{"type": "tool_result", "tool_use_id": "toolu_h1", "content": json.dumps(mails)},
                   {"type": "tool_result", "tool_use_id": "toolu_h2", "content": json.dumps(error),
                    "is_error": True}]
        store.set_tool_results(run.id, 1, results)
    with clock_at(at + timedelta(seconds=5)):
        brief = f"## Today\n- {HOSTILE}\n\n## One thing\nCheck the [bold] mail."
        store.append_step(run.id, StepRecord(n=2, stop_reason="end_turn", assistant=[{"type": "text", "text": brief}],
                                             input_tokens=1204, output_tokens=140, model=OFFLINE_MODEL,
                                             duration_ms=710),
                          final_status="done", final_text=brief)


def mcp_run(store: Store, run_id: str, at: datetime) -> None:
    """A finished run of an agent whose tools come from an MCP server (``counting``): the shape records each
    tool's server and annotations as ``Agent.describe`` does; step 1 calls a read-only, a destructive (approved)
    and an unannotated tool, the last killed mid-call (answered "outcome unknown")."""
    annotations = {"counting__look": {"readOnlyHint": True},
                   "counting__wipe": {"destructiveHint": True},
                   "counting__send": {}}
    rules = {"counting__look": {"kind": "read_only", "key": None, "approval": False},
             "counting__wipe": {"kind": "plain", "key": None, "approval": True},
             "counting__send": {"kind": "plain", "key": None, "approval": False}}
    shape = {"system": "Use the tools.", "model": OFFLINE_MODEL, "tools": {name: {"type": "object"} for name in rules},
             "tool_rules": rules,
             "mcp_servers": {"counting": {"transport": "http", "url": "https://mcp.example.com/mcp", "headers": {},
                                          "secret_headers": ["Authorization"], "auto_approve": ["send"],
                                          "overrides": {}, "timeout_s": 60.0}},
             "mcp_tools": {name: {"server": "counting", "annotations": hints} for name, hints in annotations.items()}}
    with clock_at(at):
        run = store.create_run("Forecast, wipe the cache, tell the team", model=OFFLINE_MODEL, run_id=run_id,
                               status="running", agent={"agent": "mcpdemo", "agent_shape": json.dumps(shape)})
    with clock_at(at + timedelta(seconds=2)):
        assistant = [{"type": "text", "text": "Checking the forecast, clearing the cache and telling the team."},
                     {"type": "tool_use", "id": "toolu_m1", "name": "counting__look", "input": {"city": "Lisbon"}},
                     {"type": "tool_use", "id": "toolu_m2", "name": "counting__wipe", "input": {"key": "cache"}},
                     {"type": "tool_use", "id": "toolu_m3", "name": "counting__send", "input": {"text": "done"}}]
        store.append_step(run.id, StepRecord(n=1, stop_reason="tool_use", assistant=assistant, input_tokens=640,
                                             output_tokens=88, model=OFFLINE_MODEL, duration_ms=520))
        unknown = {"ok": False, "error": {"code": "outcome_unknown",
                                          "message": "the process died during this call; it was not run again"}}
        store.set_tool_results(run.id, 1, [
            {"type": "tool_result", "tool_use_id": "toolu_m1", "content": "Lisbon: dry, 21 C"},
            {"type": "tool_result", "tool_use_id": "toolu_m2", "content": "wiped cache"},
            {"type": "tool_result", "tool_use_id": "toolu_m3", "content": json.dumps(unknown), "is_error": True}])
    with clock_at(at + timedelta(seconds=5)):
        text = "Lisbon is dry at 21 C; the cache is wiped; the message may or may not have gone out."
        store.append_step(run.id, StepRecord(n=2, stop_reason="end_turn", assistant=[{"type": "text", "text": text}],
                                             input_tokens=900, output_tokens=40, model=OFFLINE_MODEL,
                                             duration_ms=480),
                          final_status="done", final_text=text)


def every_status(store: Store) -> Lease:
    """One run per status, oldest first: done, budget, failed, interrupted, queued, running.

    Returns the lease of the ``running`` run (held by this process); release it when finished.
    """
    done_run(store, "run-done-0001", BASE_TIME)
    budget_run(store, "run-budget-01", BASE_TIME + timedelta(minutes=10))
    failed_run(store, "run-failed-01", BASE_TIME + timedelta(minutes=20))
    interrupted_run(store, "run-crash-001", BASE_TIME + timedelta(minutes=30))
    queued_run(store, "run-queued-01", BASE_TIME + timedelta(minutes=40))
    return running_run(store, "run-live-0001", BASE_TIME + timedelta(minutes=50))


def many_runs(store: Store, count: int, *, prefix: str = "bulk") -> None:
    """``count`` finished runs without steps, in one transaction (for the benchmark)."""
    with store.db.atomic():
        for i in range(count):
            with clock_at(BASE_TIME + timedelta(seconds=i)):
                store.create_run(f"bulk run {i}", model=OFFLINE_MODEL, run_id=f"{prefix}-{i:07d}",
                                 status="done")


def long_run(store: Store, run_id: str, steps: int) -> None:
    """A finished run of ``steps`` steps, each a tool call with a result (for the benchmark)."""
    with store.db.atomic():
        store.create_run(f"long run of {steps} steps", model=OFFLINE_MODEL, run_id=run_id, status="running")
        for n in range(1, steps + 1):
            last = n == steps
            blocks = [{"type": "text", "text": f"step {n}: " + "reading the calendar again. " * 8}]
            if not last:
                blocks.append({"type": "tool_use", "id": f"toolu_{n:05d}", "name": "read_calendar",
                               "input": {"range": "week"}})
            store.append_step(run_id, StepRecord(n=n, stop_reason="end_turn" if last else "tool_use",
                                                 assistant=blocks, input_tokens=1000 + n, output_tokens=50 + n % 7),
                              final_status="done" if last else None, final_text="## Today\n- done" if last else None)
            if not last:
                payload = json.dumps({"ok": True, "count": 3, "events": [{"title": f"event {k}"} for k in range(3)]})
                store.set_tool_results(run_id, n, [{"type": "tool_result", "tool_use_id": f"toolu_{n:05d}",
                                                    "content": payload}])
