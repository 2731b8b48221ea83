"""The schema's history as an ordered list of steps, and the one function that applies it.

``MIGRATIONS[v]`` takes a database from version ``v`` to ``v + 1``; a new
schema change is one function appended to the list, and ``SCHEMA_VERSION``
follows it. Each step checks before it alters, so a step that ran under an
older Dayflow (or half-ran on a server without transactional DDL) is safe to
run again. Seeding the sample tasks is data, not schema: it happens once,
when a database is created, after the steps.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Callable

import peewee

from .. import clock
from ..config.errors import SchemaAhead, StoreError
from ..testhook import schema_ahead
from .models import MODELS, POSTGRES_MODELS, Approval, Blob, ImportedFile, Run, Step, Task, Worker
from .sample_tasks import SEED_TASKS
from .search.backfill import add_search_index
from .tables.resumes import add_resumes_table

if TYPE_CHECKING:
    from .handle import StoreHandle

DAYFLOW_TABLES = {m._meta.table_name for m in MODELS + POSTGRES_MODELS}


def column_names(store: "StoreHandle", model: type) -> set[str]:
    return {c.name for c in store.db.get_columns(model._meta.table_name)}


def add_column(store: "StoreHandle", model: type, field: peewee.Field) -> None:
    """``ALTER TABLE ... ADD COLUMN`` for ``field`` of ``model``, unless it is there already."""
    if field.column_name in column_names(store, model):
        return
    context = store.db.get_sql_context()
    sql, params = context.sql(field.ddl(context)).query()
    if not field.null:
        # Existing rows need a value: the model's default, as a literal (Peewee applies defaults in Python).
        default = field.default() if callable(field.default) else field.default
        if not isinstance(default, (int, float)) or isinstance(default, bool):
            raise TypeError(f"add_column: NOT NULL column {field.name} needs a numeric default")
        sql = f"{sql} DEFAULT {default!r}"
    store.db.execute_sql(f'ALTER TABLE "{model._meta.table_name}" ADD COLUMN {sql}', params or None)


def _create_tables(store: "StoreHandle") -> None:
    """Schema 1: the tables as the models define them today (later steps check before altering)."""
    store.db.create_tables(MODELS + store.dialect.own_tables())
    store.dialect.after_create(store.db)


def _add_owner_started(store: "StoreHandle") -> None:
    """Schema 2: the lease owner's process start time (pid reuse)."""
    add_column(store, Run, Run.owner_started)


def _replies_as_sent(store: "StoreHandle") -> None:
    """Schema 3: the reply body as received, unbounded text for API-sent strings, attempts and backoff.

    PostgreSQL enforced the old ``varchar`` limits: a 130-character model name
    or an unknown long stop reason could not be stored, so the paid reply was
    lost and bought again. SQLite never enforced them.
    """
    add_column(store, Step, Step.raw)
    add_column(store, Run, Run.attempts)
    add_column(store, Run, Run.not_before)
    widened = [(Run, Run.model, "TEXT"), (Step, Step.model, "TEXT"), (Step, Step.stop_reason, "TEXT")]
    widened += [(Run, field, "BIGINT") for field in (Run.input_tokens, Run.output_tokens,
                                                     Run.cache_creation_tokens, Run.cache_read_tokens)]
    for model, field, kind in widened:
        store.dialect.widen_column(store.db, model._meta.table_name, field.column_name, kind)


def _add_call_charges(store: "StoreHandle") -> None:
    """Schema 14: a step's 1-hour cache writes and web searches (each billed apart), and its max_tokens."""
    add_column(store, Step, Step.cache_write_1h_tokens)
    add_column(store, Step, Step.web_search_requests)
    add_column(store, Step, Step.max_tokens)


def _add_budget_usd(store: "StoreHandle") -> None:
    """Schema 6: the run's dollar budget (``--budget-usd``), durable across resumes."""
    add_column(store, Run, Run.budget_usd)


