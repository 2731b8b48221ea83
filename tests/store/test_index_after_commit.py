"""The search index off the durable path, under kill -9 (issue #28).

A real process commits steps (each marked, nothing indexed) and is killed
with SIGKILL before any follow-up indexing: another process's search finds
every one of its steps at once, from their rows; the index is brought level
by the next process that gives the run up, with one copy of each part.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from dayflow_tui.search.query import parse
from dayflow_tui.store import open_store
from dayflow_tui.store.search import DOCS

_WRITER = textwrap.dedent("""
    import os, signal, sys
    from dayflow_tui.store import open_store
    from dayflow_tui.store.tables.steps import StepRecord
    store = open_store(sys.argv[1])
    run, lease = store.create_claimed_run("find the killed words", model="offline", run_id="killed-index-1")
    for n in range(1, 6):
        blocks = [{"type": "text", "text": f"word{n}zebu"},
                  {"type": "tool_use", "id": f"tu_{n}", "name": "read_inbox", "input": {}}]
        store.append_step(run.id, StepRecord(n=n, stop_reason="tool_use", assistant=blocks, input_tokens=1,
                                             output_tokens=1, model="offline"), lease=lease)
        store.set_tool_results(run.id, n, [{"type": "tool_result", "tool_use_id": f"tu_{n}",
                                            "content": f"result{n}yak"}], lease=lease)
    print("committed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_steps_of_a_process_killed_before_indexing_are_found_and_indexed_once(db_target):
    open_store(db_target).close()
    child = subprocess.run([sys.executable, "-c", _WRITER, db_target], capture_output=True, text=True,
                           timeout=120, env={**os.environ})
    assert child.returncode == -signal.SIGKILL and "committed" in child.stdout, child.stderr
    store = open_store(db_target)
    try:
        docs = store.db.execute_sql(f'SELECT count(*) FROM "{DOCS}" WHERE n > 0').fetchone()[0]
        assert docs == 0  # the commits wrote the steps and their marks, nothing of the index
        for n in range(1, 6):
            for word in (f"word{n}zebu", f"result{n}yak"):
                assert [(h.run_id, h.step) for h in store.search(parse(word)).hits] == [("killed-index-1", n)], word
        # The next driver of the run gives it up: its steps are indexed then, one row per part.
        lease = store.claim("killed-index-1", stale_after=0)
        store.release(lease)
        pending = store.db.execute_sql('SELECT count(*) FROM "steps" WHERE index_pending = 1').fetchone()[0]
        parts = store.db.execute_sql(f'SELECT n, part, count(*) FROM "{DOCS}" WHERE n > 0 GROUP BY n, part '
                                     "ORDER BY n, part").fetchall()
        assert pending == 0 and [tuple(row) for row in parts] == [(n, part, 1) for n in range(1, 6) for part in (1, 3)]
        for n in range(1, 6):
            hits = store.search(parse(f"result{n}yak")).hits
            assert [(h.step, h.doc_id > 0) for h in hits] == [(n, True)]
    finally:
        store.close()
