"""``dayflow import --claude-code``: Claude Code's session files as read-only runs, through the real console script,
on both backends (the fixtures: tests/cli/claude_code_fixtures.py, each citing the public readers whose
shapes it follows)."""

from __future__ import annotations

import json
import re
import time


from dayflow_tui.store import open_store

from . import claude_code_fixtures as cc
from ..reliability_helpers import assert_one_error_line, cli_env, dayflow, text

WIDE = cli_env(COLUMNS="400")  # show's rules and panels unwrapped, so a phrase is on one line
RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def imported(db, root):
    result = dayflow("import", "--claude-code", str(root), db=db)
    assert result.returncode == 0, text(result.stderr)
    assert "Traceback" not in text(result.stderr)
    return text(result.stderr)


def runs_json(db, *extra):
    result = dayflow("runs", "--json", *extra, db=db)
    assert result.returncode == 0, text(result.stderr)
    return json.loads(result.stdout)


def steps_of(db, run_id):
    result = dayflow("show", run_id, "--jsonl", db=db)
    assert result.returncode == 0, text(result.stderr)
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def rows(db) -> dict[str, list]:
    """Every stored row an import writes, as the database holds it (compared byte for byte)."""
    store = open_store(db, create=False)
    try:
        with store.bound():
            return {table: [tuple(r) for r in store.db.execute_sql(f'SELECT * FROM "{table}" ORDER BY 1, 2')]
                    for table in ("runs", "steps", "imported_files")}
    finally:
        store.close()


def main_run(db):
    (main,) = [r for r in runs_json(db, "--source", "claude-code") if r["parent_id"] is None]
    return main


def test_every_shape_becomes_a_step_of_a_read_only_run(db_target, tmp_path):
    root = cc.write_projects(tmp_path / "projects")
    said = imported(db_target, root)
    assert "not-claude.jsonl: not a Claude Code session file" in said and "nothing imported from it" in said

    listed = runs_json(db_target, "--source", "claude-code")
    assert len(listed) == 3
    main = main_run(db_target)
    assert main["source"] == "claude-code" and main["status"] == "done"
    assert main["session"] == {"id": cc.SESSION, "dir": cc.CWD, "git_branch": cc.BRANCH}
    assert main["model"] == cc.MODEL and main["cost_usd"] > 0 and main["unpriced_models"] == []
    assert main["title"].startswith("The cart total is off by a cent")

    steps = steps_of(db_target, main["id"])
    assert [s["stop_reason"] for s in steps] == [
        "claude-code:summary", "claude-code:prompt", "tool_use", "end_turn", "claude-code:prompt", "tool_use",
        "claude-code:compact_boundary", "end_turn", "claude-code:system:api_error", "claude-code:unknown"]
    turn = steps[2]  # three records of one message.id, merged in order, with the result that followed
    assert [b["type"] for b in turn["assistant"]] == ["thinking", "text", "tool_use"]
    assert turn["assistant"][0]["signature"] == "EqQBCkYIBRgCKkB0c2lnbmF0dXJl"
    assert turn["tool_results"][0]["tool_use_id"] == "toolu_01BASH"
    # usage per message: the whole input (uncached + cache writes + cache reads), the cache columns apart
    assert (turn["input_tokens"], turn["output_tokens"], turn["cache_creation_input_tokens"],
            turn["cache_read_input_tokens"]) == (3 + 5120 + 12000, 412, 5120, 12000)
    assert turn["model"] == cc.MODEL and turn["created_at"] == "2025-10-01T09:00:04.100Z"
    assert steps[0]["assistant"][0]["text"] == "Fix the cart total rounding"
    assert steps[0]["reply_as_received"]["leafUuid"] == "u-0009"
    assert "preTokens=155321" in steps[6]["assistant"][0]["text"]
    unknown = steps[9]
    assert json.loads(unknown["assistant"][0]["text"])["type"] == "x-future-record"  # the record, as JSON
    assert unknown["reply_as_received"]["payload"] == {"quokka": 7}
    assert sum(s["input_tokens"] for s in steps) == main["input_tokens"]

    children = {r["id"]: r for r in listed if r["parent_id"] == main["id"]}
    assert len(children) == 2  # the inline sidechain, and the subagents/ file
    inline = next(r for r in children.values() if r["title"].startswith("Which tests"))
    inline_steps = steps_of(db_target, inline["id"])
    assert [s["stop_reason"] for s in inline_steps] == ["claude-code:prompt", "tool_use", "end_turn"]
    assert inline_steps[1]["tool_results"][0]["tool_use_id"] == "toolu_01GREP"
    assert any(r["title"].startswith("List the files") for r in children.values())

    # costs from the usage: the model calls only (the prompts and markers are no calls), every run priced
    spend = json.loads(dayflow("spend", "--json", db=db_target).stdout)
    assert spend["total"]["calls"] == 4 + 2 + 1 and spend["total"]["runs"] == 3
    assert spend["total"]["input_tokens"] == sum(r["input_tokens"] for r in listed)
    assert spend["rows"][0]["unpriced_calls"] == 0 and spend["total"]["cost_usd"] > main["cost_usd"]

    # search finds the imported text: a reply, a prompt, a sidechain's tool result, a subagent file's reply
    for word, run_id in (("kumquat", main["id"]), ("quince", inline["id"]), ("platypus", None)):
        found = dayflow("search", word, "--json", db=db_target)
        assert found.returncode == 0, text(found.stderr)
        hits = json.loads(found.stdout)
        hit_runs = {h["run_id"] for h in (hits["hits"] if isinstance(hits, dict) else hits)}
        assert hit_runs and (run_id is None or run_id in hit_runs), (word, hits)

    # show prints the transcript, and where the session comes from
    shown = dayflow("show", main["id"], "--no-pager", db=db_target, env=WIDE)
    assert shown.returncode == 0, text(shown.stderr)
    out = text(shown.stdout)
    assert f"claude --resume {cc.SESSION}" in out and "Conversation compacted" in out and "x-future-record" in out


