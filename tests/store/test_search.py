"""Search over every run: what is found where, the query language, and the index kept with the rows.

Runs on SQLite (FTS5) and PostgreSQL (tsvector) through the ``store`` fixture;
the runs are written through the store's real commit paths.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import time

import pytest

from dayflow_tui.config.errors import UsageError
from dayflow_tui.config.errors import QueryError
from dayflow_tui.search.query import check_searchable, parse, parse_since
from dayflow_tui.search.text import snippet, words
from dayflow_tui.store import StepRecord, open_store
from dayflow_tui.store import search as index
from dayflow_tui.store.dialect import sqlite as sqlite_dialect

from ..conftest import dayflow_cmd, run_on_a_terminal


def find(store, text: str, **options) -> list:
    query = parse(text)
    check_searchable(query)
    return list(store.search(query, **options).hits)


def where(hits) -> list[tuple]:
    return [(h.run_id, h.step, h.column, h.tool) for h in hits]


def placed_runs(store) -> None:
    """Two runs with one unusual word in each kind of place."""
    run, lease = store.create_claimed_run("Plan the aardvark visit", model="offline", run_id="run-places-01")
    assistant = [{"type": "text", "text": "The model writes bandicoot notes."},
                 {"type": "tool_use", "id": "toolu_p1", "name": "read_inbox",
                  "input": {"query": "capybara mail", "limit": 5}},
                 {"type": "tool_use", "id": "toolu_p2", "name": "create_task", "input": {"title": "Call the dingo"}}]
    store.append_step(run.id, StepRecord(n=1, stop_reason="tool_use", assistant=assistant), lease=lease)
    mails = {"ok": True, "mails": [{"subject": "The echidna report", "flamingo_count": 2}]}
    failure = {"ok": False, "error": {"code": "invalid_input", "message": "gecko is not a date"}}
    store.set_tool_results(run.id, 1, [
        {"type": "tool_result", "tool_use_id": "toolu_p1", "content": json.dumps(mails)},
        {"type": "tool_result", "tool_use_id": "toolu_p2", "content": json.dumps(failure), "is_error": True}],
        lease=lease)
    brief = "## Today\nThe hedgehog brief. Café at noon."
    store.append_step(run.id, StepRecord(n=2, stop_reason="end_turn", assistant=[{"type": "text", "text": brief}]),
                      lease=lease, final_status="done", final_text=brief)
    store.release(lease)
    other = store.create_run("Another task about quokka", model="offline", run_id="run-places-02",
                             status="running")
    store.finish_run(other.id, "failed", error="529 overloaded: ibex capacity")


def test_a_hit_in_each_kind_of_place_says_where_it_is(store):
    placed_runs(store)
    cases = {
        "aardvark": ("run-places-01", 0, "task", None),
        "bandicoot": ("run-places-01", 1, "text", None),
        "capybara": ("run-places-01", 1, "args", "read_inbox"),
        "dingo": ("run-places-01", 1, "args", "create_task"),
        "echidna": ("run-places-01", 1, "result", "read_inbox"),
        "flamingo": ("run-places-01", 1, "result", "read_inbox"),  # a JSON key
        "gecko": ("run-places-01", 1, "failure", "create_task"),  # a tool result with is_error
        "hedgehog": ("run-places-01", 2, "final", None),
        "ibex": ("run-places-02", 0, "error", None),
        "quokka": ("run-places-02", 0, "task", None),
        "read_inbox": ("run-places-01", 1, "args", "read_inbox"),  # a tool name
    }
    for word, expected in cases.items():
        assert where(find(store, word)) == [expected], word
    [hit] = find(store, "echidna")
    assert hit.label == "tool result" and hit.status == "done"
    assert [(text, match) for text, match in hit.snippet.segments if match] == [("echidna", True)]
    assert find(store, "gecko")[0].label == "tool error"
    assert find(store, "ibex")[0].status == "failed"


def test_places_words_and_phrases(store):
    placed_runs(store)
    assert where(find(store, "in:text hedgehog")) == [("run-places-01", 2, "final", None)]  # final is text too
    assert find(store, "in:final bandicoot") == []
    assert where(find(store, "in:error gecko")) == [("run-places-01", 1, "failure", "create_task")]
    assert where(find(store, "in:result gecko")) == [("run-places-01", 1, "failure", "create_task")]
    assert find(store, "in:text gecko") == [] and find(store, "in:args echidna") == []
    assert where(find(store, "in:task,error ibex quokka")) == []  # one place must hold all the words
    assert len(find(store, "in:task,error ibex")) == 1
    assert where(find(store, '"writes bandicoot"')) == [("run-places-01", 1, "text", None)]
    assert find(store, '"bandicoot writes"') == []
    assert find(store, '"echidna report" -flamingo') == []  # excluded: the same result holds flamingo
    assert where(find(store, "model -hedgehog")) == [("run-places-01", 1, "text", None)]
    assert where(find(store, "hedge*")) == [("run-places-01", 2, "final", None)]
    # Case and accents do not matter; words inside identifiers are words.
    assert len(find(store, "CAFE")) == len(find(store, "café")) == 1
    assert where(find(store, "flamingo count")) == [("run-places-01", 1, "result", "read_inbox")]
    assert where(find(store, "invalid_input")) == [("run-places-01", 1, "failure", "create_task")]


def test_field_filters(store):
    placed_runs(store)
    assert {h.run_id for h in find(store, "the")} == {"run-places-01"}
    assert {h.run_id for h in find(store, "task")} == {"run-places-01", "run-places-02"}  # create_task too
    assert where(find(store, "status:failed task")) == [("run-places-02", 0, "task", None)]
    assert where(find(store, "status:done,failed quokka")) == [("run-places-02", 0, "task", None)]
    assert find(store, "status:queued task") == []
    assert {h.run_id for h in find(store, "run:run-places-02 task")} == {"run-places-02"}
    assert find(store, "run:nothing-like-it task") == []
    # tool: looks in that tool's calls and results only.
    assert where(find(store, "tool:create_task gecko")) == [("run-places-01", 1, "failure", "create_task")]
    assert find(store, "tool:read_inbox gecko") == []
    assert find(store, "tool:create_task bandicoot") == []
    assert [(h.step, h.column, h.tool) for h in find(store, "tool:create_task")] == [
        (1, "failure", "create_task"), (1, "args", "create_task")]
    # Filters alone list places, newest first.
    assert where(find(store, "in:error")) == [("run-places-02", 0, "error", None),
                                              ("run-places-01", 1, "failure", "create_task")]
    assert find(store, "aardvark", agent="brief") and not find(store, "aardvark", agent="someone-else")


def test_newest_first_paging_and_limits(store):
    for i in range(7):
        store.create_run(f"paging wombat number {i}", model="offline", run_id=f"run-page-{i}", status="queued")
    first = store.search(parse("wombat"), limit=3)
    assert [h.run_id for h in first.hits] == ["run-page-6", "run-page-5", "run-page-4"]
    assert first.more and first.cursor is not None
    rest = store.search(parse("wombat"), limit=10, before=first.cursor)
    assert [h.run_id for h in rest.hits] == [f"run-page-{i}" for i in (3, 2, 1, 0)] and not rest.more
    # A date in the future leaves nothing; one in the past leaves everything.
    assert find(store, "wombat", since="2999-01-01T00:00:00.000Z") == []
    assert len(find(store, "wombat", since="2000-01-01T00:00:00.000Z")) == 7


def test_interrupted_is_a_status_you_can_search_for(store):
    from dayflow_tui.agent import runs
    from dayflow_tui.agent.offline import OfflineClient

    with pytest.raises(SystemExit):
        runs.run_brief(store, run_id="run-crashed-01", model="offline", client=OfflineClient(delay=0),
                       crash_after_step=1)
    runs.run_brief(store, run_id="run-done-0001", model="offline", client=OfflineClient(delay=0))
    assert {h.run_id for h in find(store, "status:interrupted inbox")} == {"run-crashed-01"}
    assert {h.run_id for h in find(store, "status:done inbox")} == {"run-done-0001"}
    assert find(store, "status:running inbox") == []  # its owner is gone: interrupted, not running


def test_bad_queries_are_one_line_usage_errors():
    for text, says in [('"open', "unclosed quote"), ("in:nowhere x", "unknown place"),
                       ("status:sleeping x", "unknown status"), ("tool: x", "needs a value"),
                       ("-alone", "only excludes"), ("", "nothing to look for"), ("!!! ---", "nothing to look for")]:
        with pytest.raises(QueryError) as caught:
            check_searchable(parse(text))
        assert isinstance(caught.value, UsageError) and caught.value.exit_code == 64
        assert says in str(caught.value) and "\n" not in str(caught.value), text
    with pytest.raises(QueryError):
        parse_since("7 fortnights")
    assert parse_since("2026-12-01") == "2026-12-01T00:00:00.000Z"


def test_words_and_snippets_are_cut_from_the_text_as_it_is():
    assert words("Read_Inbox(mail-3) CAFÉ naïve ﬁle ½") == ["read", "inbox", "mail", "3", "cafe", "naive", "file",
                                                           "1", "2"]
    assert words("M" * 1_000_000) == ["m" * 128]  # a megabyte word is one bounded word
    # Colour codes in a tool's output separate words; they do not glue "31m" onto "error".
    assert words("\x1b[31mERROR\x1b[0m: disk \x9b1mfull\x1b]0;title\x07") == ["error", "disk", "full", "0", "title"]
    text = "start " + "filler " * 30 + "the BUDGET\nreview is due " + "tail " * 30
    cut = snippet(text, [[(text.index("BUDGET"), text.index("BUDGET") + 6)]], width=60)
    assert [t for t, m in cut.segments if m] == ["BUDGET"]
    assert cut.plain.startswith("…") and cut.plain.endswith("…") and "\n" not in cut.plain


def test_the_index_answers_what_a_full_scan_answers(store):
    """Random queries over generated runs: the index (FTS5 or tsvector) and a scan of every row agree."""
    rng = random.Random(7)
    vocabulary = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]

    def text(k: int) -> str:
        return " ".join(rng.choice(vocabulary) for _ in range(k))

    for r in range(12):
        run, lease = store.create_claimed_run(text(4), model="offline", run_id=f"run-gen-{r:03d}")
        for n in range(1, 4):
            tool_id = f"toolu_{r}_{n}"
            assistant = [{"type": "text", "text": text(6)},
                         {"type": "tool_use", "id": tool_id, "name": rng.choice(["read_inbox", "create_task"]),
                          "input": {"q": text(2)}}]
            store.append_step(run.id, StepRecord(n=n, stop_reason="tool_use", assistant=assistant), lease=lease)
            store.set_tool_results(run.id, n, [{"type": "tool_result", "tool_use_id": tool_id,
                                                "content": json.dumps({"items": [text(5)]}),
                                                "is_error": rng.random() < 0.2}], lease=lease)
        final = text(5)
        store.append_step(run.id, StepRecord(n=4, stop_reason="end_turn", assistant=[{"type": "text", "text": final}]),
                          lease=lease, final_status="done", final_text=final)
        store.release(lease)
    queries = ["alpha", "alpha bravo", '"charlie delta"', "echo -golf", "hot*", "in:result india",
               "in:args,error juliet", "tool:create_task alpha", "in:final bravo -alpha", '"india juliet" echo']
    for text_query in queries:
        query = parse(text_query)
        indexed = store.search(query, limit=500)
        store._search_state = index.IndexState(None, False)  # the same store, searching without its index
        try:
            scanned = store.search(query, limit=500)
        finally:
            store._search_state = None
        assert indexed.indexed and not scanned.indexed
        assert indexed.hits, text_query
        assert sorted(where(indexed.hits)) == sorted(where(scanned.hits)), text_query
        assert [h.snippet for h in sorted(indexed.hits, key=lambda h: where([h]))] == \
            [h.snippet for h in sorted(scanned.hits, key=lambda h: where([h]))]


def test_a_step_committed_by_another_process_is_found_right_after_its_commit(db_target, tmp_path):
    """A reader already open; a ``dayflow brief`` in another process pauses after each commit."""
    reader = open_store(db_target)
    trace = tmp_path / "trace"
    env = {"DAYFLOW_OFFLINE_DELAY": "0", "DAYFLOW_TEST_TRACE": str(trace),
           "DAYFLOW_TEST_PAUSE_IN": "committed:4"}
    import os

    child = subprocess.Popen(dayflow_cmd("brief", "--task", "Sort the platypus mail", "--db", str(db_target)),
                             env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (trace.exists() and "committed" in trace.read_text()):
            assert time.monotonic() < deadline and child.poll() is None, "no commit"
            time.sleep(0.02)
        # Step 1 (the model's turn) is committed; its tool results are not: the index says exactly that.
        [task] = find(reader, "platypus")
        assert (task.step, task.column) == (0, "task")
        turn = find(reader, f"run:{task.run_id} tool:read_inbox")
        assert [(h.step, h.column) for h in turn] == [(1, "args")]
        assert find(reader, f"run:{task.run_id} in:result inbox") == []
        assert trace.read_text().splitlines().count("committed") == 1  # still paused after that one commit
    finally:
        child.kill()
        child.wait()
        reader.close()


def test_forgetting_runs_takes_them_out_of_the_index(store):
    placed_runs(store)
    with store.bound(), store.write_transaction():
        index.unindex_runs(store, ["run-places-01"])
        store.db.execute_sql(f"DELETE FROM runs WHERE id = {store.db.param}", ("run-places-01",))
    for word in ("aardvark", "bandicoot", "echidna", "gecko", "hedgehog"):
        assert find(store, word) == [], word
    assert len(find(store, "quokka")) == 1
    if store.dialect.name == "sqlite":  # FTS5 checks its own structure
        store.db.execute_sql("INSERT INTO search_fts(search_fts, rank) VALUES ('integrity-check', 0)")
        left = store.db.execute_sql("SELECT count(*) FROM search_fts WHERE search_fts MATCH 'aardvark'").fetchone()
        assert left == (0,)


def _before_search(target: str, monkeypatch) -> None:
    """A database as the Dayflow before search wrote it (the migrations before the index's)."""
    from dayflow_tui.store import schema

    before = schema.MIGRATIONS.index(index.add_search_index)
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:before])
        patch.setattr(schema, "SCHEMA_VERSION", before)
        old = open_store(target)
        placed_runs(old)
        assert index.index_state(old).kind is None
        old.close()


