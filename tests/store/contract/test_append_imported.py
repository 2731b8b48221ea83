"""append_imported and imported_file: an imported file's runs and steps appended once, from where its last read
stopped; a second write from the same starting point (a retry that landed, a rival importer) writes nothing;
imported runs refuse every verb that would drive or change them."""

import pytest

from dayflow_tui.config.errors import ReadOnlyRun, StoreError
from dayflow_tui.store.tables.forks import ForkPlan
from dayflow_tui.store.tables.imported import ImportedRun, ImportedStep


def _runs(*texts: str, run_id: str = "ccimport0001", parent: str | None = None) -> list[ImportedRun]:
    steps = [ImportedStep(stop_reason="end_turn", assistant=[{"type": "text", "text": t}], model="claude-x",
                          input_tokens=10, output_tokens=2, cache_read_input_tokens=4,
                          created_at="2025-10-01T09:00:00.000Z") for t in texts]
    return [ImportedRun(run_id=run_id, external_id="sess-1", parent_id=parent, external_dir="/p", model="claude-x",
                        user_msg="first prompt", steps=steps)]


def test_a_file_is_appended_from_where_it_stopped_and_a_repeat_writes_nothing(store):
    assert store.imported_file("/f.jsonl") is None
    added = store.append_imported("/f.jsonl", was=None, run_id="ccimport0001", size=100, offset=90, mtime_ns=1,
                                  done={"": 90}, runs=_runs("one", "two"))
    assert added == {"ccimport0001": 2}
    state = store.imported_file("/f.jsonl")
    assert (state.run_id, state.size, state.offset, state.mtime_ns, state.done) == ("ccimport0001", 100, 90, 1, {"": 90})
    run = store.get_run("ccimport0001")
    assert (run.source, run.status, run.step_count, run.input_tokens, run.cache_read_tokens) == \
        ("claude-code", "done", 2, 20, 8)
    assert (run.external_id, run.external_dir, run.user_msg) == ("sess-1", "/p", "first prompt")
    # the same write again (its earlier try landed): nothing
    assert store.append_imported("/f.jsonl", was=None, run_id="ccimport0001", size=100, offset=90, mtime_ns=1,
                                 done={"": 90}, runs=_runs("one", "two")) == {}
    assert store.step_count("ccimport0001") == 2
    # the file grew: appended after the last step
    assert store.append_imported("/f.jsonl", was=state, run_id="ccimport0001", size=150, offset=150, mtime_ns=2,
                                 done={"": 150}, runs=_runs("three")) == {"ccimport0001": 1}
    assert [s.n for s in store.steps("ccimport0001")] == [1, 2, 3]
    assert store.step_at("ccimport0001", 3).assistant == '[{"type":"text","text":"three"}]'
    # a rival that read from the old position writes nothing
    assert store.append_imported("/f.jsonl", was=state, run_id="ccimport0001", size=150, offset=150, mtime_ns=2,
                                 done={"": 150}, runs=_runs("three")) == {}
    assert store.step_count("ccimport0001") == 3
    assert store.index_pending("ccimport0001") == 0  # indexed after the commit already


def test_only_runs_of_the_chosen_source_are_listed(store):
    store.create_run("mine", model="offline", run_id="dayflowrun01")
    store.append_imported("/g.jsonl", was=None, run_id="ccimport0002", size=1, offset=1, mtime_ns=1, done={},
                          runs=_runs("x", run_id="ccimport0002"))
    assert [r.id for r in store.list_runs(source="dayflow")] == ["dayflowrun01"]
    assert [r.id for r in store.list_runs(source="claude-code")] == ["ccimport0002"]


def test_a_dayflow_run_is_never_appended_to(store):
    store.create_run("mine", model="offline", run_id="ccimport0003")
    with pytest.raises(StoreError, match="was not imported"):
        store.append_imported("/h.jsonl", was=None, run_id="ccimport0003", size=1, offset=1, mtime_ns=1, done={},
                              runs=_runs("x", run_id="ccimport0003"))
    assert store.imported_file("/h.jsonl") is None and store.step_count("ccimport0003") == 0