def test_only_the_chosen_source_is_listed(db_target, tmp_path):
    cc.write_projects(tmp_path / "projects")
    imported(db_target, tmp_path / "projects")
    brief = dayflow("brief", db=db_target, env=cli_env(DAYFLOW_MODEL="offline"))
    assert brief.returncode == 0, text(brief.stderr)
    mine = runs_json(db_target, "--source", "dayflow")
    theirs = runs_json(db_target, "--source", "claude-code")
    assert len(mine) == 1 and mine[0]["source"] == "dayflow" and mine[0]["session"] is None
    assert len(theirs) == 3 and {r["source"] for r in theirs} == {"claude-code"}
    plain = dayflow("runs", "--source", "claude-code", db=db_target)
    assert plain.returncode == 0 and text(plain.stdout).count("source=claude-code") == 3
    assert mine[0]["id"] not in text(plain.stdout)


def test_reimport_appends_only_new_steps_and_changes_nothing_else(db_target, tmp_path):
    root = cc.write_projects(tmp_path / "projects")
    imported(db_target, root)
    before = rows(db_target)
    main = main_run(db_target)

    again = imported(db_target, root)  # nothing grew: nothing written, not a byte
    assert "0 new step(s)" in again
    assert rows(db_target) == before

    cc.write_records(cc.session_path(root), cc.appended_records(), append=True)
    grew = imported(db_target, root)
    assert "3 new step(s)" in grew and main["id"] in grew
    after = rows(db_target)
    old_steps = set(before["steps"])
    assert old_steps <= set(after["steps"])  # every stored step as it was
    new_steps = [r for r in after["steps"] if r not in old_steps]
    assert len(new_steps) == 3
    steps = steps_of(db_target, main["id"])
    assert [s["stop_reason"] for s in steps[10:]] == ["claude-code:prompt", "tool_use", "end_turn"]
    assert steps[11]["tool_results"][0]["content"] == "3 passed"
    assert [r for r in after["runs"] if r[0] != main["id"]] == [r for r in before["runs"] if r[0] != main["id"]]

    settled = rows(db_target)
    imported(db_target, root)
    assert rows(db_target) == settled


