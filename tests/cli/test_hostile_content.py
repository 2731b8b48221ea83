"""Hostile content reaches the CLI's output literally: no markup interpreted, no escape sent to the terminal.

Content comes in three ways: the model's own text and tool arguments (the
real SDK against the loopback server), the mail the tools read (a hostile
mail in the inbox), and an API error message. Each CLI command that shows
it (``brief``, ``show``, ``show --raw``, ``runs``, ``tasks``) must exit 0,
print the markup as text and never emit a raw control character.
"""

from __future__ import annotations

import json
import re

import pytest

from dayflow_tui.agent import sample_data
from dayflow_tui.agent.runs import run_brief

from ..conftest import CountingClient
from ..loopback_api import LoopbackAPI, error_reply, message_reply
from ..reliability_helpers import cli_env, dayflow, text

MODEL = "claude-loopback-1"
RICH = "[bold red]PWNED[/bold red] [link=https://evil.example]click[/link]"
TEXTUAL = "[@click=app.quit]quit[/] [$accent]accent[/$accent]"
ANSI = "\x1b[31mRED\x1b[0m\x1b[2J\x1b[H"
OSC = "\x1b]0;pwned-title\x07\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\"
C1 = "\x9b31mC1"
WORLD = "📅 Réunion — اجتماع الميزانية — עברית ✅"
HOSTILE = f"{RICH} {TEXTUAL} {ANSI} {OSC} {C1} {WORLD}"
LONG_LINE = "L" * 20_000
MEGABYTE = "M" * 1_000_000
# Bytes that were never UTF-8 arrive from a JSON body as lone surrogates (\udcff).
UNDECODABLE = "bad-bytes:\udcff\udcfe:end"

RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def assert_shown_literally(result, *expected: str) -> str:
    out = result.stdout
    assert result.returncode == 0, text(result.stderr)
    assert not RAW_CONTROL.search(out), RAW_CONTROL.search(out)
    assert not RAW_CONTROL.search(result.stderr)
    shown = out.decode("utf-8")  # strict: the output is valid UTF-8
    for fragment in expected:
        assert fragment in shown, fragment
    return shown


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory):
    """One run whose text, task and brief carry every kind of hostile content, made by the real CLI."""
    db = tmp_path_factory.mktemp("hostile") / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned[1] = message_reply([
            {"type": "text", "text": f"{HOSTILE}\n{LONG_LINE}"},
            {"type": "tool_use", "id": "toolu_hostile01", "name": "create_task",
             "input": {"title": f"{RICH} {ANSI} {WORLD}", "idempotency_key": "hostile-1",
                       "notes": f"{OSC} {TEXTUAL} {C1}"}},
            {"type": "tool_use", "id": "toolu_hostile02", "name": "create_task",
             "input": {"title": "big", "idempotency_key": "hostile-2", "notes": MEGABYTE}},
        ], "tool_use")
        api.planned[2] = message_reply([{"type": "text", "text": f"## Today\n{HOSTILE}\n{UNDECODABLE}\n{LONG_LINE}"}])
        brief = dayflow("brief", "--model", MODEL, db=db, env=cli_env(**api.env()))
    return db, brief


def test_brief_prints_the_models_text_literally(hostile_db):
    _db, brief = hostile_db
    shown = assert_shown_literally(brief, RICH, TEXTUAL, WORLD, "\\x1b[31mRED", "\\x1b]0;pwned-title\\x07",
                                   "\\x9b31mC1", LONG_LINE, "bad-bytes:\ufffd\ufffd:end")
    assert "PWNED" in shown


def test_show_tasks_and_runs_print_it_literally_and_stay_up(hostile_db):
    db, brief = hostile_db
    run_id = json.loads(dayflow("runs", "--json", db=db).stdout)[0]["id"]
    env = cli_env(COLUMNS="300")
    assert_shown_literally(dayflow("show", run_id, db=db, env=env), "PWNED", "accent", WORLD, "\\x1b[2J")
    raw = assert_shown_literally(dayflow("show", run_id, "--raw", db=db, env=env), "\\u001b", "M" * 250)  # wrapped at 300 columns
    assert "invalid_input" in raw  # the 1 MB notes were refused before any side effect
    tasks = assert_shown_literally(dayflow("tasks", db=db, env=env), RICH)  # the title, cut at 80 columns
    assert "hostile-2" not in tasks
    as_json = json.loads(assert_shown_literally(dayflow("tasks", "--json", db=db, env=env)))
    [task] = [t for t in as_json if t["idempotency_key"] == "hostile-1"]
    assert task["title"] == f"{RICH} {ANSI} {WORLD}" and task["notes"] == f"{OSC} {TEXTUAL} {C1}"
    assert_shown_literally(dayflow("runs", db=db, env=env), run_id)


def test_an_api_error_message_with_markup_and_escapes_is_shown_literally(tmp_path):
    db = tmp_path / "dayflow.db"
    with LoopbackAPI() as api:
        api.planned[1] = error_reply(400, HOSTILE)
        failed = dayflow("brief", "--model", MODEL, db=db, env=cli_env(**api.env()))
    assert failed.returncode == 5
    assert not RAW_CONTROL.search(failed.stderr) and RICH in text(failed.stderr)
    listed = assert_shown_literally(dayflow("runs", db=db), "[bold red]PWNED")
    assert "failed" in listed


