"""The real ``dayflow`` console script, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess

from ..conftest import dayflow_cmd


def dayflow(*args: str, db, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0", **(env or {})}
    return subprocess.run(dayflow_cmd(*args, "--db", str(db)), capture_output=True, text=True, env=full_env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def runs_json(db) -> list[dict]:
    return json.loads(dayflow("runs", "--json", db=db).stdout)


def test_brief_crash_after_2_then_resume(db_target, tmp_path):
    log = tmp_path / "calls.log"
    crashed = dayflow("brief", "-v", "--crash-after", "2", db=db_target, env={"DAYFLOW_CALL_LOG": str(log)})
    assert crashed.returncode != 0
    assert "simulated crash after step 2" in crashed.stderr
    assert "[step 1] stop=tool_use" in crashed.stdout
    assert "    -> read_inbox({'limit': 20})" in crashed.stdout
    [run] = runs_json(db_target)
    assert (run["status"], run["steps"]) == ("interrupted", 2)
    assert len(log.read_text().splitlines()) == 2

    resumed = dayflow("resume", db=db_target, env={"DAYFLOW_CALL_LOG": str(log)})
    assert resumed.returncode == 0, resumed.stderr
    assert (f"[resume {run['id']}] replaying 2 committed step(s), {run['input_tokens']} in / "
            f"{run['output_tokens']} out already spent") in resumed.stderr
    [done] = runs_json(db_target)
    assert (done["id"], done["status"], done["steps"]) == (run["id"], "done", 3)
    assert f"[resumed {run['id']} · finished at step 3 · {done['input_tokens']} in / " in resumed.stderr
    assert "## Today" in resumed.stdout and "## One thing" in resumed.stdout
    assert len(log.read_text().splitlines()) == 3  # one paid call for the resume

    again = dayflow("resume", run["id"], db=db_target, env={"DAYFLOW_CALL_LOG": str(log)})
    assert again.returncode == 0 and again.stdout == resumed.stdout  # the stored brief, no call
    assert len(log.read_text().splitlines()) == 3

    tasks = json.loads(dayflow("tasks", "--json", db=db_target).stdout)
    mine = [t for t in tasks if t["run_id"] == run["id"]]
    assert len(mine) == len({t["idempotency_key"] for t in mine}) == 6

    show = dayflow("show", run["id"][:6], db=db_target)
    assert show.returncode == 0 and "step 3" in show.stdout and "create_task" in show.stdout


def test_runs_lists_newest_first_in_the_documented_format(db_path):
    for _ in range(2):
        assert dayflow("brief", db=db_path).returncode == 0
    out = dayflow("runs", db=db_path).stdout.splitlines()
    ids = [r["id"] for r in runs_json(db_path)]
    assert [line.split()[0] for line in out] == ids
    fields = out[0].split()
    assert fields[1] == "done" and fields[3] == "steps=3" and fields[4].startswith("tokens=")


def test_bad_input_is_one_line_and_non_zero_without_traceback(tmp_path, db_path):
    assert dayflow("brief", db=db_path).returncode == 0
    cases = {
        "unknown run": (("resume", "ffffffffffff"), db_path),
        "unknown run for show": (("show", "nope"), db_path),
        "missing file": (("resume",), tmp_path / "missing.db"),
        "not sqlite": (("runs",), tmp_path / "text.db"),
        "bad budget": (("brief", "--budget", "-5"), db_path),
    }
    (tmp_path / "text.db").write_text("hello\n")
    for name, (args, db) in cases.items():
        result = dayflow(*args, db=db)
        assert result.returncode != 0, name
        assert "Traceback" not in result.stderr, name
        assert len(result.stderr.strip().splitlines()) == 1, (name, result.stderr)
    assert (tmp_path / "text.db").read_text() == "hello\n"
    assert not (tmp_path / "missing.db").exists()


def test_newer_schema_is_refused_by_the_cli(db_path):
    import sqlite3

    from dayflow_tui.store import SCHEMA_VERSION

    assert dayflow("brief", db=db_path).returncode == 0
    with sqlite3.connect(db_path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    result = dayflow("runs", db=db_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "newer Dayflow" in result.stderr


def test_show_raw_is_plain_json_per_step_and_jsonl_one_line_each(db_path):
    """Never wrapped or boxed: `--raw` parses as one JSON document per step, `--jsonl` as one line per step, and
    each holds the reply body as the API sent it."""
    import json

    assert dayflow("brief", db=db_path).returncode == 0
    run_id = json.loads(dayflow("runs", "--json", db=db_path).stdout)[0]["id"]
    lines = dayflow("show", run_id[:6], "--jsonl", db=db_path, env={**os.environ, "COLUMNS": "40"}).stdout
    steps = [json.loads(line) for line in lines.splitlines()]
    assert [s["n"] for s in steps] == [1, 2, 3]
    assert steps[0]["reply_as_received"]["content"] == steps[0]["assistant"]
    raw = dayflow("show", run_id, "--raw", db=db_path, env={**os.environ, "COLUMNS": "40"}).stdout
    decoder, at, docs = json.JSONDecoder(), 0, []
    while at < len(raw.strip()):
        doc, at = decoder.raw_decode(raw, at)
        docs.append(doc)
        while at < len(raw) and raw[at].isspace():
            at += 1
    assert docs == steps
    assert "╭" not in raw and "─" not in raw


def test_version_names_the_libraries():
    result = dayflow("--version", db=None)
    assert result.returncode == 0
    assert result.stdout.startswith("dayflow ") and "SQLite" in result.stdout and "Textual" in result.stdout
