"""What the contract files share: a step to commit, a run held under a lease, capabilities a backend may lack."""

from __future__ import annotations

import sqlite3

from dayflow_tui.store import Lease, Run, Store, StepRecord
from dayflow_tui.store.leases import forget_token


def reply(n: int, text: str = "ok", *, tool: dict | None = None, input_tokens: int = 10,
          output_tokens: int = 5) -> StepRecord:
    """Step ``n`` as the loop commits it: a text block, and a tool call when ``tool`` is given."""
    blocks: list[dict] = [{"type": "text", "text": text}]
    if tool is not None:
        blocks.append({"type": "tool_use", **tool})
    return StepRecord(n=n, stop_reason="tool_use" if tool else "end_turn", assistant=blocks,
                      input_tokens=input_tokens, output_tokens=output_tokens, model="offline")


def held_run(store: Store, run_id: str, task: str = "a task") -> tuple[Run, Lease]:
    """A run this process drives (created already claimed)."""
    return store.create_claimed_run(task, model="offline", run_id=run_id)


def call(call_id: str, name: str = "create_task", **arguments) -> dict:
    """A tool_use block's fields (without its type)."""
    return {"id": call_id, "name": name, "input": arguments or {"title": "t"}}


def sqlite_has_fts5() -> bool:
    """Whether this Python's SQLite was built with FTS5 (the SQLite search index needs it)."""
    with sqlite3.connect(":memory:") as conn:
        options = {row[0] for row in conn.execute("PRAGMA compile_options")}
    return "ENABLE_FTS5" in options


def taken_over(store: Store, lease: Lease) -> Lease:
    """Another driver takes the run over: this process forgets the lease (a finished thread), and a claim wins."""
    forget_token(lease.token)
    return store.claim(lease.run_id)