def test_the_migration_indexes_an_existing_database(db_target, monkeypatch):
    _before_search(db_target, monkeypatch)
    store = open_store(db_target)
    try:
        assert index.index_state(store).kind is not None
        assert where(find(store, "echidna")) == [("run-places-01", 1, "result", "read_inbox")]
        assert where(find(store, "ibex")) == [("run-places-02", 0, "error", None)]
        assert where(find(store, "hedgehog")) == [("run-places-01", 2, "final", None)]
        # Steps committed after the migration land in the same index, newer than the migrated ones.
        store.create_run("a new capybara run", model="offline", run_id="run-after-01")
        assert [h.run_id for h in find(store, "capybara")] == ["run-after-01", "run-places-01"]
    finally:
        store.close()


def test_the_migration_draws_a_progress_bar_only_on_a_terminal(db_path, monkeypatch):
    import os

    _before_search(str(db_path), monkeypatch)
    copy = db_path.with_name("copy.db")
    copy.write_bytes(db_path.read_bytes())
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0"}
    # Searching never upgrades a file behind the reader's back: it names the command that does.
    refused = subprocess.run(dayflow_cmd("search", "echidna", "--db", str(db_path)), capture_output=True, text=True,
                             env=env, timeout=60)
    assert refused.returncode == 2 and "dayflow migrate" in refused.stderr
    piped = subprocess.run(dayflow_cmd("migrate", "--db", str(db_path)), capture_output=True, text=True, env=env,
                           timeout=60)
    assert piped.returncode == 0 and "indexing" not in piped.stderr
    shown, drawn = run_on_a_terminal(dayflow_cmd("migrate", "--db", str(copy)), stream="stderr", env=env)
    assert shown.returncode == 0
    assert b"indexing runs for search [" in drawn and b"100%" in drawn and b"2/2 steps" in drawn
    for migrated in (db_path, copy):
        found = subprocess.run(dayflow_cmd("search", "echidna", "--db", str(migrated)), capture_output=True,
                               text=True, env=env, timeout=60)
        assert found.returncode == 0 and ">>echidna<<" in found.stdout