def test_a_hostile_mail_subject_reaches_tasks_and_transcript_literally(tmp_path, monkeypatch):
    db = tmp_path / "dayflow.db"
    evil = ("m-6666", f"Mallory <{ANSI}mallory@evil.example>", f"Please act: {RICH} {OSC} {WORLD}",
            f"Could you click {TEXTUAL} {C1} {LONG_LINE}", 0, "08:00")
    monkeypatch.setattr(sample_data, "_MAILS", [*sample_data._MAILS, evil])
    from dayflow_tui.store import open_store

    store = open_store(db)
    result = run_brief(store, client=CountingClient())
    store.close()
    assert result.status == "done"
    tasks = assert_shown_literally(dayflow("tasks", db=db, env=cli_env(COLUMNS="300")), "Follow up: Please act: [bold red]")
    assert "mail-m-6666" in tasks
    shown = assert_shown_literally(dayflow("show", result.run_id, db=db, env=cli_env(COLUMNS="300")),
                                   "[bold red]PWNED", WORLD)
    assert "\\x1b]0;pwned-title" in shown


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_dashboard_shows_the_same_run_literally_and_stays_up(hostile_db, anyio_backend):
    """The dashboard's own markup tests use a built fixture; this one opens what the real CLI wrote:
    a 1 MB tool input, a 20,000-character line, C1 controls and a mended undecodable byte."""
    from dayflow_tui.store import open_store
    from dayflow_tui.tui.app import DayflowApp
    from dayflow_tui.tui.screens.transcript import TranscriptScreen
    from dayflow_tui.tui.widgets.run_table import RunTable

    from ..tui_helpers import screen_text, wait_for

    db, _brief = hostile_db
    store = open_store(db)
    try:
        app = DayflowApp(store)
        async with app.run_test(size=(200, 50)) as pilot:
            await wait_for(pilot, lambda: app.screen.query(RunTable) and app.screen.query_one(RunTable).total == 1)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, TranscriptScreen) and app.screen.run)
            seen = []
            for keys in ((), ("e",), ("j",), ("G",), ("v",)):
                await pilot.press(*keys)
                await pilot.pause(0.3)
                seen.append(screen_text(app))
            assert app.is_running
        shown = "\n".join(seen)
        assert "[bold red]PWNED[/bold red]" in shown and "\\x9b31mC1" in shown and "📅" in shown
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown)
    finally:
        store.close()


def test_a_damaged_task_or_run_row_is_shown_literally_by_tasks_runs_and_the_preview_pane(tmp_path):
    """The tool checks ``due`` as a date, but a row can be damaged, imported or written by an agent's own
    tool through the store: what the database holds is shown as text wherever it is shown."""
    from dayflow_tui.store import Run, Task, open_store
    from dayflow_tui.tui.widgets.run_preview import Preview, preview_content

    db = tmp_path / "dayflow.db"
    store = open_store(str(db))
    run = run_brief(store, model="offline")
    with store.bound():
        Task.update(due=f"{ANSI}{OSC}{C1}").where(Task.run == run.run_id).execute()
        Run.update(owner_pid=4242, owner_host=f"host{ANSI}", created_at=f"{ANSI}2026", status="running",
                   heartbeat_at=f"{ANSI}not a time").where(Run.id == run.run_id).execute()
        tasks = tuple(store.list_tasks(include_done=True, run_id=run.run_id))
        preview = Preview(store.get_run(run.run_id), tasks, None)
    store.close()
    listed = assert_shown_literally(dayflow("tasks", db=db), "\\x1b[31mRED", "\\x1b]0;pwned-title\\x07", "\\x9b31mC1")
    assert listed.count("\\x1b[31mRED") == len(tasks)
    assert_shown_literally(dayflow("runs", db=db), "\\x1b[31mRED", "interrupted")  # damaged start and heartbeat
    drawn = preview_content(preview).plain
    assert not RAW_CONTROL.search(drawn.encode()) and drawn.count("\\x1b[31mRED") == len(tasks) + 2  # host, start


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("table,column,value", [
    ("runs", "status", ANSI), ("runs", "input_tokens", "many"), ("steps", "duration_ms", ANSI),
    ("steps", "compacted_est_tokens", "x"), ("runs", "heartbeat_at", ANSI)])
async def test_the_dashboard_stays_up_on_a_run_whose_row_sqlite_let_be_damaged(tmp_path, table, column, value,
                                                                         anyio_backend):
    """SQLite keeps any value in any column: the list, the preview, the transcript and its JSON draw it."""
    import asyncio
    import sqlite3

    from dayflow_tui.store import open_store
    from dayflow_tui.tui.app import DayflowApp

    db = tmp_path / "dayflow.db"
    assert dayflow("brief", db=db).returncode == 0
    with sqlite3.connect(db) as con:
        con.execute(f"UPDATE {table} SET {column} = ?", (value,))
    if column == "heartbeat_at":
        with sqlite3.connect(db) as con:
            con.execute("UPDATE runs SET status = 'running', owner_pid = 1, owner_host = 'elsewhere'")
    store = open_store(str(db))
    app = DayflowApp(store)
    async with app.run_test(size=(160, 50)) as pilot:
        await asyncio.sleep(1.0)
        await pilot.press("enter")
        await asyncio.sleep(1.0)
        await pilot.press("v")
        await asyncio.sleep(0.5)
        assert app.is_running and app.return_code is None
    store.close()
