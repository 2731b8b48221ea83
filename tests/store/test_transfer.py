"""``dayflow export --jsonl`` / ``dayflow import``: runs move between databases (SQLite and PostgreSQL) byte for
byte, an imported unfinished run resumes there without a repeated call, and a bad file changes nothing.

Every command is the real console script; rows are compared by plain SQL.
"""

from __future__ import annotations

import json

import pytest

from dayflow_tui.agent.messages import rebuild_messages
from dayflow_tui.store import open_store

from ..api_rules import problems, without_breakpoints
from ..loopback_api import LoopbackAPI
from ..reliability_helpers import cli_env, fingerprint
from ..travel_helpers import (
    database,
    dayflow,
    killed_after_two_steps,
    one_error_line,
    rows,
    run_rows,
    search_index_is_whole,
    three_kinds_of_run,
)


@pytest.mark.parametrize("target_kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_round_trip_keeps_every_column_of_every_row(db_target, target_kind, tmp_path):
    made = three_kinds_of_run(db_target)
    ids = set(made.values())
    before = run_rows(db_target, ids)
    assert len(before["runs"]) == 3 and len(before["run_resumes"]) == 1 and len(before["tasks"]) >= 6
    assert before["run_resumes"][0]["previous_status"] == "failed"

    archive = tmp_path / "runs.jsonl"
    exported = dayflow("export", *made.values(), "--jsonl", str(archive), db=db_target)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in archive.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["dayflow"] == "runs" and lines[0]["format"] == 1
    assert before["approvals"]  # each tool call's result, journaled as it completed, travels with its run
    assert lines[-1] == {"kind": "end", "counts": {"run": 3, "step": len(before["steps"]), "resume": 1,
                                                   "task": len(before["tasks"]),
                                                   "approval": len(before["approvals"])}}
    # The stored JSON text of each step travels as a string, untouched.
    stored = {(s["run_id"], s["n"]): s["assistant"] for s in before["steps"]}
    assert {(r["row"]["run_id"], r["row"]["n"]): r["row"]["assistant"] for r in lines if r["kind"] == "step"} == stored

    with database(target_kind, tmp_path, "target") as target:
        imported = dayflow("import", str(archive), db=target)
        assert imported.returncode == 0, imported.stderr
        assert sorted(imported.stdout.split()) == sorted(" ".join(f"imported run {i}" for i in ids).split())
        assert run_rows(target, ids) == before
        # The imported runs are searchable there, as if they had run there (the index equals a rebuild).
        hits = search_index_is_whole(target, "inbox")
        assert {run for run, _step, _where in hits} == ids
        # The target's own tasks still work: ids go on after the imported ones (PostgreSQL's sequence too).
        store = open_store(target)
        try:
            task, created = store.create_task(idempotency_key="after-import", title="new")
            assert created and task.id > max(t["id"] for t in before["tasks"])
        finally:
            store.close()


def test_an_imported_interrupted_run_resumes_there_with_exactly_one_call(db_target, tmp_path):
    source = tmp_path / "source.db"
    with LoopbackAPI(delay=0.3) as api:
        env = cli_env(**api.env())
        run_id = killed_after_two_steps(source, env)
        calls_before = api.calls  # 3: two committed steps and the call the kill cut short
        assert calls_before == 3
        archive = tmp_path / "run.jsonl"
        assert dayflow("export", run_id, "--jsonl", str(archive), db=str(source)).returncode == 0

        assert dayflow("import", str(archive), db=db_target).returncode == 0
        [run] = [r for r in rows(db_target, "runs") if r["id"] == run_id]
        assert (run["status"], run["step_count"]) == ("running", 2)
        runs = json.loads(dayflow("runs", "--json", db=db_target).stdout)
        assert [r["status"] for r in runs if r["id"] == run_id] == ["interrupted"]

        api.delay = 0
        resumed = dayflow("resume", run_id, db=db_target, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert "## Today" in resumed.stdout
        assert api.calls == calls_before + 1  # the one call the kill lost; nothing committed is bought again
        # The call carried the imported history byte for byte: both stored turns, then their results.
        sent = without_breakpoints(api.requests[-1]["messages"])
        assert not problems(sent)
        imported_steps = [s for s in rows(db_target, "steps") if s["run_id"] == run_id]
        assert [s["n"] for s in imported_steps] == [1, 2, 3]
        assert sent[1]["content"] == json.loads(imported_steps[0]["assistant"])
        assert sent[4]["content"] == json.loads(imported_steps[1]["tool_results"])
        tasks = [t for t in rows(db_target, "tasks") if t["run_id"] == run_id]
        assert len(tasks) == len({t["idempotency_key"] for t in tasks}) == 6


def test_an_existing_run_is_refused_unless_as_new(db_target, tmp_path):
    made = three_kinds_of_run(db_target)
    archive = tmp_path / "runs.jsonl"
    assert dayflow("export", made["done"], "--jsonl", str(archive), db=db_target).returncode == 0
    before = {table: rows(db_target, table) for table in ("runs", "steps", "tasks", "run_resumes")}

    refused = dayflow("import", str(archive), db=db_target)
    assert refused.returncode == 64
    assert f"run {made['done']} already exists" in one_error_line(refused) and "--as-new" in refused.stderr
    assert {table: rows(db_target, table) for table in before} == before

    copied = dayflow("import", str(archive), "--as-new", db=db_target)
    assert copied.returncode == 0, copied.stderr
    new_id = copied.stdout.split()[-1]
    assert copied.stdout.strip() == f"imported run {made['done']} as {new_id}" and new_id != made["done"]
    [original] = [r for r in rows(db_target, "runs") if r["id"] == made["done"]]
    [copy] = [r for r in rows(db_target, "runs") if r["id"] == new_id]
    assert {**copy, "id": None} == {**original, "id": None}
    steps = lambda rid: [{**s, "run_id": None} for s in rows(db_target, "steps") if s["run_id"] == rid]  # noqa: E731
    assert steps(new_id) == steps(made["done"])
    # Tasks are the person's, one per key: the copy finds them there already and adds none.
    assert rows(db_target, "tasks") == before["tasks"]
    assert "6 task(s) already here under the same key" in copied.stderr


def _write(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_a_bad_file_is_one_line_exit_64_and_nothing_is_written(tmp_path, db_path):
    source = str(tmp_path / "source.db")
    made = three_kinds_of_run(source)
    good = tmp_path / "good.jsonl"
    assert dayflow("export", made["done"], made["resumed"], "--jsonl", str(good), db=source).returncode == 0
    records = [json.loads(line) for line in good.read_text().splitlines()]
    steps = [i for i, r in enumerate(records) if r["kind"] == "step"]

    def changed(index: int, **row) -> list:
        copy = json.loads(json.dumps(records))
        copy[index]["row"].update(row)
        return copy

    bad = {
        "not json": "not json at all\n",
        "no header": records[1:],
        "newer format": [{**records[0], "format": 99}] + records[1:],
        "unknown column": changed(1, colour="red"),
        "wrong type": changed(1, input_tokens="many"),
        "bool as number": changed(1, input_tokens=True),
        "too long id": changed(1, id="x" * 40),
        "unknown status": changed(1, status="sleeping"),
        "bad timestamp": changed(1, created_at="yesterday"),
        "assistant not json": changed(steps[0], assistant="[{"),
        "assistant not a list": changed(steps[0], assistant='{"type": "text"}'),
        "step gap": changed(steps[1], n=5),
        "cut short": records[:-3],
        "counts wrong": records[:-1] + [{"kind": "end", "counts": {"run": 9, "step": 0, "resume": 0, "task": 0}}],
        "data after end": records + [records[1]],
        "second run of a step": changed(steps[0], run_id=made["resumed"]),
        "unknown kind": records[:1] + [{"kind": "checkpoint", "row": {}}] + records[1:],
        "nul in text": changed(1, user_msg="a\x00b"),
        "empty": "",
        "a directory": None,
    }
    assert dayflow("brief", db=str(db_path)).returncode == 0
    before = fingerprint(db_path)
    for name, content in bad.items():
        path = tmp_path / f"{name.replace(' ', '-')}.jsonl"
        if content is None:
            path.mkdir()
        elif isinstance(content, str):
            path.write_text(content)
        else:
            _write(path, content)
        result = dayflow("import", str(path), db=str(db_path))
        line = one_error_line(result)
        assert result.returncode == 64, (name, line)
        assert fingerprint(db_path) == before, name
    # The unchanged file imports.
    assert dayflow("import", str(good), db=str(db_path)).returncode == 0


def test_a_file_from_an_older_dayflow_gets_the_defaults_of_columns_it_did_not_have(tmp_path, db_path):
    source = str(tmp_path / "source.db")
    made = three_kinds_of_run(source)
    archive = tmp_path / "old.jsonl"
    assert dayflow("export", made["interrupted"], "--jsonl", str(archive), db=source).returncode == 0
    records = [json.loads(line) for line in archive.read_text().splitlines()]
    for record in records:
        if record.get("kind") == "run":
            del record["row"]["owner_started"]  # schema 1 had no such column
    _write(archive, records)
    assert dayflow("import", str(archive), db=str(db_path)).returncode == 0
    [run] = [r for r in rows(str(db_path), "runs") if r["id"] == made["interrupted"]]
    assert run["owner_started"] is None and run["step_count"] == 2


def test_export_checks_every_id_first_and_never_replaces_a_file(tmp_path, db_path):
    made = three_kinds_of_run(str(db_path))
    out = tmp_path / "out.jsonl"
    unknown = dayflow("export", made["done"], "ffffffffffff", "--jsonl", str(out), db=str(db_path))
    assert unknown.returncode == 3 and "ffffffffffff" in one_error_line(unknown)
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl*"))

    out.write_text("precious\n")
    exists = dayflow("export", made["done"], "--jsonl", str(out), db=str(db_path))
    assert exists.returncode == 64 and "exists" in one_error_line(exists)
    assert out.read_text() == "precious\n"

    to_stdout = dayflow("export", made["done"][:6], "--jsonl", "-", db=str(db_path))
    assert to_stdout.returncode == 0
    assert json.loads(to_stdout.stdout.splitlines()[1])["row"]["id"] == made["done"]


def test_anthropic_export_is_a_request_the_api_takes(tmp_path, db_path):
    made = three_kinds_of_run(str(db_path), model="claude-sonnet-5-5")
    out = tmp_path / "messages.jsonl"
    result = dayflow("export", made["done"], made["interrupted"], "--anthropic", str(out), db=str(db_path))
    assert result.returncode == 0, result.stderr
    bodies = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(bodies) == 2
    store = open_store(db_path)
    try:
        for body, run_id in zip(bodies, (made["done"], made["interrupted"])):
            assert body["model"] == "claude-sonnet-5-5" and body["tools"] and body["system"]
            assert without_breakpoints(body["messages"]) == rebuild_messages(store, run_id)
            assert not problems(body["messages"])
    finally:
        store.close()
    # Replayed through the real SDK: the interrupted run's messages end in tool results, so the API answers.
    import anthropic

    with LoopbackAPI() as api:
        client = anthropic.Anthropic(api_key="sk-ant-test-replay", base_url=api.url)
        assert bodies[1].pop("stream") is True  # the run's calls stream; the SDK's helper asks for that itself
        with client.messages.stream(**bodies[1]) as stream:
            reply = stream.get_final_message()  # folded by the SDK's own accumulator from the loopback's events
        assert reply.stop_reason in ("tool_use", "end_turn") and api.calls == 1
        assert api.requests[0]["messages"] == bodies[1]["messages"]
