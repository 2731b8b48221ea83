"""``dayflow search`` through the real console script, on both backends."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data

from ..conftest import dayflow_cmd, pg_schema, run_on_a_terminal

RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
LINE = re.compile(r"^(?P<run>\S+)  (?P<step>step \d+|-)\s*  (?P<where>task|text|tool call|tool result|tool error|"
                  r"final|error)\s*  (?P<tool>\S+)\s*  (?P<snippet>.*)$")


def dayflow(*args: str, db, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**{k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")},
                "DAYFLOW_OFFLINE_DELAY": "0", **(env or {})}
    return subprocess.run(dayflow_cmd(*args, "--db", str(db)), capture_output=True, text=True, env=full_env,
                          timeout=60, stdin=subprocess.DEVNULL)


def _fill(target: str) -> str:
    """Two real `dayflow brief` runs (one crashed after step 2), a failed run and the hostile run."""
    assert dayflow("brief", db=target).returncode == 0
    crashed = dayflow("brief", "--crash-after", "2", db=target)
    assert crashed.returncode != 0
    store = open_store(target)
    demo_data.failed_run(store, "run-failed-01", demo_data.BASE_TIME)
    demo_data.hostile_run(store, "run-hostile-1", demo_data.BASE_TIME)
    store.close()
    return target


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def searchable(request, tmp_path_factory):
    """One database per backend for the tests that only read it."""
    if request.param == "sqlite":
        yield _fill(str(tmp_path_factory.mktemp("search") / "dayflow.db"))
        return
    with pg_schema() as url:
        yield _fill(url)


def test_hits_one_line_each_newest_first_with_the_match_marked(searchable):
    result = dayflow("search", "budget", "review", db=searchable)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) >= 4
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert all(">>budget<<" in m["snippet"].lower() and ">>review<<" in m["snippet"].lower() for m in parsed)
    # The two `dayflow brief` runs: the one written second (it crashed) has its hits first.
    briefs = [r["id"] for r in json.loads(dayflow("runs", "--json", db=searchable).stdout)
              if not r["id"].startswith("run-")]
    assert list(dict.fromkeys(m["run"] for m in parsed if m["run"] in briefs)) == briefs
    assert {(m["where"], m["tool"]) for m in parsed} >= {("tool call", "create_task"), ("tool result", "create_task"),
                                                          ("tool result", "read_inbox")}
    assert result.stderr == ""


def test_json_gives_places_tools_and_the_spans_of_each_match(searchable):
    result = dayflow("search", "--json", "in:final", "thing", db=searchable)
    assert result.returncode == 0, result.stderr
    hits = json.loads(result.stdout)
    assert all(h["where"] == "final" and h["label"] == "final" for h in hits)
    # The finished brief (its last step, 3) and the hostile run's brief (step 2); not the crashed run.
    assert sorted(h["step"] for h in hits) == [2, 3] and "run-hostile-1" in {h["run_id"] for h in hits}
    for hit in hits:
        assert hit["highlights"]
        assert all(hit["snippet"][start:end].lower() == "thing" for start, end in hit["highlights"])
        assert set(hit) == {"run_id", "step", "where", "label", "tool", "snippet", "highlights", "status", "at",
                            "also", "run_title"}
        assert hit["run_title"]  # each hit names its run by its title (views.titles)
    errors = json.loads(dayflow("search", "--json", "in:error", db=searchable).stdout)
    assert {(h["run_id"], h["where"], h["tool"]) for h in errors} >= {("run-failed-01", "error", None),
                                                                      ("run-hostile-1", "error", "create_task")}


def test_filters(searchable):
    def ids(*args: str) -> set[str]:
        result = dayflow("search", "--json", *args, db=searchable)
        assert result.returncode == 0, result.stderr
        return {h["run_id"] for h in json.loads(result.stdout)}

    every = ids("inbox")
    assert "run-failed-01" in every and len(every) >= 3
    assert ids("--status", "failed", "inbox") == {"run-failed-01"}
    assert ids("status:failed", "inbox") == {"run-failed-01"}
    interrupted = ids("--status", "interrupted", "inbox")
    assert len(interrupted) == 1 and interrupted < every
    assert ids("--status", "done,failed", "inbox") == every - interrupted
    assert ids("--tool", "create_task", "budget") == ids("tool:create_task", "budget") != set()
    tools = {h["tool"] for h in json.loads(dayflow("search", "--json", "--tool", "create_task", "budget",
                                                   db=searchable).stdout)}
    assert tools == {"create_task"}
    assert ids("--since", "2999-01-01", "inbox") == set()
    assert ids("--since", "3650d", "inbox") == every
    assert ids("--agent", "brief", "inbox") == every and ids("--agent", "someone-else", "inbox") == set()
    limited = dayflow("search", "--limit", "2", "inbox", db=searchable)
    assert len(limited.stdout.splitlines()) == 2 and "showing the newest 2" in limited.stderr
    nothing = dayflow("search", "zzyzx", db=searchable)
    assert nothing.returncode == 0 and nothing.stdout == "" and "no matches for zzyzx" in nothing.stderr


@pytest.mark.parametrize("args, says", [
    (('"open',), "unclosed quote"), (("in:nowhere", "x"), "unknown place"), (("--status", "asleep", "x"),
                                                                           "unknown status"),
    (("--since", "3 weeks", "x"), "--since"), ((), "nothing to look for"), (("-draft",), "only excludes"),
])
def test_a_bad_query_is_one_line_and_exit_64(db_path, args, says):
    assert dayflow("brief", db=db_path).returncode == 0
    before = db_path.read_bytes()
    result = dayflow("search", *args, db=db_path)
    assert result.returncode == 64, (args, result.stderr)
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert says in result.stderr
    assert db_path.read_bytes() == before


def test_a_missing_database_is_refused_and_not_created(tmp_path):
    result = dayflow("search", "budget", db=tmp_path / "missing.db")
    assert result.returncode == 64 and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "missing.db").exists()


def test_hostile_text_is_shown_literally_in_lines_json_and_on_a_terminal(searchable):
    plain = dayflow("search", "bold", db=searchable)
    assert plain.returncode == 0
    assert not RAW_CONTROL.search(plain.stdout + plain.stderr)
    assert "[>>bold<<]not >>bold<<[/]" in plain.stdout and "\\x1b[31m" in plain.stdout
    assert [line[:54] for line in plain.stdout.splitlines()] == [
        "run-hostile-1  step 2    final        -               ",
        "run-hostile-1  step 1    tool result  read_inbox      ",  # the failed create_task is there too ...
        "run-hostile-1  step 1    text         -               ",
        "run-hostile-1  -         task         -               "]
    failed = dayflow("search", "in:error", "bold", db=searchable).stdout  # ... and found where errors are
    assert failed.startswith("run-hostile-1  step 1    tool error   create_task     …must be a date YYYY-MM-DD, "
                             "got '[>>bold<<]not >>bold<<[/] [link=https://evil.example]click[/link] \\x1b[31mre")
    wiped = dayflow("search", "screen", "wipe", db=searchable)
    assert "\\x1b[2J\\x1b[H>>screen<< >>wipe<<" in wiped.stdout
    as_json = dayflow("search", "--json", "bold", db=searchable)
    assert not RAW_CONTROL.search(as_json.stdout) and "\\u001b[31m" in as_json.stdout
    assert json.loads(as_json.stdout)[0]["snippet"].count("\x1b") >= 1  # the data, exactly, once decoded

    # On a terminal: the match is styled by Dayflow; what came from the data stays escaped.
    shown, out = run_on_a_terminal(dayflow_cmd("search", "bold", "--db", str(searchable)), stream="stdout",
                                   env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0
    text = out.decode()
    assert "\x1b[" in text  # Dayflow's own styling
    visible = re.sub(r"\x1b\[[0-9;]*m", "", text)  # drop SGR styling: nothing else may act on the terminal
    assert not RAW_CONTROL.search(visible.replace("\r\n", "\n").replace("\n", ""))
    assert "[bold]not bold[/]" in visible and "\\x1b]8;;" in visible and ">>" not in visible


def test_reindex_rebuilds_from_the_rows(db_target):
    searchable = _fill(db_target)
    before = dayflow("search", "--json", "inbox", db=searchable).stdout
    result = dayflow("search", "--reindex", db=searchable)
    assert result.returncode == 0 and "search index rebuilt" in result.stderr
    after = dayflow("search", "--json", "inbox", db=searchable).stdout

    def key(hit: dict) -> tuple:
        return hit["run_id"], hit["step"], hit["where"], hit["tool"] or ""

    # The same hits (their order among runs follows start times now, not the order they were written in).
    assert sorted(json.loads(after), key=key) == sorted(json.loads(before), key=key)
    assert dayflow("search", "--reindex", "inbox", db=searchable).returncode == 64


def test_a_status_alone_lists_the_runs_in_that_status_for_every_status(db_target):
    """``status:budget`` names something to look for: the runs in that status, one line each (issue #30)."""
    from dayflow_tui.store import RunStatus
    from dayflow_tui.store.leases import heartbeat
    from dayflow_tui.store.tables.forks import ForkPlan

    store = open_store(db_target)
    lease = demo_data.every_status(store)  # done, budget, failed, interrupted, queued, running (held by us)
    heartbeat(store, lease)  # on today's clock: the other processes see a live owner
    demo_data.waiting_run(store, "run-wait-0001", demo_data.BASE_TIME)
    store.fork_run("run-done-0001", ForkPlan(at=1), run_id="run-fork-0001")
    store.create_run("to cancel", model="offline", run_id="run-cancel-01")
    store.cancel_run("run-cancel-01", by="someone@desk", reason="not needed")
    expected = {"cancelled": {"run-cancel-01"}, "done": {"run-done-0001"}, "budget": {"run-budget-01"}, "failed": {"run-failed-01"},
                "interrupted": {"run-crash-001"}, "queued": {"run-queued-01"}, "running": {"run-live-0001"},
                "waiting": {"run-wait-0001"}, "forked": {"run-fork-0001"}}
    try:
        assert set(expected) == {status.value for status in RunStatus}  # every word of the one enum
        for status, runs in expected.items():
            for args in ((f"status:{status}",), ("--status", status)):
                result = dayflow("search", *args, "--json", db=db_target)
                assert result.returncode == 0, (args, result.stderr)
                hits = json.loads(result.stdout)
                assert [hit["run_id"] for hit in hits] == sorted(runs), (args, hits)
        both = dayflow("search", "status:failed,budget", db=db_target)
        assert both.returncode == 0 and {line.split()[0] for line in both.stdout.splitlines()} == {
            "run-failed-01", "run-budget-01"}
        store.release(lease)
        none = dayflow("search", "status:running", db=db_target)  # its owner let go: interrupted now
        assert none.returncode == 0 and none.stdout == "" and none.stderr.strip() == "no running runs"
    finally:
        store.close()