def test_an_imported_run_is_never_claimed_forked_decided_or_cancelled(store):
    store.append_imported("/i.jsonl", was=None, run_id="ccimport0004", size=1, offset=1, mtime_ns=1, done={},
                          runs=_runs("x", run_id="ccimport0004"))
    for attempt in (lambda: store.claim("ccimport0004"), lambda: store.fork_run("ccimport0004", ForkPlan(at=1)),
                    lambda: store.decide("ccimport0004", None, approve=True, by="ann", host="h"),
                    lambda: store.cancel_run("ccimport0004", by="ann")):
        with pytest.raises(ReadOnlyRun, match="claude --resume sess-1"):
            attempt()
    run = store.get_run("ccimport0004")
    assert run.lease_token is None and run.cancel_at is None and run.status == "done"
    assert store.claim_next() is None or store.claim_next().run_id != "ccimport0004"


def test_a_run_still_going_at_its_source_is_ended_once_and_never_claimed_or_resumed(store):
    """An OTLP trace whose agent span has not come is a "running" imported run: shown running, never an orphan
    a worker takes or ``dayflow resume`` picks; the write that ends it sets status, answer and error once."""
    from dayflow_tui.store import effective_status

    going = ImportedRun(run_id="otrunning0001", external_id="t/s", source="otel", status="running",
                        steps=_runs("one")[0].steps)
    assert store.append_imported("otlp:t/s", was=None, run_id="otrunning0001", size=1, offset=1, mtime_ns=0,
                                 done={"c1": 1}, runs=[going]) == {"otrunning0001": 1}
    run = store.get_run("otrunning0001")
    assert (run.status, run.lease_token, effective_status(run)) == ("running", None, "running")
    assert store.claim_next(stale_after=0) is None  # no owner, no heartbeat: still no worker's
    assert store.latest_unfinished() is None
    with pytest.raises(ReadOnlyRun, match="OpenTelemetry trace"):
        store.claim("otrunning0001")
    # the child of a parent learnt later; then the end: failed, with the answer and the error
    state = store.imported_file("otlp:t/s")
    ended = ImportedRun(run_id="otrunning0001", external_id="t/s", source="otel", status="failed",
                        error="agent gave up", final_text="partial", agent="planner", parent_id="otparent00001",
                        parent_call_id="call_1", created_at="2025-10-01T08:59:00.000Z")
    assert store.append_imported("otlp:t/s", was=state, run_id="otrunning0001", size=1, offset=1, mtime_ns=0,
                                 done={"c1": 1, "agent-span": 0}, runs=[ended]) == {}
    run = store.get_run("otrunning0001")
    assert (run.status, run.error, run.final_text, run.agent, run.parent_id, run.parent_call_id, run.step_count) \
        == ("failed", "agent gave up", "partial", "planner", "otparent00001", "call_1", 1)
    assert run.created_at.startswith("2025-10-01T08:59:00")
    # a later write (a late chat) changes none of that: only running -> ended, once
    state = store.imported_file("otlp:t/s")
    again = ImportedRun(run_id="otrunning0001", external_id="t/s", source="otel", status="done", final_text="other",
                        agent="other", parent_id="otother000001", steps=_runs("two")[0].steps)
    assert store.append_imported("otlp:t/s", was=state, run_id="otrunning0001", size=2, offset=2, mtime_ns=0,
                                 done={"c1": 1, "c2": 2, "agent-span": 0}, runs=[again]) == {"otrunning0001": 1}
    run = store.get_run("otrunning0001")
    assert (run.status, run.final_text, run.agent, run.parent_id, run.step_count) == \
        ("failed", "partial", "planner", "otparent00001", 2)
    assert store.claim_next(stale_after=0) is None
