"""Broken databases: one clear line, a non-zero exit, and nothing that was readable changed.

Every case runs the real console script; "unchanged" is checked on the bytes
of the file and its companions (or, where SQLite itself must add a -wal/-shm
beside a read-only file, on the main file's bytes).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from ..reliability_helpers import (assert_one_error_line, call_count, checkpointed, cli_env, dayflow, fingerprint,
                                  text)

COMMANDS = [("runs",), ("tasks",), ("show", "0123456789ab"), ("resume",), ("resume", "0123456789ab"), ("brief",)]


def interrupted_db(path: Path, log: Path | None = None) -> str:
    """A database holding one run that crashed after step 1, checkpointed into the main file."""
    env = cli_env(**({"DAYFLOW_CALL_LOG": str(log)} if log else {}))
    result = dayflow("brief", "--crash-after", "1", db=path, env=env)
    assert "simulated crash after step 1" in text(result.stderr)
    checkpointed(path)
    return json.loads(dayflow("runs", "--json", db=path).stdout)[0]["id"]


def logical_dump(path: Path) -> list[str]:
    """Every schema statement and every row of every real table, in a fixed order.

    Not ``iterdump``: it scans each virtual table too, and the contentless FTS5 search index cannot be scanned.
    The index's own shadow tables (``search_fts_data`` ...) are real tables and are dumped like the rest, so a
    change to the index still shows.
    """
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                              "ORDER BY type, name").fetchall()
        dump = [f"{kind} {name}: {sql}" for kind, name, sql in schema]
        for kind, name, sql in schema:
            if kind == "table" and not sql.upper().startswith("CREATE VIRTUAL TABLE"):
                quoted = name.replace('"', '""')
                rows = conn.execute(f'SELECT * FROM "{quoted}"').fetchall()
                dump += [f"{name}: {row!r}" for row in sorted(rows, key=repr)]
        return dump
    finally:
        conn.close()


def test_resume_on_a_missing_file_says_so_and_creates_nothing(tmp_path):
    missing = tmp_path / "typo.db"
    for args in (("resume",), ("resume", "0123456789ab"), ("show", "0123456789ab"), ("runs",), ("tasks",)):
        result = dayflow(*args, db=missing)
        assert result.returncode == 64  # a missing file: EX_USAGE, as for every command
        assert_one_error_line(result, str(missing), "no such database file")
        assert not missing.exists() and list(tmp_path.iterdir()) == []


def _not_sqlite(path: Path) -> None:
    path.write_bytes(b"these are my notes, not a database\n" * 50)


def _truncated_header(path: Path) -> None:
    interrupted_db(path)
    with open(path, "r+b") as fh:
        fh.truncate(50)


def _truncated_half(path: Path) -> None:
    interrupted_db(path)
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2)


def _newer_schema(path: Path) -> None:
    interrupted_db(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    checkpointed(path)


@pytest.mark.parametrize("damage, fragment", [
    (_not_sqlite, "not a readable Dayflow database"),
    (_truncated_header, "not a readable Dayflow database"),
    (_truncated_half, "not a readable Dayflow database"),
    (_newer_schema, "written by a newer Dayflow (schema 99)"),
], ids=["not-sqlite", "truncated-header", "truncated-half", "newer-schema"])
def test_an_unreadable_database_is_refused_by_every_command_and_left_as_it_was(tmp_path, damage, fragment):
    db = tmp_path / "dayflow.db"
    damage(db)
    before = fingerprint(db)
    for args in COMMANDS:
        result = dayflow(*args, db=db)
        assert result.returncode == 2, (args, text(result.stderr))
        assert_one_error_line(result, str(db), fragment)
        assert fingerprint(db) == before, args


def _make_read_only(path: Path) -> None:
    """Read-only for this process: chmod for a normal user; root ignores modes, so the immutable flag."""
    if os.geteuid() != 0:
        path.chmod(0o555 if path.is_dir() else 0o444)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)]).returncode != 0:
        pytest.skip("running as root without chattr +i: nothing can make a file read-only here")


def _make_writable(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=False)
    else:
        path.chmod(0o700 if path.is_dir() else 0o600)


def test_a_read_only_file_can_be_read_but_not_resumed_and_is_unchanged(tmp_path):
    db = tmp_path / "dayflow.db"
    run_id = interrupted_db(db)
    before, dump = fingerprint(db)["db"], logical_dump(db)
    _make_read_only(db)
    try:
        listed = dayflow("runs", db=db)
        assert listed.returncode == 0 and run_id in text(listed.stdout), text(listed.stderr)
        for args in (("resume",), ("resume", run_id), ("brief",)):
            result = dayflow(*args, db=db)
            assert result.returncode == 2, (args, text(result.stderr))
            assert_one_error_line(result, str(db), "read-only")
    finally:
        _make_writable(db)
    assert fingerprint(db)["db"] == before and logical_dump(db) == dump


def test_a_read_only_directory_is_one_clear_line_and_nothing_changes(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "dayflow.db"
    run_id = interrupted_db(db)
    before = fingerprint(db)
    _make_read_only(folder)
    try:
        for args in (("runs",), ("resume", run_id), ("brief",)):
            result = dayflow(*args, db=db)
            assert result.returncode == 2, (args, text(result.stderr))
            assert_one_error_line(result, str(db), "cannot open database file")
    finally:
        _make_writable(folder)
    assert fingerprint(db) == before


def _file_size_limit(limit: int):
    """A full disk, simulated: the process may not grow any file past ``limit`` bytes (SQLite gets EFBIG)."""
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_before_the_first_write_changes_nothing(tmp_path):
    db = tmp_path / "dayflow.db"
    run_id = interrupted_db(db)
    before, dump = fingerprint(db)["db"], logical_dump(db)
    result = dayflow("resume", run_id, db=db, preexec_fn=_file_size_limit(4096))
    assert result.returncode == 2
    assert_one_error_line(result, str(db), "cannot write", "is the disk full?")
    # SQLite may leave its scratch -shm and an empty -wal beside the file; the file itself is untouched.
    wal = Path(f"{db}-wal")
    assert fingerprint(db)["db"] == before and (not wal.exists() or wal.stat().st_size == 0)
    assert logical_dump(db) == dump


def test_a_disk_filling_up_mid_run_loses_no_committed_step_and_the_run_resumes(tmp_path):
    db, log = tmp_path / "dayflow.db", tmp_path / "calls.log"
    run_id = interrupted_db(db, log)
    step_one = logical_dump(db)
    env = cli_env(DAYFLOW_CALL_LOG=str(log))
    # Room for the claim and a step or so in the WAL, not for the whole run.
    result = dayflow("resume", run_id, db=db, env=env, preexec_fn=_file_size_limit(db.stat().st_size + 12288))
    assert result.returncode == 2, text(result.stderr)
    line = text(result.stderr).strip().splitlines()[-1]
    assert line.startswith(f"dayflow: error: {db}: cannot write") and "Traceback" not in text(result.stderr)
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT n, assistant FROM steps ORDER BY n").fetchall()
    conn.close()
    assert [n for n, _ in rows] == list(range(1, len(rows) + 1)) and rows
    assert rows[0][1] in "\n".join(step_one)  # step 1 exactly as it was
    # Space is back: the same run finishes, with no gap and no task twice.
    resumed = dayflow("resume", run_id, db=db, env=env)
    assert resumed.returncode == 0, text(resumed.stderr)
    conn = sqlite3.connect(db)
    assert [n for (n,) in conn.execute("SELECT n FROM steps ORDER BY n")] == [1, 2, 3]
    keys = [k for (k,) in conn.execute("SELECT idempotency_key FROM tasks WHERE run_id = ?", (run_id,))]
    conn.close()
    assert len(keys) == len(set(keys)) == 6
    assert call_count(log) <= 3 + 1  # at most the one call whose answer could not be committed


@pytest.mark.parametrize("column", ["assistant", "tool_results"])
def test_a_row_with_malformed_json_is_refused_by_resume_and_shown_by_show(tmp_path, column):
    db = tmp_path / "dayflow.db"
    run_id = interrupted_db(db)
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE steps SET {column} = '[{{\"type\": \"text\", \"text\": \"cut' WHERE n = 1")
    conn.commit()
    conn.close()
    checkpointed(db)
    before = fingerprint(db)
    for args in (("resume",), ("resume", run_id)):
        result = dayflow(*args, db=db)
        assert result.returncode == 2, (args, text(result.stderr))
        assert_one_error_line(result, f"run {run_id} step 1", f"stored {column} JSON is malformed")
        assert fingerprint(db) == before, args
    shown = dayflow("show", run_id, db=db)
    assert shown.returncode == 0 and "malformed" in text(shown.stdout), text(shown.stderr)
    assert fingerprint(db) == before
