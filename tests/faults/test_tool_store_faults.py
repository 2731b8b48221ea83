"""A database fault inside a tool is an infrastructure fault, not the tool's outcome (issue 24, item 4).

The faults are real: another connection holds the tasks table (PostgreSQL: an EXCLUSIVE table lock
while the tool's session has a short ``statement_timeout``; SQLite: the write lock held past the busy
timeout and the store's retry window), so ``store.create_task`` inside the tool raises a real
``StoreError``. What must hold: the attempt is abandoned (nothing kept for that call, the model is
not called again, the run is not ``done`` without its task), nothing that names the database reaches
the model, and once the fault clears a resume or a worker finishes the run with the task created once.
Model calls are counted where they arrive (a scripted client in process, the offline model's call log
for real processes): calls <= committed steps + deaths, and no process dies here.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import date
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest

from dayflow_tui.agent.define import Agent, tool
from dayflow_tui.agent.runs import resume, run_brief
from dayflow_tui.config.errors import StoreError
from dayflow_tui.store import open_store

from ..crash_harness import expected_task_keys, read_db
from ..reliability_helpers import call_count, cli_env, dayflow, text

STATEMENT_TIMEOUT_MS = 2500  # only the statements waiting on the held table reach it, even on a busy host


def with_session_settings(url: str, **settings: object) -> str:
    """``url`` whose every session starts with these settings (libpq ``options``), and a name of its own."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    extra = " ".join(f"-c{key}={value}" for key, value in settings.items())
    query["options"] = f"{query.get('options', '')} {extra}".strip()
    query.setdefault("application_name", f"dayflow_test_toolfault_{uuid.uuid4().hex[:8]}")
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


class HeldTasks:
    """Another connection holding the tasks table, so a write to it fails inside the tool."""

    def __init__(self, backend: str, target: str):
        self.backend, self.target, self.conn = backend, target, None

    def begin(self) -> None:
        if self.backend == "sqlite":
            self.conn = sqlite3.connect(self.target, isolation_level=None, timeout=30)
            self.conn.execute("BEGIN IMMEDIATE")  # the write lock, held until end()
        else:
            import psycopg

            self.conn = psycopg.connect(with_session_settings(self.target), connect_timeout=10)
            self.conn.execute("LOCK TABLE tasks IN EXCLUSIVE MODE")  # reads go on, writes wait

    def end(self) -> None:
        if self.conn is not None:
            self.conn.rollback() if self.backend != "sqlite" else self.conn.execute("ROLLBACK")
            self.conn.close()
            self.conn = None


def database_words(target: str) -> list[str]:
    """What would name the database in a message: its path or URL, host and schema, the driver's phrases.

    (The sample inbox talks about SQLite, so the bare word is no evidence.)
    """
    words = ["database is locked", "statement timeout", "canceling statement", "StoreError", "OperationalError",
             "QueryCanceled", "postgresql://", "sqlite3."]
    if target.startswith("postgresql://"):
        parts = urlsplit(target)
        words += [f"{parts.hostname}:{parts.port}", dict(parse_qsl(parts.query))["options"].partition("=")[2]]
    else:
        words += [target, target.rpartition("/")[2]]
    return [w for w in words if w]


def assert_nothing_names_the_database(texts: list[str], target: str) -> None:
    for blob in texts:
        for word in database_words(target):
            assert word.lower() not in blob.lower(), (word, blob[:400])


class ScriptedModel:
    """A model client: one call to ``file_task``, then a final text quoting what the tool answered.

    Counts the calls and keeps every request, to see exactly what the model was sent.
    """

    def __init__(self):
        self.calls = 0
        self.requests: list[str] = []
        self.messages = self

    def create(self, **request):
        from anthropic.types import Message

        self.calls += 1
        self.requests.append(json.dumps(request, default=str))
        answered = [b for m in request["messages"] if isinstance(m.get("content"), list)
                    for b in m["content"] if b.get("type") == "tool_result"]
        if answered:
            content = [{"type": "text", "text": "filed: " + json.dumps(answered[-1].get("content"))[:300]}]
            stop = "end_turn"
        else:
            content = [{"type": "tool_use", "id": "toolu_fault01", "name": "file_task",
                        "input": {"key": "fault-1", "title": "Reply to Ana"}}]
            stop = "tool_use"
        return Message.model_validate({"id": f"msg_{self.calls}", "type": "message", "role": "assistant",
                                       "model": request["model"], "content": content, "stop_reason": stop,
                                       "stop_sequence": None,
                                       "usage": {"input_tokens": 10, "output_tokens": 5}})


# The fault the filing tool starts inside its body, and how many more times it does so.
FAULT: dict = {"held": None, "times": 0}


@tool(idempotent="key")
def file_task(ctx, key: str, title: str) -> dict:
    """File a follow-up task once per key."""
    held = FAULT["held"] if FAULT["times"] > 0 else None
    if held is not None:
        FAULT["times"] -= 1
        held.begin()  # another connection takes the tasks table: the store call below fails for real
    try:
        task, created = ctx.store.create_task(idempotency_key=key, title=title, run_id=ctx.run_id)
    finally:
        if held is not None:
            held.end()  # the fault clears at once: only this store call met it, whatever comes next does not
    return {"ok": True, "created": created, "id": task.id}


@tool(name="file_task", idempotent="key", needs_approval=True)
def file_task_approved(ctx, key: str, title: str) -> dict:
    """File a follow-up task once per key."""
    return file_task.fn(ctx, key, title)


FILER = Agent(name="filer", system="File the task.", tools=(file_task,), task="File a task for Ana.")
FILER_ASKS = Agent(name="filer", system="File the task.", tools=(file_task_approved,), task="File a task for Ana.")


