"""Runs read from elsewhere (``dayflow import --claude-code``, ``dayflow collect``): read-only runs, appended to as
their files grow (or their traces' spans arrive: the "file" is then ``otlp:TRACE/SPAN``, its ``done`` the chat
span ids written).

An imported run is never driven: ``source`` says where it comes from, its status is ``done`` (or ``running``
while an OTLP trace's agent span has not come, then ``done``/``failed`` once; no worker claims it either way:
``claim_next`` takes only Dayflow's own orphans), and the verbs that would drive or change it (claim, fork,
decide, cancel) refuse it with ``ReadOnlyRun``. What an import writes is only ever appended: new runs, new steps after the last one
stored, and the file's new read position, all in one transaction that first moves the position from
where the read began (a retry whose earlier try landed, or a second importer, finds it moved and
writes nothing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...config.errors import ReadOnlyRun, StoreError
from ..models import ImportedFile, Run, Step
from ..retry import store_call
from ..status import RunStatus
from ..search.index import index_run_text
from .steps import _insert_statement, dumps

if TYPE_CHECKING:
    from ..handle import StoreHandle

CLAUDE_CODE = "claude-code"
OTEL = "otel"  # a trace's invoke_agent span received by ``dayflow collect`` (otel/collect.py)
DAYFLOW = "dayflow"
SOURCES = (DAYFLOW, CLAUDE_CODE, OTEL)


@dataclass(frozen=True)
class FileState:
    path: str
    run_id: str
    size: int
    offset: int
    mtime_ns: int
    done: dict[str, int]


@dataclass
class ImportedStep:
    stop_reason: str | None
    assistant: list
    tool_results: list | None = None
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_1h_tokens: int = 0
    web_search_requests: int = 0
    raw: str | None = None
    created_at: str | None = None
    duration_ms: int | None = None


@dataclass
class ImportedRun:
    """One run an import adds to or creates: its identity, what a new one starts with, its new steps."""

    run_id: str
    external_id: str | None
    source: str = CLAUDE_CODE
    agent: str | None = None  # the run's agent name (default: the source)
    parent_id: str | None = None
    external_dir: str | None = None
    external_branch: str | None = None
    model: str | None = None
    user_msg: str | None = None
    final_text: str | None = None  # the run's answer, when the source says it (an agent span's output)
    created_at: str | None = None
    steps: list[ImportedStep] = field(default_factory=list)
    # A run still going at its source (an OTLP trace whose agent span has not come): "running", and set to
    # "done" or "failed" (with ``error``) by the write that ends it; nothing else ever changes a stored status.
    status: str = "done"
    error: str | None = None
    parent_call_id: str | None = None


def read_only_message(run: Run) -> str:
    """The one line that says an imported run cannot be driven here, and how to go on with it."""
    from ...safe_text import printable

    if getattr(run, "source", None) == OTEL:
        return (f"run {printable(run.id)} is an OpenTelemetry trace received by `dayflow collect` "
                f"(trace/span {printable(run.external_id or '?')}): read-only; its agent runs elsewhere")
    session = printable(run.external_id or "?")
    where = printable(run.external_dir or "its project directory")
    return (f"run {printable(run.id)} is an imported Claude Code session: read-only; continue it with "
            f"`claude --resume {session}` in {where}")


def is_imported(run: Any) -> bool:
    """Was the run imported from elsewhere (read-only), rather than driven here?"""
    return (getattr(run, "source", None) or DAYFLOW) != DAYFLOW


def refuse_imported(run: Run) -> None:
    """``ReadOnlyRun`` for a run that was imported (never driven, forked, decided or cancelled here)."""
    if is_imported(run):
        raise ReadOnlyRun(read_only_message(run))


@store_call
def refuse_if_imported(store: "StoreHandle", run_id: str) -> None:
    run = Run.get_or_none(Run.id == run_id)
    if run is not None:
        refuse_imported(run)


@store_call
def imported_file(store: "StoreHandle", path: str) -> FileState | None:
    row = ImportedFile.get_or_none(ImportedFile.path == path)
    if row is None:
        return None
    try:
        done = {str(k): int(v) for k, v in json.loads(row.done).items()}
    except (TypeError, ValueError, AttributeError):
        done = {}
    return FileState(row.path, row.run_id, row.size, row.offset, row.mtime_ns, done)


def _state_statement(store: "StoreHandle", path: str, run_id: str, size: int, offset: int, mtime_ns: int,
                     done: dict[str, int], was: FileState | None) -> tuple[str, Any]:
    values = dict(run_id=run_id, size=size, offset=offset, mtime_ns=mtime_ns, done=json.dumps(done, sort_keys=True),
                  imported_at=store.dialect.now())
    if was is None:
        return ImportedFile.insert(path=path, **values).on_conflict_ignore().sql()
    return (ImportedFile.update(**values)
            .where((ImportedFile.path == path) & (ImportedFile.offset == was.offset)
                   & (ImportedFile.size == was.size) & (ImportedFile.done == json.dumps(was.done, sort_keys=True)))
            .sql())


@store_call(cut_stalls=False)
def append_imported(store: "StoreHandle", path: str, *, was: FileState | None, run_id: str, size: int,
                    offset: int, mtime_ns: int, done: dict[str, int], runs: list[ImportedRun]) -> dict[str, int]:
    """Write what one read of ``path`` found (new runs, steps after each run's last) and its new position.

    ``was``: the state the read began from. When the stored one differs (another import got there first, or
    this call's earlier try committed), nothing is written and the answer is empty. Steps added per run.
    """
    added: dict[str, int] = {}
    with store.write_transaction():
        sql, params = _state_statement(store, path, run_id, size, offset, mtime_ns, done, was)
        if store.db.execute_sql(sql, params).rowcount != 1:
            return {}
        for imported in runs:
            count = _append_run(store, imported)
            if count:
                added[imported.run_id] = count
    return added


def _append_run(store: "StoreHandle", imported: ImportedRun) -> int:
    now = store.dialect.now()
    run = Run.get_or_none(Run.id == imported.run_id)
    if run is None:
        values = dict(id=imported.run_id, user_msg=imported.user_msg or "", status=imported.status,
                      model=imported.model or "", max_steps=0, agent=(imported.agent or imported.source)[:255],
                      source=imported.source,
                      external_id=imported.external_id, external_dir=imported.external_dir,
                      external_branch=imported.external_branch, parent_id=imported.parent_id,
                      parent_call_id=imported.parent_call_id, error=imported.error,
                      created_at=imported.created_at or now, updated_at=now)
        if imported.final_text is not None:
            values["final_text"] = imported.final_text
        Run.insert(**values).execute()
        index_run_text(store, imported.run_id, task=values["user_msg"])
        first = 0
    else:
        if (run.source or DAYFLOW) != imported.source:
            raise StoreError(f"run {imported.run_id} exists and was not imported from {imported.source}; "
                             "nothing imported")
        first = run.step_count
        fill = {}
        if not run.model and imported.model:
            fill["model"] = imported.model
        if not run.user_msg and imported.user_msg:
            fill["user_msg"] = imported.user_msg
        if not run.parent_id and imported.parent_id:  # a nested agent whose parent was learnt after its run began
            fill.update(parent_id=imported.parent_id, parent_call_id=imported.parent_call_id)
        if run.status == RunStatus.RUNNING.value and imported.status != RunStatus.RUNNING.value:
            # The source's run ended (its agent span came): what only the end says, written once.
            fill.update(status=imported.status, error=imported.error, created_at=imported.created_at or run.created_at)
            if imported.model:
                fill["model"] = imported.model
            if imported.agent and (not run.agent or run.agent == run.source):
                fill["agent"] = imported.agent[:255]
            if imported.final_text is not None:
                fill["final_text"] = imported.final_text
        if fill:  # a run started before its first prompt or call was in the file: its blanks filled, once
            Run.update(**fill).where(Run.id == imported.run_id).execute()
            if "user_msg" in fill or fill.get("final_text") or fill.get("error"):
                index_run_text(store, imported.run_id, task=fill.get("user_msg"), final_text=fill.get("final_text"),
                               error=fill.get("error"))
    if not imported.steps:
        return 0
    sums = [0, 0, 0, 0]
    for offset, step in enumerate(imported.steps, start=1):
        row = dict(run=imported.run_id, n=first + offset, stop_reason=step.stop_reason,
                   assistant=dumps(step.assistant),
                   tool_results=None if step.tool_results is None else dumps(step.tool_results),
                   input_tokens=step.input_tokens, output_tokens=step.output_tokens,
                   cache_creation_input_tokens=step.cache_creation_input_tokens,
                   cache_read_input_tokens=step.cache_read_input_tokens,
                   cache_write_1h_tokens=step.cache_write_1h_tokens, web_search_requests=step.web_search_requests,
                   model=step.model, raw=step.raw, created_at=step.created_at or now, index_pending=1,
                   duration_ms=step.duration_ms)
        store.db.execute_sql(*_insert_statement(store.db, Step, row))
        sums[0] += step.input_tokens
        sums[1] += step.output_tokens
        sums[2] += step.cache_creation_input_tokens
        sums[3] += step.cache_read_input_tokens
    Run.update(step_count=Run.step_count + len(imported.steps), input_tokens=Run.input_tokens + sums[0],
               output_tokens=Run.output_tokens + sums[1], cache_creation_tokens=Run.cache_creation_tokens + sums[2],
               cache_read_tokens=Run.cache_read_tokens + sums[3], updated_at=now
               ).where(Run.id == imported.run_id).execute()
    return len(imported.steps)
