"""Peewee models: the tables of a Dayflow database, one set for SQLite and PostgreSQL.

The models are bound to ``database_proxy``, which routes each query to the
database of the store whose method is running (``bound_to``): two stores open
in one process never redirect each other. Timestamps are ISO-8601 UTC strings (``clock.iso``): they sort as text,
compare across SQLite and PostgreSQL alike and read well in a shell.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

from peewee import (
    AutoField,
    BigIntegerField,
    BooleanField,
    CharField,
    CompositeKey,
    DatabaseProxy,
    DecimalField,
    FloatField,
    ForeignKeyField,
    IntegerField,
    Model,
    Proxy,
    SQL,
    TextField,
)

_ACTIVE_DATABASE: contextvars.ContextVar = contextvars.ContextVar("dayflow_active_database", default=None)


_PLAIN_OBJ = Proxy.obj  # the slot Peewee's proxy keeps its database in


class StoreRoutedProxy(DatabaseProxy):
    """The models' database: the one of the store whose method runs in this context.

    Peewee binds models to one database per class; Dayflow opens one per
    store (a test, a benchmark or an importer may hold two). Every store
    method runs inside ``bound_to(its database)``; outside any store method
    (a test reading rows directly) the proxy falls back to the database most
    recently opened, as Peewee's plain proxy would. Peewee reads ``obj``
    both through the proxy and directly (``Metadata.get_database_instance``),
    so ``obj`` itself is what is routed.
    """

    __slots__ = ()

    @property
    def obj(self):
        return _ACTIVE_DATABASE.get() or _PLAIN_OBJ.__get__(self)

    @obj.setter
    def obj(self, value):
        _PLAIN_OBJ.__set__(self, value)

    def __setattr__(self, attr, value):
        if attr not in DatabaseProxy.__slots__:
            raise AttributeError("Cannot set attribute on proxy.")
        object.__setattr__(self, attr, value)


@contextlib.contextmanager
def bound_to(database) -> Iterator[None]:
    """Route model queries in this context (thread, task) to ``database``."""
    token = _ACTIVE_DATABASE.set(database)
    try:
        yield
    finally:
        _ACTIVE_DATABASE.reset(token)


database_proxy = StoreRoutedProxy()


class BaseModel(Model):
    class Meta:
        database = database_proxy
        legacy_table_names = False


class Run(BaseModel):
    id = CharField(primary_key=True, max_length=32)
    user_msg = TextField()
    # queued | running | done | failed | budget. "interrupted" is never
    # stored: it is "running" whose owner process is gone (store.effective_status).
    status = CharField(max_length=16)  # a RunStatus value (status.py), never "interrupted"
    final_text = TextField(null=True)
    # input_tokens is the whole input of every call: uncached + cache writes + cache reads.
    input_tokens = BigIntegerField(default=0)
    output_tokens = BigIntegerField(default=0)
    cache_creation_tokens = BigIntegerField(default=0)
    cache_read_tokens = BigIntegerField(default=0)
    step_count = IntegerField(default=0)
    model = TextField()  # API-sent text is unbounded TEXT: PostgreSQL refused long values, losing paid replies
    budget_tokens = IntegerField(null=True)
    # The whole run's spend limit in dollars (schema 6); checked before every paid call (agent/budget.py).
    budget_usd = DecimalField(max_digits=14, decimal_places=6, null=True, auto_round=True)
    max_steps = IntegerField(default=12)
    # JSON list of the tool names whose calls wait for a person's decision (schema 7), fixed when the run
    # is created, so every host that drives it asks for the same approvals.
    approval_tools = TextField(null=True)
    # A fork (schema 8): the run it was copied from and the last step copied (steps 1..forked_at are the
    # parent's rows, paid once, by the parent).
    parent_id = CharField(max_length=32, null=True, index=True)
    forked_at = IntegerField(null=True)
    # A subagent's run (schema 18): the parent's tool call that started it (parent_id is the parent run).
    parent_call_id = CharField(max_length=64, null=True)
    # The agent (schema 9): its name, where to load it from again (None: the built-in brief; "pkg.mod:attr"
    # or "/abs/path/file.py:attr"), and its shape (system prompt, tool schemas, model) with its sha256, so a
    # resume that finds the code changed can say what changed.
    agent = TextField(null=True)
    agent_ref = TextField(null=True)
    agent_fingerprint = CharField(max_length=64, null=True)
    agent_shape = TextField(null=True)
    compact_at = IntegerField(null=True)
    # A title the run was given (schema 12): by its agent (``Agent(title=...)``, at creation) or by the agent's
    # ``set_title`` tool. NULL: the title shown is made from the task and the answer (``views.titles``).
    # Untrusted text (the model wrote it): shown only through ``safe_text``.
    title = TextField(null=True)
    error = TextField(null=True)
    owner_host = CharField(max_length=255, null=True)
    owner_pid = IntegerField(null=True)
    # The owner's process start time (clock ticks since boot, /proc/PID/stat field 22): with the pid
    # it names one process, so a dead owner whose pid was reused is not taken for alive.
    owner_started = BigIntegerField(null=True)
    lease_token = CharField(max_length=32, null=True)
    # Attempts in a row that ended without committing a step (every claim is one; a step resets it),
    # and when a worker may try again after a failed one (backoff; ISO text on the database's clock).
    attempts = IntegerField(default=0)
    not_before = CharField(max_length=32, null=True)
    heartbeat_at = CharField(max_length=32, null=True)
    # Claims take higher first, then the oldest (schema 12). Kept across resumes.
    priority = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    # A cancel (schema 12): when it was asked, by whom (user@host, or "dashboard") and why. On a run a live
    # process drives it is a request that the driver sees at its next commit or heartbeat; the run ends
    # ``cancelled`` there (tables/cancels.py).
    cancel_at = CharField(max_length=32, null=True)
    cancelled_by = TextField(null=True)
    cancel_reason = TextField(null=True)
    # Where the run comes from (schema 15): "dayflow" (driven here), or "claude-code" (a session file read by
    # ``dayflow import --claude-code``: read-only). For an imported run: the session's id, its project
    # directory and git branch (untrusted text from the file).
    source = CharField(max_length=32, default="dayflow", constraints=[SQL("DEFAULT 'dayflow'")])
    external_id = TextField(null=True)
    external_dir = TextField(null=True)
    external_branch = TextField(null=True)
    created_at = CharField(max_length=32)
    updated_at = CharField(max_length=32, index=True)

    class Meta:
        table_name = "runs"
        # The list's order, and the same order within one status: a status filter (and End/G in it) reads
        # one page of the index instead of sorting every matching run (2.15 s at a million runs).
        indexes = ((("created_at", "id"), False), (("status", "created_at", "id"), False))


class Step(BaseModel):
    run = ForeignKeyField(Run, column_name="run_id", backref="steps", on_delete="CASCADE", lazy_load=False)
    n = IntegerField()
    stop_reason = TextField(null=True)
    assistant = TextField()  # JSON: the assistant content blocks as they came over the wire
    tool_results = TextField(null=True)  # JSON: the tool_result blocks sent back; NULL until tools ran / on end_turn
    input_tokens = IntegerField(default=0)
    output_tokens = IntegerField(default=0)
    cache_creation_input_tokens = IntegerField(default=0)
    cache_read_input_tokens = IntegerField(default=0)
    # The part of the cache writes kept for an hour (billed 2x input, not 1.25x), and the web searches the
    # call made (billed per search): usage.cache_creation.ephemeral_1h_input_tokens and
    # usage.server_tool_use.web_search_requests. 0 for steps stored before schema 12.
    cache_write_1h_tokens = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    web_search_requests = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    max_tokens = IntegerField(null=True)  # what the call asked for; NULL before schema 12
    model = TextField(null=True)
    duration_ms = IntegerField(null=True)  # wall time of the API call
    request_est_tokens = IntegerField(null=True)  # estimated size of the request as built from history
    compacted_est_tokens = IntegerField(null=True)  # estimated size after compaction; NULL when not compacted
    created_at = CharField(max_length=32)
    tools_done_at = CharField(max_length=32, null=True)
    # The response body exactly as the API sent it (JSON text), committed with the step; the blocks
    # above are parsed from it. NULL for steps stored before schema 3 and for clients that give no body.
    raw = TextField(null=True)
    # 1 from the step's commit (and again when its tool results are committed) until the search index
    # holds it (store/search/pending.py); a search reads marked steps from their rows. 0 for steps stored
    # before schema 11, which the index already held. A row written by other code than the store's commit
    # paths (SQL of one's own) is marked by the column's default, so it is indexed too.
    index_pending = IntegerField(default=1, constraints=[SQL("DEFAULT 1")])

    class Meta:
        table_name = "steps"
        primary_key = CompositeKey("run", "n")


class Task(BaseModel):
    id = AutoField()
    idempotency_key = CharField(max_length=200, unique=True)
    run = ForeignKeyField(Run, column_name="run_id", null=True, on_delete="SET NULL", lazy_load=False)
    title = TextField()
    due = CharField(max_length=32, null=True)
    notes = TextField(null=True)
    done = BooleanField(default=False)
    created_at = CharField(max_length=32)

    class Meta:
        table_name = "tasks"


class RunResume(BaseModel):
    """One resume of a run: a claim of a run that had been driven before (after a crash, a failure, a budget stop).

    The lease columns on ``runs`` are overwritten by every claim; this row keeps
    when each resume began and where, so an exported trace can mark it. Written
    in the claim's own transaction (``store.resumes.record_resume``).
    """

    id = AutoField()
    run = ForeignKeyField(Run, column_name="run_id", backref="resumes", on_delete="CASCADE", lazy_load=False)
    at = CharField(max_length=32)
    after_step = IntegerField()  # steps committed when it began: the next call is step after_step + 1
    previous_status = CharField(max_length=16)  # what a user saw: interrupted, failed or budget
    owner_host = CharField(max_length=255)
    owner_pid = IntegerField()

    class Meta:
        table_name = "run_resumes"
        indexes = ((("run", "id"), False),)


class Approval(BaseModel):
    """One tool call of a step that waited for a person (schema 7), with the decision and the call's result.

    A step whose calls include one that needs approval gets a row per call:
    ``pending`` for those that wait, ``auto`` for the others (they ran before
    the run stopped, and their result is kept here so they never run again).
    The decision is committed once (``state`` leaves ``pending`` in one
    conditional UPDATE); ``result`` is the tool_result block once the call
    was answered, so a crash after it never runs the call twice.
    """

    id = AutoField()
    run = ForeignKeyField(Run, column_name="run_id", backref="approvals", on_delete="CASCADE", lazy_load=False)
    n = IntegerField()  # the step whose tool_use this is
    tool_use_id = TextField()
    tool_name = TextField()
    input = TextField()  # JSON: the arguments as the model sent them
    input_hash = CharField(max_length=64)  # sha256 of the canonical JSON of ``input``: what a decision is bound to
    state = CharField(max_length=16)  # pending | approved | denied | auto
    requested_at = CharField(max_length=32)
    edited_input = TextField(null=True)  # JSON: the arguments a person approved instead (validated)
    reason = TextField(null=True)
    decided_by = TextField(null=True)
    decided_host = TextField(null=True)
    decided_at = CharField(max_length=32, null=True)
    # Fixed by the decider before its first try: a retry whose COMMIT landed finds its own decision.
    decision_token = CharField(max_length=32, null=True)
    result = TextField(null=True)  # JSON: the tool_result block sent back for this call
    result_at = CharField(max_length=32, null=True)
    # When a call that must never run twice (a plain tool) was started (schema 9): started with no result
    # means its outcome is unknown, and it is not run again.
    started_at = CharField(max_length=32, null=True)

    class Meta:
        table_name = "approvals"
        indexes = ((("run", "tool_use_id"), True), (("state", "requested_at"), False))


class Blob(BaseModel):
    """A large base64 payload (an image or document a tool returned), kept once by its SHA-256.

    A tool result is written twice (the call's journal row, then the step's results) and a fork copies
    both: each holds ``dayflow-blob:sha256:HEX`` in place of the data (``tables/blobs.py``), and reading a
    history for a request puts the data back.
    """

    sha256 = CharField(primary_key=True, max_length=64)
    data = TextField()  # the base64 text as the API takes it
    size = IntegerField()  # characters of ``data``

    class Meta:
        table_name = "blobs"


class Worker(BaseModel):
    """A ``dayflow worker`` process, kept by its heartbeats (``tables/workers.py``): what ``dayflow workers``
    and the dashboard's workers screen show."""

    id = CharField(primary_key=True, max_length=32)
    host = CharField(max_length=255)
    pid = IntegerField()
    version = CharField(max_length=32)
    concurrency = IntegerField()
    started_at = CharField(max_length=32)
    beat_at = CharField(max_length=32)
    runs = TextField(default="[]")  # JSON: the ids of the runs it holds now
    runs_done = IntegerField(default=0)  # runs it finished (any verdict) since it started
    stopped_at = CharField(max_length=32, null=True)  # a clean exit; a crash leaves it to go stale

    class Meta:
        table_name = "workers"