def _add_approvals(store: "StoreHandle") -> None:
    """Schema 7: tool calls that wait for a person (``approvals``) and which tools a run asks about."""
    add_column(store, Run, Run.approval_tools)
    store.db.create_tables([Approval], safe=True)


def _add_lineage(store: "StoreHandle") -> None:
    """Schema 8: a fork's parent run and fork point."""
    add_column(store, Run, Run.parent_id)
    add_column(store, Run, Run.forked_at)
    store.db.execute_sql('CREATE INDEX IF NOT EXISTS "runs_parent_id" ON "runs" ("parent_id")')


def _add_agents(store: "StoreHandle") -> None:
    """Schema 9: which agent each run belongs to (the runs before it are the built-in brief's), and when
    a call that must not run twice was started."""
    for column in (Run.agent, Run.agent_ref, Run.agent_fingerprint, Run.agent_shape):
        add_column(store, Run, column)
    add_column(store, Approval, Approval.started_at)
    store.db.execute_sql('UPDATE "runs" SET "agent" = \'brief\' WHERE "agent" IS NULL')


def _status_in_list_order(store: "StoreHandle") -> None:
    """Schema 10: the status index also in the list's order (status, created_at, id), in place of the
    status-only one: a status filter, End/G within it and the waiting runs pinned on top read one page of
    the index at any size (the status-only index left SQLite sorting, or scanning a million runs)."""
    store.db.execute_sql('CREATE INDEX IF NOT EXISTS "runs_status_created_at_id" ON "runs" '
                         '("status", "created_at", "id")')
    store.db.execute_sql('DROP INDEX IF EXISTS "runs_status"')


def _index_after_commit(store: "StoreHandle") -> None:
    """Schema 11: the search index is written after a step's commit, not in it; a step waiting for it is
    marked, and the marked steps are found through a partial index (a handful at any size)."""
    if Step.index_pending.column_name not in column_names(store, Step):
        # The steps already stored are in the index (0); new rows are marked unless written as indexed.
        store.db.execute_sql('ALTER TABLE "steps" ADD COLUMN "index_pending" INTEGER NOT NULL DEFAULT 0')
    store.db.execute_sql('CREATE INDEX IF NOT EXISTS "steps_index_pending" ON "steps" ("run_id", "n") '
                         "WHERE index_pending = 1")


def _add_cancel_and_priority(store: "StoreHandle") -> None:
    """Schema 12: a run's priority (claims take higher first, then older) and its cancel (when, who, why).

    The claim order has its own index, in that order: a worker's claim of the queue's head reads one entry
    of it at any queue length, as the status index did before priorities."""
    for column in (Run.priority, Run.cancel_at, Run.cancelled_by, Run.cancel_reason):
        add_column(store, Run, column)
    store.db.execute_sql('CREATE INDEX IF NOT EXISTS "runs_claim_order" ON "runs" '
                         '("status", "priority" DESC, "created_at", "id")')


def _add_title(store: "StoreHandle") -> None:
    """Schema 13: a run's title, when its agent or the agent's ``set_title`` tool gave it one."""
    add_column(store, Run, Run.title)


def _add_sources(store: "StoreHandle") -> None:
    """Schema 15: where a run comes from (``source``: dayflow, or claude-code for an imported session, read-only),
    the imported session's id, directory and branch, and how far each session file has been read."""
    if Run.source.column_name not in column_names(store, Run):
        store.db.execute_sql('ALTER TABLE "runs" ADD COLUMN "source" VARCHAR(32) NOT NULL DEFAULT \'dayflow\'')
    for column in (Run.external_id, Run.external_dir, Run.external_branch):
        add_column(store, Run, column)
    store.db.create_tables([ImportedFile], safe=True)


def _add_blobs(store: "StoreHandle") -> None:
    """Schema 16: large images and documents from tools, kept once by their hash (``tables/blobs.py``)."""
    store.db.create_tables([Blob], safe=True)