_QUIET_STORE = """
import json, sys
from dayflow_tui.store import open_store
target, out = sys.argv[1], sys.argv[2]
migrated, rebuilt = [], []
store = open_store(target, on_progress=lambda done, total: migrated.append([done, total]))
store.rebuild_search_index(on_progress=lambda done, total: rebuilt.append([done, total]))
store.close()
with open(out, "w") as fh:
    json.dump({"migrated": migrated, "rebuilt": rebuilt}, fh)
"""


def test_the_store_reports_progress_and_writes_nothing_even_on_a_terminal(db_target, monkeypatch, tmp_path):
    """The migration and the rebuild call on_progress after each step; the store never draws a bar itself
    (it used to, on a terminal): whoever opened it decides what to show."""
    import os

    _before_search(db_target, monkeypatch)
    out = tmp_path / "progress.json"
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0"}
    done, drawn = run_on_a_terminal([sys.executable, "-c", _QUIET_STORE, db_target, str(out)], stream="stderr",
                                    env=env)
    assert done.returncode == 0, done.stdout
    assert drawn == b"" and done.stdout == b""
    reported = json.loads(out.read_text())
    assert reported["migrated"] == [[1, 2], [2, 2]]  # placed_runs commits two steps
    assert reported["rebuilt"] == [[1, 2], [2, 2]]


