"""The pure reader of Claude Code's session files (``claude_code.sessions``): threads, waiting steps, big lines."""

from __future__ import annotations

import tracemalloc

from dayflow_tui.claude_code.sessions import MAIN, read_session

from . import claude_code_fixtures as cc


def test_a_step_waiting_for_its_result_is_read_again_without_repeating_another_threads_steps(tmp_path):
    path = tmp_path / "s.jsonl"
    records = cc.session_records()
    task_result = next(i for i, r in enumerate(records) if r.get("uuid") == "u-0009")
    cc.write_records(path, records[:task_result])  # the Task call waits; its subagent (a sidechain) has finished
    first = read_session(path)
    assert first.waiting
    main = [s for s in first.steps if s.thread == MAIN]
    side = [s for s in first.steps if s.thread != MAIN]
    assert [s.stop_reason for s in main][-1] == "claude-code:prompt"  # the Task step is not among them yet
    assert [s.stop_reason for s in side] == ["claude-code:prompt", "tool_use", "end_turn"]
    task_start = path.read_bytes().index(b'"uuid": "u-0008"')
    assert first.end_offset <= task_start  # read again from the waiting step's first record

    cc.write_records(path, records[task_result:], append=True)
    second = read_session(path, start=first.end_offset, done=first.done)
    assert not second.waiting
    assert [s.thread for s in second.steps if s.thread != MAIN] == []  # the sidechain is not read twice
    task = second.steps[0]
    assert task.assistant[0]["name"] == "Task" and task.tool_results[0]["tool_use_id"] == "toolu_01TASK"
    assert second.end_offset == path.stat().st_size


def test_a_huge_record_is_stepped_over_without_being_held(tmp_path):
    path = tmp_path / "s.jsonl"
    records = cc.session_records()
    cc.write_records(path, records[:3])
    with open(path, "ab") as fh:
        fh.write(b'{"type":"user","message":{"role":"user","content":"' + b"Z" * (40 * 1024 * 1024) + b'"}}\n')
    cc.write_records(path, records[3:8], append=True)
    tracemalloc.start()
    try:
        read = read_session(path, max_line=1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, peak  # a 40 MB line, read 1 MB at a time
    assert len(read.problems) == 1 and "more than 1,048,576" in read.problems[0]
    assert [s.stop_reason for s in read.steps] == ["claude-code:summary", "claude-code:prompt", "tool_use",
                                                    "end_turn"]


def test_lines_that_are_not_json_are_said_and_skipped_and_lone_surrogates_made_storable(tmp_path):
    path = tmp_path / "s.jsonl"
    records = cc.session_records()
    cc.write_records(path, records[:3])
    with open(path, "ab") as fh:
        fh.write(b"{not json\n")
        fh.write(b'{"type":"user","sessionId":"s","message":{"role":"user","content":"half \\ud800 surrogate"}}\n')
    read = read_session(path)
    assert any("not a JSON record" in p for p in read.problems)
    assert read.steps[-1].assistant[0]["text"] == "half \ufffd surrogate"
    read.steps[-1].assistant[0]["text"].encode("utf-8")  # storable
