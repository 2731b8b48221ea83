"""One answer per question, whichever command asks (issue #30): the status a run is shown with, the exit
code of a cause, and a ``--db`` whose directory is not there."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ..conftest import BIN, dayflow_cmd
from .test_cli import dayflow, runs_json

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_show_says_interrupted_as_runs_does(db_target):
    crashed = dayflow("brief", "--crash-after", "1", db=db_target)
    assert crashed.returncode != 0
    [run] = runs_json(db_target)
    assert run["status"] == "interrupted" and run["stored_status"] == "running"
    shown = dayflow("show", run["id"], db=db_target)
    assert shown.returncode == 0, shown.stderr
    header = shown.stdout.splitlines()[0].split()
    assert header[:3] == ["run", run["id"], "interrupted"], shown.stdout.splitlines()[0]


# Every command that opens --db: each must refuse a path whose directory does not exist, and make nothing.
OPENING = [("brief",), ("runs",), ("show", "abcd1234"), ("resume",), ("tasks",), ("search", "inbox"),
           ("worker", "--once"), ("spend",), ("pending",), ("prune", "--older-than", "1d"), ("migrate",),
           ("vacuum",), ("export", "--jsonl", "-", "abcd"), ("diff", "a", "b"), ("fork", "abcd1234", "--at", "1"),
           ("run", f"{EXAMPLES / 'todo_triage.py'}:agent")]


@pytest.mark.parametrize("args", OPENING, ids=lambda a: a[0])
def test_a_db_in_a_missing_directory_is_refused_by_every_command(tmp_path, args):
    target = tmp_path / "typo-dir" / "x.db"
    result = dayflow(*args, db=target)
    assert result.returncode == 64, (args, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "typo-dir" in lines[0] and "no such directory" in lines[0], lines
    assert list(tmp_path.iterdir()) == []  # neither the directory nor the file was made


def test_the_dashboard_refuses_a_db_in_a_missing_directory(tmp_path):
    done = subprocess.run([str(BIN / "dayflow-tui"), "--db", str(tmp_path / "nope" / "x.db")],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 64 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "no such directory" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_is_exit_64_for_every_command(tmp_path, db_path):
    assert dayflow("runs", db=db_path).returncode in (0, 64)  # (makes nothing: reading)
    assert dayflow("brief", db=db_path).returncode == 0
    cases = {
        "import's file": dayflow("import", str(tmp_path / "nope.jsonl"), db=db_path),
        "run's agent file": dayflow("run", f"{tmp_path / 'nope.py'}:AGENT", db=db_path),
        "a reading command's database": dayflow("runs", db=tmp_path / "missing.db"),
        "show's database": dayflow("show", "abcd", db=tmp_path / "missing.db"),
    }
    for name, result in cases.items():
        assert result.returncode == 64, (name, result.returncode, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, name
    assert not (tmp_path / "missing.db").exists()


def test_the_default_database_directory_is_still_made(tmp_path):
    """Only the default file's directory (nothing named) is created, as on a first run."""
    import os

    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "DAYFLOW_OFFLINE_DELAY": "0"}
    env.pop("DAYFLOW_DB", None)
    done = subprocess.run(dayflow_cmd("brief"), capture_output=True, text=True, env=env, timeout=60,
                          stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "data" / "dayflow" / "dayflow.db").is_file()


def test_a_reading_command_first_on_a_new_machine_makes_the_default_database(tmp_path):
    """`dayflow runs` (or `tasks`) as a new user's first command: the default file is made with its tables,
    never left empty so that every later command calls it "written by an older Dayflow (schema 0)".
    An empty file left at the default place (a first command killed while it made it) is made whole too."""
    import os
    import sqlite3

    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "DAYFLOW_OFFLINE_DELAY": "0"}
    env.pop("DAYFLOW_DB", None)

    def run(*argv):
        return subprocess.run(dayflow_cmd(*argv), capture_output=True, text=True, env=env, timeout=60,
                              stdin=subprocess.DEVNULL, cwd=tmp_path)

    default = tmp_path / "data" / "dayflow" / "dayflow.db"
    for _ in range(2):
        first = run("runs")
        assert first.returncode == 0, first.stderr
        assert "no runs yet" in first.stderr
    assert run("tasks").returncode == 0
    default.unlink()
    sqlite3.connect(default).execute("PRAGMA user_version = 0").connection.close()  # an empty file
    again = run("runs")
    assert again.returncode == 0, again.stderr
    assert run("brief").returncode == 0
    assert len(run("runs").stdout.strip().splitlines()) == 1