def test_without_fts5_the_front_end_prints_the_note(db_path, monkeypatch):
    """The store hands its one note to on_note; the CLI prints it as a note line (the store prints nothing)."""
    import os

    _before_search(str(db_path), monkeypatch)

    script = ("import sys\n"
              "from dayflow_tui.store.dialect import sqlite\n"
              "sqlite.fts5_available = lambda db: False  # stands in for a SQLite built without FTS5\n"
              "from dayflow_tui.cli import main\n"
              "sys.exit(main(['migrate', '--db', sys.argv[1]]))\n")
    done = subprocess.run([sys.executable, "-c", script, str(db_path)], capture_output=True, text=True,
                          env={**os.environ, "DAYFLOW_OFFLINE_DELAY": "0"}, timeout=60)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "has no FTS5" in line]
    assert len(notes) == 1 and notes[0].startswith(f"dayflow: note: {db_path}: this SQLite (SQLite ")
    assert "dayflow search --reindex" in notes[0]


def test_without_fts5_search_scans_and_says_so_then_reindex_builds_the_index(db_path, monkeypatch, capfd):
    monkeypatch.setattr(sqlite_dialect, "fts5_available", lambda db: False)
    notes: list[str] = []
    store = open_store(db_path, on_note=notes.append)
    assert len(notes) == 1 and "has no FTS5" in notes[0] and "dayflow search --reindex" in notes[0]
    assert capfd.readouterr() == ("", "")  # the store says it through on_note, never on the terminal
    placed_runs(store)
    result = store.search(parse("echidna"))
    assert not result.indexed and "no FTS5" in result.note
    assert where(result.hits) == [("run-places-01", 1, "result", "read_inbox")]
    with pytest.raises(Exception, match="has no FTS5"):
        store.rebuild_search_index()
    monkeypatch.undo()
    store._search_state = None
    assert store.rebuild_search_index() > 0
    result = store.search(parse("echidna"))
    assert result.indexed and result.note is None and len(result.hits) == 1
    store.close()


