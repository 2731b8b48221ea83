"""Bytes per step: new SQLite files use 16 KB pages, so a step row no longer takes a 4 KB page of its own.

The row format is unchanged (a file made by an older Dayflow, with 4 KB
pages, opens, takes new steps and reads back as before); only new files get
the larger pages. ``bench/bench_bytes.py`` has the figures against the
Agents SDK's ``SQLiteSession``.
"""

from __future__ import annotations

import json
import sqlite3

from dayflow_tui.store import StepRecord, open_store

STEPS = 60


def agent_step(i: int) -> tuple[list[dict], list[dict]]:
    """An agent-like step: a short turn with one tool call, and about 2 KB of tool result."""
    call = {"type": "tool_use", "id": f"toolu_{i:06d}", "name": "read_inbox", "input": {"limit": 20}}
    mails = [{"id": f"m{i}-{k}", "subject": f"Status of item {i}-{k}", "snippet": "A short note, nothing urgent."}
             for k in range(20)]
    result = {"type": "tool_result", "tool_use_id": call["id"], "content": json.dumps({"ok": True, "mails": mails})}
    return [{"type": "text", "text": f"Step {i}: reading the inbox again."}, call], [result]


def step_record(i: int, assistant: list[dict]) -> StepRecord:
    return StepRecord(n=i, stop_reason="tool_use", assistant=assistant, input_tokens=1500 + 600 * i,
                      output_tokens=60, model="offline")


def _page_size(path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()


def _settled_size(path) -> int:
    conn = sqlite3.connect(str(path))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path.stat().st_size


def _fill(path, steps: int = STEPS) -> str:
    store = open_store(path)
    run = store.create_run("Prepare my day.", model="offline", max_steps=steps + 1, status="running")
    for i in range(1, steps + 1):
        assistant, results = agent_step(i)
        store.append_step(run.id, step_record(i, assistant))
        store.set_tool_results(run.id, i, results)
    store.close()
    return run.id


def _old_file(path) -> None:
    """A database file as an older Dayflow made it: 4 KB pages, WAL."""
    conn = sqlite3.connect(str(path))
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = wal")
    conn.close()


def test_new_files_get_16k_pages_and_old_files_keep_theirs(tmp_path):
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    open_store(new).close()
    _old_file(old)
    open_store(old).close()
    assert _page_size(new) == 16384
    assert _page_size(old) == 4096


def test_old_files_take_and_return_steps_as_before(tmp_path):
    old = tmp_path / "old.db"
    _old_file(old)
    run_id = _fill(old, 5)
    store = open_store(old, create=False)
    steps = store.replay_steps(run_id)
    assert [s.n for s in steps] == [1, 2, 3, 4, 5]
    assert [json.loads(s.assistant) for s in steps] == [agent_step(i)[0] for i in range(1, 6)]
    assert [json.loads(s.tool_results) for s in steps] == [agent_step(i)[1] for i in range(1, 6)]
    store.close()
    assert _page_size(old) == 4096


def test_a_step_takes_fewer_bytes_on_new_files(tmp_path):
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    _old_file(old)
    for path in (new, old):
        open_store(path).close()
    empty = {path: _settled_size(path) for path in (new, old)}
    for path in (new, old):
        _fill(path)
    per_step = {path: (_settled_size(path) - empty[path]) / STEPS for path in (new, old)}
    assert per_step[old] >= 4096  # one page per step row
    assert per_step[new] < 0.8 * per_step[old], per_step