@pytest.fixture
def faulty_store(backend, db_target, monkeypatch):
    """The test's store, with short waits: SQLite's busy timeout and every store call's retry window
    (the fault is held far longer than both), PostgreSQL's statement_timeout for each session."""
    if backend == "sqlite":
        monkeypatch.setenv("DAYFLOW_SQLITE_BUSY_TIMEOUT", "0.2")
        opened = open_store(db_target)
    else:
        opened = open_store(with_session_settings(db_target, statement_timeout=STATEMENT_TIMEOUT_MS))
    opened.retry_for = 0.5
    yield opened
    opened.close()


@pytest.mark.parametrize("path", ["loop-then-pending-on-resume", "approved-call"])
def test_a_store_error_inside_a_tool_abandons_the_attempt_and_a_resume_finishes_once(
        faulty_store, backend, db_target, monkeypatch, path):
    store = faulty_store
    monkeypatch.setenv("DAYFLOW_RETRY_BACKOFF", "0")
    fault = HeldTasks(backend, db_target)
    approval = path == "approved-call"
    # The loop path meets the fault twice: in the loop, then in the resume that runs the pending call.
    monkeypatch.setitem(FAULT, "held", fault)
    monkeypatch.setitem(FAULT, "times", 1 if approval else 2)
    agent, ref = (FILER_ASKS, f"{__name__}:FILER_ASKS") if approval else (FILER, f"{__name__}:FILER")
    model = ScriptedModel()
    try:
        if approval:
            first = run_brief(store, model="claude-scripted", client=model, agent=agent, agent_ref=ref)
            assert first.status == "waiting"
            store.decide(first.run_id, None, approve=True, by="tester", host="here")
            run_id = first.run_id
            with pytest.raises(StoreError):
                resume(run_id, store=store, client=model)
        else:
            started: list[str] = []
            with pytest.raises(StoreError):
                run_brief(store, model="claude-scripted", client=model, agent=agent, agent_ref=ref,
                          on_start=started.append)
            [run_id] = started
        run = store.get_run(run_id)
        assert run.status != "done" and store.list_tasks(run_id=run_id) == []
        assert run.lease_token is None  # the abandoned attempt gave the run up
        assert store.step_at(run_id, 1).tool_results is None  # nothing kept: the step still waits for its result
        assert all(row.result is None for row in store.approvals(run_id))
        assert model.calls == 1  # the model was not called after the fault

        if not approval:  # the resume runs the pending call, meets the fault again, and gives the attempt up
            with pytest.raises(StoreError):
                resume(run_id, store=store, client=model)
            again = store.get_run(run_id)
            assert again.status != "done" and store.step_at(run_id, 1).tool_results is None and model.calls == 1
            assert again.attempts == 1 and again.lease_token is None  # counted as an attempt, and released
            assert again.not_before is not None and again.error  # backing off, the reason kept for people

        result = resume(run_id, store=store, client=model)
    finally:
        fault.end()
    assert result.status == "done", (result.status, result.error)
    tasks = store.list_tasks(run_id=run_id)
    assert [t.idempotency_key for t in tasks] == ["fault-1"]  # created exactly once
    steps = store.steps(run_id)
    assert model.calls <= len(steps)  # calls <= committed steps + deaths (none died)
    kept = [s.tool_results or "" for s in steps] + [row.result or "" for row in store.approvals(run_id)]
    assert_nothing_names_the_database(kept + model.requests, db_target)
    [answer] = json.loads(steps[0].tool_results)
    assert json.loads(answer["content"])["created"] is True and not answer.get("is_error")


@pytest.mark.postgres
def test_statement_timeout_in_create_task_leaves_the_run_unfinished_and_a_worker_finishes_it(pg_url, tmp_path):
    """The issue as it was met: `dayflow brief` on PostgreSQL with a short statement_timeout, and the
    tasks table held meanwhile. The run must not end `done` without its tasks, the model must not be
    sent the database's URL, and a worker finishes it once the table is free, each task created once."""
    url = with_session_settings(pg_url, statement_timeout=STATEMENT_TIMEOUT_MS)
    log = tmp_path / "calls.log"
    env = cli_env(DAYFLOW_CALL_LOG=str(log), DAYFLOW_RETRY_BACKOFF="0")
    open_store(pg_url).close()  # the tables, so the fault can hold one before the run starts
    fault = HeldTasks("postgres", pg_url)
    fault.begin()
    try:
        brief = dayflow("brief", db=url, env=env)
    finally:
        fault.end()
    err = text(brief.stderr)
    assert "Traceback" not in err
    state = read_db(pg_url)
    [run] = state.runs
    assert brief.returncode != 0, err  # the attempt ended on the database fault; it did not finish
    assert run["status"] != "done", (run["status"], run["error"], err)
    assert [t for t in state.tasks if t["run_id"] == run["id"]] == []
    assert run["lease_token"] is None  # released
    kept = [s["tool_results"] or "" for s in state.steps]
    assert_nothing_names_the_database(kept, pg_url)
    calls_before = call_count(log)
    assert calls_before <= len(state.steps)

    worker = dayflow("worker", "--once", db=url, env=env)
    assert worker.returncode == 0, text(worker.stderr)
    state = read_db(pg_url)
    [run] = state.runs
    assert run["status"] == "done", (run["status"], run["error"])
    keys = [t["idempotency_key"] for t in state.tasks if t["run_id"] == run["id"]]
    assert sorted(keys) == sorted(expected_task_keys(date.today())) and len(keys) == len(set(keys))
    assert call_count(log) <= len(state.steps)  # calls <= committed steps + deaths (none died)
    assert_nothing_names_the_database([s["tool_results"] or "" for s in state.steps], pg_url)