def test_a_process_without_fts5_marks_the_index_as_behind(db_path, monkeypatch):
    store = open_store(db_path)
    placed_runs(store)
    monkeypatch.setattr(sqlite_dialect, "fts5_available", lambda db: False)
    store._search_state = None
    store.create_run("written where the index cannot follow: koala", model="offline", run_id="run-blind-01")
    monkeypatch.undo()
    store._search_state = None
    result = store.search(parse("aardvark"))
    assert result.hits and "misses steps" in result.note and "--reindex" in result.note
    assert find(store, "koala") == []
    store.rebuild_search_index()
    assert store.search(parse("koala")).note is None and len(find(store, "koala")) == 1
    store.close()


def test_a_hostile_query_is_only_words(store):
    """Quotes and FTS5 or tsquery operators in a query are searched as the words they hold, never run."""
    placed_runs(store)
    for text in ["'aardvark'", "(aardvark)", "{aardvark}", "aardvark:*", "^aardvark$", "aardvark\\",
                 "!aardvark", '"aardvark"']:
        assert where(find(store, text)) == [("run-places-01", 0, "task", None)], text
    for text in ["NEAR(aardvark)", 'aardvark" OR "x', "aardvark' | 'x", "aardvark) NOT (x", "aardvark & !x",
                 "{task}: aardvark", "aardvark:A"]:
        assert find(store, text) == [], text  # their other words are not in the run


def test_sqlite_fts_table_holds_only_words(db_path):
    store = open_store(db_path)
    placed_runs(store)
    store.close()
    with sqlite3.connect(db_path) as conn:
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'search_fts'").fetchone()[0]
    assert "content=''" in sql and "tokenize='ascii'" in sql


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