def _add_workers(store: "StoreHandle") -> None:
    """Schema 17: the workers, kept by their heartbeats (``dayflow workers``)."""
    store.db.create_tables([Worker], safe=True)


def _add_child_runs(store: "StoreHandle") -> None:
    """Schema 18: a subagent's run records the parent's call that started it (``runs.parent_call_id``)."""
    add_column(store, Run, Run.parent_call_id)


def _next_version_probe(store: "StoreHandle") -> None:
    """Tests only (``testhook.schema_ahead``): the next Dayflow's migration, additive like every real one."""
    if "upgrade_probe" not in column_names(store, Run):
        store.db.execute_sql('ALTER TABLE "runs" ADD COLUMN "upgrade_probe" INTEGER NOT NULL DEFAULT 0')


MIGRATIONS: tuple[Callable[["StoreHandle"], None], ...] = (_create_tables, _add_owner_started, _replies_as_sent,
                                                    add_resumes_table, add_search_index, _add_budget_usd,
                                                    _add_approvals, _add_lineage, _add_agents,
                                                    _status_in_list_order, _index_after_commit,
                                                    _add_cancel_and_priority, _add_title, _add_call_charges,
                                                    _add_sources, _add_blobs, _add_workers, _add_child_runs)
if schema_ahead():
    MIGRATIONS += (_next_version_probe,)
SCHEMA_VERSION = len(MIGRATIONS)


def _seed_sample_tasks() -> None:
    """The sample data's open tasks, into a database just created (data, not schema)."""
    now = clock.iso()
    for key, title, due_days, notes in SEED_TASKS:
        due = (clock.today() + timedelta(days=due_days)).isoformat() if due_days is not None else None
        Task.insert(idempotency_key=key, title=title, due=due, notes=notes or None,
                    created_at=now).on_conflict_ignore().execute()


def migrate(store: "StoreHandle", *, create: bool = True, upgrade: bool = True) -> None:
    """Bring the database to ``SCHEMA_VERSION``.

    ``create=False`` never creates tables in an empty database; ``upgrade=False``
    (a command that only reads) never alters an older one: it names the
    command that upgrades it instead.
    """
    dialect, db = store.dialect, store.db
    version = dialect.schema_version(db)
    if version > SCHEMA_VERSION:
        error = SchemaAhead(store.label, version, SCHEMA_VERSION)
        error.args = (f"{store.label}: written by a newer Dayflow (schema {version}); "
                      f"this version reads schema {SCHEMA_VERSION} at most. Upgrade dayflow-tui.",)
        raise error
    if version == SCHEMA_VERSION:
        return
    if version == 0 and not create:
        # Asked only to read (show, resume, runs, tasks on a named database): never create tables in it.
        raise StoreError(f"{store.label}: no Dayflow tables in this {dialect.container} yet (nothing to read)")
    if not upgrade and version != 0:
        # An empty database that may be created (the default file a first command makes) is made, not
        # "upgraded": only a database holding an older schema is left for `dayflow migrate`.
        raise StoreError(f"{store.label}: written by an older Dayflow (schema {version}; this one uses "
                         f"{SCHEMA_VERSION}); upgrade it once with: dayflow migrate --db {store.label}")
    with store.write_transaction():
        dialect.lock_migrations(db)
        version = dialect.schema_version(db)  # re-read under the lock
        if version >= SCHEMA_VERSION:
            return
        created = version == 0
        if created:
            foreign = set(db.get_tables()) - DAYFLOW_TABLES
            if foreign:
                raise StoreError(f"{store.label}: holds tables that are not Dayflow's; refusing to touch it"
                                 f"{dialect.foreign_tables_hint}")
        for step in MIGRATIONS[version:]:
            step(store)
        if created:
            _seed_sample_tasks()
        dialect.set_schema_version(db, SCHEMA_VERSION)