def test_a_line_still_being_written_and_a_call_without_its_result_wait_for_the_next_import(db_target, tmp_path):
    root = tmp_path / "projects"
    path = cc.session_path(root)
    records = cc.session_records() + cc.appended_records()
    cc.write_records(path, records[:-3])  # ends after the tool_use record: its result has not come
    whole = cc.line(records[-3])
    with open(path, "ab") as fh:
        fh.write(whole[: len(whole) // 2])  # a live session: half a line, no newline
    said = imported(db_target, root)
    assert "still being written" in said
    main = main_run(db_target)
    assert main["steps"] == 11  # the ten, and the new prompt; the call waits for its result
    with open(path, "ab") as fh:
        fh.write(whole[len(whole) // 2:])
        fh.write(cc.line(records[-2]) + cc.line(records[-1]))
    imported(db_target, root)
    steps = steps_of(db_target, main["id"])
    assert len(steps) == 13
    assert steps[11]["assistant"][0]["id"] == "toolu_01TEST" and steps[11]["tool_results"][0]["content"] == "3 passed"


def test_imported_runs_are_read_only_everywhere(db_target, tmp_path):
    root = cc.write_projects(tmp_path / "projects")
    imported(db_target, root)
    main = main_run(db_target)
    before = rows(db_target)
    for command in (["resume", main["id"]], ["resume", main["id"], "--dry-run"], ["fork", main["id"], "--at", "2"],
                    ["approve", main["id"]], ["deny", main["id"], "--reason", "no"], ["cancel", main["id"]]):
        result = dayflow(*command, db=db_target)
        assert result.returncode == 4, (command, text(result.stderr))
        line = assert_one_error_line(result, "is an imported Claude Code session: read-only",
                                     f"claude --resume {cc.SESSION}", cc.CWD)
        assert main["id"] in line
    assert rows(db_target) == before
    refused = dayflow("export", main["id"], "--anthropic", str(tmp_path / "req.jsonl"), db=db_target)
    assert refused.returncode == 64 and not (tmp_path / "req.jsonl").exists()
    assert_one_error_line(refused, "imported Claude Code session", "--jsonl")
    exported = dayflow("export", main["id"], "--jsonl", str(tmp_path / "runs.jsonl"), db=db_target)
    assert exported.returncode == 0, text(exported.stderr)


def test_usage_mistakes_are_one_line(tmp_path):
    db = tmp_path / "d.db"
    assert_one_error_line(dayflow("import", db=db), "import needs a FILE")
    assert_one_error_line(dayflow("import", "x.jsonl", "--claude-code", str(tmp_path), db=db), "--claude-code")
    missing = dayflow("import", "--claude-code", str(tmp_path / "nowhere"), db=db)
    assert missing.returncode == 64
    assert_one_error_line(missing, "no such directory")
    assert not db.exists()  # nothing created for a wrong directory


def test_hostile_files(db_target, tmp_path):
    root = tmp_path / "projects"
    path = cc.session_path(root)
    records = cc.session_records()
    hostile = "\x1b[31mRED\x1b]0;title\x07 [bold]markup[/bold] \x9b2J \u202e"
    # escape sequences in every field a run or step shows: cwd, branch, model, prompt, text, tool name, result,
    # summary
    swaps = {cc.CWD: f"/home/{hostile}", cc.BRANCH: f"b{hostile}", cc.MODEL: f"claude-{hostile}"}

    def swapped(value):
        if isinstance(value, dict):
            return {k: swapped(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swapped(v) for v in value]
        return swaps.get(value, value)

    evil = swapped(records[2:7])
    evil[0]["message"]["content"] = f"prompt {hostile}"
    evil[2]["message"]["content"][0]["text"] = f"reply {hostile}"
    evil[3]["message"]["content"][0]["name"] = f"Bash{hostile}"
    evil[4]["message"]["content"][0]["content"] = f"result {hostile}"
    summary = {"type": "summary", "summary": f"summary {hostile}", "leafUuid": "u-0001"}
    cc.write_records(path, [summary] + evil)
    with open(path, "ab") as fh:
        # invalid UTF-8 inside a record; then a 100 MB record; then a record after it, which is imported
        fh.write(cc.line(records[7]).replace(b"kumquat", b"kum\xff\xfe\xc3quat"))
        fh.write(b'{"type":"user","sessionId":"' + cc.SESSION.encode() + b'","message":{"role":"user","content":"'
                 + b"A" * (100 * 1024 * 1024) + b'"}}\n')
        fh.write(cc.line(cc.appended_records()[0]))
    started = time.monotonic()
    said = imported(db_target, root)
    elapsed = time.monotonic() - started
    assert elapsed < 60, elapsed
    assert "bytes, more than" in said and "skipped" in said  # the 100 MB record refused with a line
    assert "not valid UTF-8" in said
    main = main_run(db_target)
    steps = steps_of(db_target, main["id"])
    assert steps[-1]["assistant"][0]["text"].startswith("Now run the tests for the wombat")  # kept going
    assert not any("A" * 1000 in json.dumps(s) for s in steps)

    for command in (["runs"], ["show", main["id"], "--no-pager"], ["runs", "--json"], ["show", main["id"], "--raw"]):
        result = dayflow(*command, db=db_target, env=WIDE)
        assert result.returncode == 0, (command, text(result.stderr))
        assert not RAW_CONTROL.search(result.stdout), (command, RAW_CONTROL.search(result.stdout))
        shown = result.stdout.decode("utf-8")
        assert "\\x1b[31mRED" in shown or "\\u001b[31mRED" in shown, command
    shown = text(dayflow("show", main["id"], "--no-pager", db=db_target, env=WIDE).stdout)
    for fragment in ("prompt \\x1b[31mRED", "reply \\x1b[31mRED", "Bash\\x1b[31mRED", "summary \\x1b[31mRED",
                     "[bold]markup[/bold]", "kum\ufffd"):
        assert fragment in shown, fragment
    listed = text(dayflow("runs", db=db_target, env=WIDE).stdout)
    assert "dir=/home/\\x1b[31mRED" in listed and "claude-\\x1b[31mRED" in listed


def test_a_file_that_is_not_claude_codes_imports_nothing(db_target, tmp_path):
    root = tmp_path / "projects"
    cc.write_records(root / "-x" / "events.jsonl", cc.FOREIGN)
    (root / "-x" / "binary.jsonl").write_bytes(b"\x00\xff\xfe garbage\n\x01\x02")
    said = imported(db_target, root)
    lines = [ln for ln in said.splitlines() if "not a Claude Code session file" in ln]
    assert len(lines) == 2 and all("nothing imported from it" in ln for ln in lines)
    assert runs_json(db_target, "--source", "claude-code") == []


def test_the_jsonl_export_import_still_works(tmp_path):
    db, other = tmp_path / "a.db", tmp_path / "b.db"
    assert dayflow("brief", db=db, env=cli_env(DAYFLOW_MODEL="offline")).returncode == 0
    (run,) = runs_json(db)
    out = tmp_path / "runs.jsonl"
    assert dayflow("export", run["id"], "--jsonl", str(out), db=db).returncode == 0
    result = dayflow("import", str(out), db=other)
    assert result.returncode == 0, text(result.stderr)
    assert [r["id"] for r in runs_json(other)] == [run["id"]]


def test_a_call_that_never_got_its_result_is_taken_once_the_file_has_settled(db_target, tmp_path):
    import os

    root = tmp_path / "projects"
    path = cc.session_path(root)
    records = cc.session_records() + cc.appended_records()
    cc.write_records(path, records[:-2])  # the session ended after a tool call (Claude Code killed, say)
    with open(path, "ab") as fh:
        fh.write(cc.line(records[-1])[:20])  # and a line it never finished
    imported(db_target, root)
    main = main_run(db_target)
    assert main["steps"] == 11  # the call waits: its result may still come
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))
    imported(db_target, root)
    steps = steps_of(db_target, main_run(db_target)["id"])
    assert len(steps) == 12 and steps[-1]["assistant"][0]["id"] == "toolu_01TEST" and steps[-1]["tool_results"] is None
    settled = rows(db_target)
    imported(db_target, root)  # the unfinished line is read again, and nothing is written
    assert rows(db_target) == settled


def test_spend_by_source_splits_dayflows_runs_from_imported_sessions(db_target, tmp_path):
    cc.write_projects(tmp_path / "projects")
    imported(db_target, tmp_path / "projects")
    brief = dayflow("brief", db=db_target, env=cli_env(DAYFLOW_MODEL="offline"))
    assert brief.returncode == 0, text(brief.stderr)
    by_source = json.loads(dayflow("spend", "--by", "source", "--json", db=db_target).stdout)
    rows = {row["source"]: row for row in by_source["rows"]}
    assert set(rows) == {"dayflow", "claude-code"}
    assert rows["dayflow"]["runs"] == 1 and rows["claude-code"]["runs"] == 3
    by_model = json.loads(dayflow("spend", "--json", db=db_target).stdout)
    assert sum(r["calls"] for r in rows.values()) == by_model["total"]["calls"]  # the same calls, split otherwise
    plain = text(dayflow("spend", "--by", "source", db=db_target).stdout)
    assert "by source" in plain and "claude-code" in plain
