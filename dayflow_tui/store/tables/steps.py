"""Steps: commit a paid reply and its tool results, read them back.

The per-step hot path is SQL text built once per statement shape from the
models' metadata: building the same two statements with Peewee's query
builder on every step cost more CPU than the fsync that makes them durable.
Values still go through each field's ``db_value``, and unnamed fields get
their model default, as Peewee does.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import peewee

from ... import clock
from ...config.errors import RunBusy, StoreError
from ...testhook import pause_point
from ..leases import Lease, note_cancel
from ..models import Run, Step
from ..retry import attempt_number, store_call
from ..search.index import index_run_end
from . import blobs

if TYPE_CHECKING:
    from ..handle import StoreHandle


def _commit_window(store: "StoreHandle") -> float:
    return store.commit_window()


@dataclass
class StepRecord:
    """One model call as it goes into the ``steps`` table."""

    n: int
    stop_reason: str | None
    assistant: list[dict]
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_1h_tokens: int = 0  # of cache_creation_input_tokens, the part kept for an hour
    web_search_requests: int = 0
    max_tokens: int | None = None  # what the call asked for
    model: str | None = None
    duration_ms: int | None = None
    request_est_tokens: int | None = None
    compacted_est_tokens: int | None = None
    # The response body exactly as received (JSON text), when the client could give it.
    raw: str | None = None

    @property
    def tool_uses(self) -> list[dict]:
        return [b for b in self.assistant if b.get("type") == "tool_use"]


class ReplayStep(NamedTuple):
    """A step as a resume reads it: one plain tuple per row, straight from the cursor.

    A Peewee model object per row (every field set through its descriptor) cost more than
    decoding the row's JSON on a 10,000-step run.
    """

    run_id: str
    n: int
    stop_reason: str | None
    assistant: str
    tool_results: str | None
    input_tokens: int
    output_tokens: int


def dumps(blocks: Any) -> str:
    """The one JSON encoding used for stored blocks (compact, key order kept, UTF-8)."""
    return json.dumps(blocks, ensure_ascii=False, separators=(",", ":"))


def step_blocks(step: Step, column: str) -> list[dict] | None:
    raw = getattr(step, column)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"run {step.run_id} step {step.n}: stored {column} JSON is malformed ({exc})") from exc
    if not isinstance(value, list):
        raise StoreError(f"run {step.run_id} step {step.n}: stored {column} is not a list of blocks")
    return value


@store_call(retry_for=_commit_window)
def append_step(store: StoreHandle, run_id: str, step: StepRecord, *, lease: Lease | None = None,
                final_status: str | None = None, final_text: str | None = None,
                final_error: str | None = None) -> None:
    """Commit one model response and add its tokens to the run, in one transaction.

    With ``final_status`` the run is finished in the same transaction, so an
    end_turn step and the run's ``done`` can never disagree after a crash.
    A committed step is progress: the run's count of attempts in a row without one starts again at 1,
    the attempt that committed it (it may still die in the step's tools: that death is its attempt's,
    so a poison tool runs ``max_attempts`` times in all, not one more). A finished run keeps 0.
    """
    assistant = dumps(step.assistant)
    if attempt_number() and step_landed(store, run_id, step.n, assistant, lease):
        return  # the earlier try committed; only its answer was lost with the connection
    now = store.dialect.now()
    stamp = now if isinstance(now, str) else None
    row = dict(run=run_id, n=step.n, stop_reason=step.stop_reason, assistant=assistant,
               tool_results=None, input_tokens=step.input_tokens, output_tokens=step.output_tokens,
               cache_creation_input_tokens=step.cache_creation_input_tokens,
               cache_read_input_tokens=step.cache_read_input_tokens, model=step.model,
               cache_write_1h_tokens=step.cache_write_1h_tokens, web_search_requests=step.web_search_requests,
               max_tokens=step.max_tokens,
               duration_ms=step.duration_ms, request_est_tokens=step.request_est_tokens,
               compacted_est_tokens=step.compacted_est_tokens, raw=step.raw,
               created_at=stamp or _host_now(), index_pending=1)
    values: dict[str, Any] = {"attempts": 0 if final_status is not None else 1, "not_before": None}
    if final_status is not None:
        values.update(status=final_status, final_text=final_text, error=final_error)
    added = (step.input_tokens, step.output_tokens, step.cache_creation_input_tokens,
             step.cache_read_input_tokens)
    insert_sql, insert_params = _insert_statement(store.db, Step, row)
    update_sql, update_params = _add_step_to_run_statement(store, run_id, added, values, lease, stamp)
    with store.write_transaction():
        # The lease-checked run update first: a driver that lost its run is told so (RunBusy),
        # not that the new owner already committed this step number.
        if store.db.execute_sql(update_sql, update_params).rowcount != 1:
            raise RunBusy(f"run {run_id} was taken over by another process")
        store.db.execute_sql(insert_sql, insert_params)
        if lease is not None:
            note_cancel(store, lease)  # a cancel asked while the call was in flight: this reply is its last
        # The step itself is indexed after the commit (search/pending.py: it is marked); a run's end
        # (its final text, its error) is indexed with it, once per run.
        if final_status is not None:
            index_run_end(store, run_id, step.n, step.assistant, final_text=final_text, error=final_error)
        pause_point("commit")
    pause_point("committed")


def step_landed(store: StoreHandle, run_id: str, n: int, assistant: str, lease: Lease | None) -> bool:
    """On a retry: is step ``n`` already stored as we sent it, under our lease?"""
    stored = Step.get_or_none((Step.run == run_id) & (Step.n == n))
    if stored is None or stored.assistant != assistant:
        return False
    return lease is None or Run.get_by_id(run_id).lease_token == lease.token


@store_call(retry_for=_commit_window)
def set_tool_results(store: StoreHandle, run_id: str, n: int, results: list[dict], *,
                     lease: Lease | None = None) -> None:
    encoded = dumps(results)
    now = store.dialect.now()
    with store.write_transaction():
        # The lease first: a driver that lost its run is told so (RunBusy, exit 4),
        # not that the new owner has already recorded these results.
        if store.db.execute_sql(*_touch_run_statement(store.db, now, run_id, lease)).rowcount != 1:
            raise RunBusy(f"run {run_id} was taken over by another process")
        encoded = blobs.externalise(store, encoded)  # large images and documents: kept once, by hash
        cursor = store.db.execute_sql(*_tool_results_statement(store.db, encoded, now, run_id, n))
        if cursor.rowcount != 1:
            stored = Step.get_or_none((Step.run == run_id) & (Step.n == n))
            if attempt_number() and stored is not None and stored.tool_results == encoded:
                return  # our earlier try committed before the connection went
            raise StoreError(f"run {run_id} step {n}: tool results already recorded")
        if lease is not None:
            note_cancel(store, lease)
        pause_point("commit")
    pause_point("committed")


@store_call
def steps(store: StoreHandle, run_id: str, *, from_n: int | None = None, limit: int | None = None) -> list[Step]:
    """The run's steps in order; ``from_n`` keeps steps ``n >= from_n`` (a live view's tail), ``limit`` the first
    that many of them."""
    query = Step.select().where(Step.run == run_id)
    if from_n is not None:
        query = query.where(Step.n >= from_n)
    query = query.order_by(Step.n)
    return list(query if limit is None else query.limit(limit))


@store_call
def replay_steps(store: StoreHandle, run_id: str) -> list[ReplayStep]:
    """Steps with only what a resume reads (the blocks' JSON text, stop reason and token counts), in order.

    One query, the rows as the driver returns them: building every column of a 10,000-step run took
    longer than decoding its JSON, and a model object per row still cost a third of it.
    """
    sql, params = (Step.select(Step.run, Step.n, Step.stop_reason, Step.assistant, Step.tool_results,
                               Step.input_tokens, Step.output_tokens)
                   .where(Step.run == run_id).order_by(Step.n).sql())
    rows = list(map(ReplayStep._make, store.db.execute_sql(sql, params)))
    # Images and documents kept by hash go back in: the history is read here to be sent.
    return [row if row.tool_results is None or blobs.MARKER not in row.tool_results
            else row._replace(tool_results=blobs.resolve(store, row.tool_results)) for row in rows]


@store_call
def step_at(store: StoreHandle, run_id: str, n: int) -> Step | None:
    return Step.get_or_none((Step.run == run_id) & (Step.n == n))


@store_call
def step_count(store: StoreHandle, run_id: str) -> int:
    return Step.select().where(Step.run == run_id).count()


def _host_now() -> str:
    return clock.iso()


@functools.lru_cache(maxsize=None)
def _insert_sql(param: str, quote: str, model: type) -> str:
    fields = [f for f in model._meta.sorted_fields if not isinstance(f, peewee.AutoField)]
    columns = ", ".join(f"{quote[0]}{f.column_name}{quote[1]}" for f in fields)
    return (f"INSERT INTO {quote[0]}{model._meta.table_name}{quote[1]} ({columns}) "
            f"VALUES ({', '.join([param] * len(fields))})")


def _insert_statement(db: peewee.Database, model: type, row: dict[str, Any]) -> tuple[str, list]:
    params = []
    for f in model._meta.sorted_fields:
        if isinstance(f, peewee.AutoField):
            continue
        value = row[f.name] if f.name in row else (f.default() if callable(f.default) else f.default)
        params.append(f.db_value(value))
    return _insert_sql(db.param, db.quote, model), params


def _quoted(quote: str, name: str) -> str:
    return f"{quote[0]}{name}{quote[1]}"


_RUN_COUNTERS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens")


@functools.lru_cache(maxsize=None)
def _add_step_sql(param: str, quote: str, assigned: tuple[str, ...], with_lease: bool, now_sql: str | None) -> str:
    counters = [Run._meta.fields[name].column_name for name in _RUN_COUNTERS]
    parts = [f"{_quoted(quote, c)} = {_quoted(quote, c)} + {param}" for c in counters]
    step_count = _quoted(quote, Run.step_count.column_name)
    parts.append(f"{step_count} = {step_count} + 1")
    parts += [f"{_quoted(quote, Run._meta.fields[name].column_name)} = {param}" for name in assigned]
    stamped = ["updated_at"] + (["heartbeat_at"] if with_lease else [])
    parts += [f"{_quoted(quote, Run._meta.fields[name].column_name)} = {now_sql or param}" for name in stamped]
    where = f"{_quoted(quote, Run.id.column_name)} = {param}"
    if with_lease:
        where += f" AND {_quoted(quote, Run.lease_token.column_name)} = {param}"
    return f"UPDATE {_quoted(quote, Run._meta.table_name)} SET {', '.join(parts)} WHERE {where}"


def _add_step_to_run_statement(store: "StoreHandle", run_id: str, added: tuple[int, ...], values: dict[str, Any],
                               lease: Lease | None, stamp: str | None) -> tuple[str, list]:
    """The run's counters plus one step's tokens, ``values`` set, stamped, guarded by the lease when given."""
    db = store.db
    params: list = list(added)
    params += [Run._meta.fields[name].db_value(value) for name, value in values.items()]
    now_sql = None
    if stamp is None:
        now_sql = store.dialect.now().sql  # the database's clock, an SQL expression
    else:
        params += [stamp] * (2 if lease is not None else 1)
    params.append(run_id)
    if lease is not None:
        params.append(lease.token)
    return _add_step_sql(db.param, db.quote, tuple(values), lease is not None, now_sql), params


@functools.lru_cache(maxsize=None)
def _tool_results_sql(param: str, quote: str, now_sql: str | None) -> str:
    table = _quoted(quote, Step._meta.table_name)
    results, done_at = _quoted(quote, Step.tool_results.column_name), _quoted(quote, Step.tools_done_at.column_name)
    run, n = _quoted(quote, Step.run.column_name), _quoted(quote, Step.n.column_name)
    pending = _quoted(quote, Step.index_pending.column_name)
    # Marked again: the results are indexed after the commit (search/pending.py).
    return (f"UPDATE {table} SET {results} = {param}, {done_at} = {now_sql or param}, {pending} = 1 "
            f"WHERE {run} = {param} AND {n} = {param} AND {results} IS NULL")


def _tool_results_statement(db: peewee.Database, encoded: str, now: Any, run_id: str, n: int) -> tuple[str, list]:
    if isinstance(now, str):
        return _tool_results_sql(db.param, db.quote, None), [encoded, now, run_id, n]
    return _tool_results_sql(db.param, db.quote, now.sql), [encoded, run_id, n]


@functools.lru_cache(maxsize=None)
def _touch_run_sql(param: str, quote: str, with_lease: bool, now_sql: str | None) -> str:
    where = f"{_quoted(quote, Run.id.column_name)} = {param}"
    if with_lease:
        where += f" AND {_quoted(quote, Run.lease_token.column_name)} = {param}"
    return (f"UPDATE {_quoted(quote, Run._meta.table_name)} SET {_quoted(quote, Run.updated_at.column_name)} = "
            f"{now_sql or param} WHERE {where}")


def _touch_run_statement(db: peewee.Database, now: Any, run_id: str, lease: Lease | None) -> tuple[str, list]:
    """The run's ``updated_at`` moved, under the lease when given: 0 rows means another process holds it."""
    params: list = [] if not isinstance(now, str) else [now]
    params.append(run_id)
    if lease is not None:
        params.append(lease.token)
    return _touch_run_sql(db.param, db.quote, lease is not None, None if isinstance(now, str) else now.sql), params