class LimitBucket(BaseModel):
    """One shared limit's state per (model, API key fingerprint) (``tables/limits.py``): the row every acquirer
    locks first, so counting slots and spending the buckets is one serialised decision across hosts."""

    id = CharField(primary_key=True, max_length=255)  # "MODEL KEYFINGERPRINT"
    requests = FloatField(default=0.0)  # requests left in the minute's bucket (refilled by time)
    tokens = FloatField(default=0.0)  # tokens left (may go below 0: a reply larger than estimated)
    refilled_at = CharField(max_length=32)  # the database's clock when the buckets were last refilled
    paused_until = CharField(max_length=32, null=True)  # a 429 seen by any worker: no call before this

    class Meta:
        table_name = "limit_buckets"


class LimitSlot(BaseModel):
    """A model call in flight under a ``max_concurrent`` limit: freed when its reply is committed, or by its
    expiry when its process died (the lease's heartbeat renews ``beat_at`` while it lives)."""

    token = CharField(primary_key=True, max_length=32)
    bucket = CharField(max_length=255, index=True)
    run_id = CharField(max_length=32)
    beat_at = CharField(max_length=32)  # the database's clock at its last renewal; stale after the expiry

    class Meta:
        table_name = "limit_slots"


class StoreMeta(BaseModel):
    """PostgreSQL only: the schema version (SQLite keeps it in ``PRAGMA user_version``)."""

    key = CharField(primary_key=True, max_length=64)
    value = IntegerField()

    class Meta:
        table_name = "dayflow_meta"


class ChangeCounter(BaseModel):
    """PostgreSQL only: every write transaction bumps one slot before it commits.

    The sum of the slots is the dashboard's change marker (SQLite has
    ``PRAGMA data_version``). Several slots, picked per thread, keep concurrent
    writers from queueing on one row lock.
    """

    slot = IntegerField(primary_key=True)
    n = BigIntegerField(default=0)

    class Meta:
        table_name = "dayflow_changes"


class ImportedFile(BaseModel):
    """A session file read by ``dayflow import --claude-code`` (schema 15): how far, so the next import reads
    only what was appended. ``done``: JSON, per thread of the file, the offset up to which its records are
    stored steps (a thread's step still waiting for its tool results is read again from its start)."""

    path = TextField(primary_key=True)
    run_id = CharField(max_length=32)
    size = BigIntegerField()
    offset = BigIntegerField()
    mtime_ns = BigIntegerField()
    done = TextField()
    imported_at = CharField(max_length=32)

    class Meta:
        table_name = "imported_files"


MODELS = (Run, Step, Task, RunResume, Approval, Blob, Worker, ImportedFile, LimitBucket, LimitSlot)
POSTGRES_MODELS = (StoreMeta, ChangeCounter)
