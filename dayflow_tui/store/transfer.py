"""Runs that travel: a versioned JSON Lines form of runs, their steps, resumes and tasks, and its import.

The file (``dayflow export --jsonl``, ``dayflow prune --archive``)::

    {"kind": "header", "dayflow": "runs", "format": 1, "schema": 3, "exported_at": "...", "tables": {...}}
    {"kind": "run", "row": {"id": "...", "user_msg": "...", ...}}
    {"kind": "step", "row": {"run_id": "...", "n": 1, "assistant": "[{...}]", ...}}
    {"kind": "resume", "row": {...}}
    {"kind": "task", "row": {...}}
    ...
    {"kind": "end", "counts": {"run": 1, "step": 3, "resume": 0, "task": 6}}

One header line (the format's version, the schema it was written from, the
columns of each table), then each run followed by its steps (in order), its resumes,
its approvals and the tasks it created, then one ``end`` line with the counts (a cut-short
file is refused). Rows are keyed by column name and hold the stored values
exactly: a step's ``assistant`` and ``tool_results`` are the stored JSON text
as a string, untouched, so an import writes the same bytes back.

Import validates the whole file before it writes anything (every line, every
column's type and size against the models, steps 1..N of runs in the file,
the counts), refuses a run id the database already has unless ``as_new``,
and writes everything in one transaction.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterable, Iterator

import peewee

from .. import clock
from ..config.errors import ArchiveError, NoSuchFile, StoreError, UsageError
from .models import Approval, Run, RunResume, Step, Task
from .tables import blobs
from .retry import store_call
from .schema import SCHEMA_VERSION
from .search.index import index_runs
from .status import STORED
from .tables.steps import _insert_statement

if TYPE_CHECKING:
    from .handle import StoreHandle

FORMAT = 1
MARKER = "runs"
# kind -> model, in the order a run's records are written.
KINDS: dict[str, type[peewee.Model]] = {"run": Run, "step": Step, "resume": RunResume, "approval": Approval,
                                        "task": Task}
_INT_RANGE = {peewee.BigIntegerField: 2**63, peewee.IntegerField: 2**31, peewee.AutoField: 2**31}


# Local bookkeeping, not a run's content: whether this database's search index holds the step yet.
_NOT_EXPORTED = {"index_pending"}


def columns(model: type[peewee.Model]) -> list[peewee.Field]:
    return [f for f in model._meta.sorted_fields if f.column_name not in _NOT_EXPORTED]


def row_of(model: type[peewee.Model], instance: peewee.Model) -> dict[str, Any]:
    """The row as stored, keyed by column name (a foreign key is its raw id)."""
    return {f.column_name: instance.__data__.get(f.name) for f in columns(model)}


@dataclass
class Counts:
    run: int = 0
    step: int = 0
    resume: int = 0
    task: int = 0
    approval: int = 0  # schema 7: tool calls that waited for a person, with their decisions

    def add(self, kind: str, n: int = 1) -> None:
        setattr(self, kind, getattr(self, kind) + n)

    def as_dict(self) -> dict[str, int]:
        counts = {"run": self.run, "step": self.step, "resume": self.resume, "task": self.task}
        if self.approval:  # files from before approvals have no such count, and read the same
            counts["approval"] = self.approval
        return counts


# -- export ----------------------------------------------------------------


def header() -> dict[str, Any]:
    return {"kind": "header", "dayflow": MARKER, "format": FORMAT, "schema": SCHEMA_VERSION,
            "exported_at": clock.iso(), "tables": {model._meta.table_name: [f.column_name for f in columns(model)]
                       for model in KINDS.values()}}


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


@store_call(cut_stalls=False)  # may rightly run long on a healthy server
def run_records(store: "StoreHandle", run_id: str) -> list[dict[str, Any]]:
    """One run's records as written to the file, read in one snapshot (a run being driven stays whole)."""
    with _snapshot(store):
        run = Run.get_or_none(Run.id == run_id)
        if run is None:
            return []
        records = [{"kind": "run", "row": row_of(Run, run)}]
        # Images and documents kept once by hash (``tables/blobs``) leave with their data: a file stands alone.
        records += [{"kind": "step", "row": _with_data(store, row_of(Step, s), "tool_results")}
                    for s in Step.select().where(Step.run == run_id).order_by(Step.n)]
        records += [{"kind": "resume", "row": row_of(RunResume, r)}
                    for r in RunResume.select().where(RunResume.run == run_id).order_by(RunResume.id)]
        records += [{"kind": "approval", "row": _with_data(store, row_of(Approval, a), "result")}
                    for a in Approval.select().where(Approval.run == run_id).order_by(Approval.id)]
        records += [{"kind": "task", "row": row_of(Task, t)}
                    for t in Task.select().where(Task.run == run_id).order_by(Task.id)]
    return records


def _with_data(store: StoreHandle, row: dict[str, Any], column: str) -> dict[str, Any]:
    return {**row, column: blobs.resolve(store, row[column])}


@contextlib.contextmanager
def _snapshot(store: StoreHandle) -> Iterator[None]:
    """One read transaction: SQLite's WAL snapshot, PostgreSQL's REPEATABLE READ."""
    with store.db.atomic():
        store.dialect.begin_snapshot(store.db)
        yield


def write_jsonl(store: "StoreHandle", run_ids: Iterable[str], out: IO[str]) -> Counts:
    """Write the header, each run's records and the end line to ``out``."""
    counts = Counts()
    out.write(_line(header()))
    for run_id in run_ids:
        records = run_records(store, run_id)
        if not records:
            raise StoreError(f"run {run_id} disappeared while it was being exported")
        for record in records:
            out.write(_line(record))
            counts.add(record["kind"])
    out.write(_line({"kind": "end", "counts": counts.as_dict()}))
    return counts


@contextlib.contextmanager
def new_file(path: str | os.PathLike, what: str) -> Iterator[IO[str]]:
    """A file that appears whole or not at all: written beside its final name, synced, then renamed.

    An existing file is never replaced (it may be the only copy of something);
    ``-`` is standard output.
    """
    if os.fspath(path) == "-":
        import sys

        yield sys.stdout
        sys.stdout.flush()
        return
    target = Path(path).expanduser()
    if target.exists() or target.is_symlink():
        raise UsageError(f"{target}: exists; {what} never overwrites a file (choose another name or remove it)")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent}: no such directory")
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    except OSError as exc:
        raise UsageError(f"{target}: cannot write here ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.link(temp, target)  # unlike rename, refuses to replace a file that appeared meanwhile
    except FileExistsError:
        raise UsageError(f"{target}: appeared while it was being written; left as it is") from None
    except OSError as exc:
        raise UsageError(f"{target}: cannot write ({exc.strerror})") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)


# -- reading and validating ------------------------------------------------


@dataclass
class Archive:
    """What a valid file holds, gathered in the validating pass (rows stay in the file)."""

    path: Path
    schema: int
    counts: Counts
    run_ids: list[str] = field(default_factory=list)


def _check_value(model: type[peewee.Model], f: peewee.Field, value: Any, where: str) -> None:
    name = f"{model._meta.table_name}.{f.column_name}"
    if value is None:
        if not f.null:
            raise ArchiveError(f"{where}: {name} is null")
        return
    if isinstance(f, peewee.BooleanField):
        if not isinstance(value, bool):
            raise ArchiveError(f"{where}: {name} must be true or false")
        return
    if isinstance(f, (peewee.IntegerField, peewee.AutoField)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArchiveError(f"{where}: {name} must be a whole number")
        limit = next(v for k, v in _INT_RANGE.items() if isinstance(f, k))
        if not -limit <= value < limit:
            raise ArchiveError(f"{where}: {name} is out of range")
        return
    if isinstance(f, (peewee.CharField, peewee.TextField, peewee.ForeignKeyField)):
        if not isinstance(value, str):
            raise ArchiveError(f"{where}: {name} must be text")
        if "\x00" in value:
            raise ArchiveError(f"{where}: {name} holds a NUL character, which no Dayflow database stores")
        size = getattr(f, "max_length", None)
        if isinstance(f, peewee.ForeignKeyField):
            size = getattr(f.rel_field, "max_length", None)
        if size is not None and len(value) > size:
            raise ArchiveError(f"{where}: {name} is longer than {size} characters")
        if f.column_name.endswith("_at"):
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ArchiveError(f"{where}: {name} is not a timestamp ({value[:40]!r})") from None
        return
    raise ArchiveError(f"{where}: {name}: this Dayflow cannot import this column")  # a type added later


def _complete_row(model: type[peewee.Model], row: Any, where: str) -> dict[str, Any]:
    """The row with every column checked; a column an older Dayflow did not have gets its default."""
    if not isinstance(row, dict):
        raise ArchiveError(f"{where}: 'row' must be an object")
    known = {f.column_name: f for f in columns(model)}
    unknown = sorted(set(row) - set(known))
    if unknown:
        raise ArchiveError(f"{where}: unknown column {model._meta.table_name}.{unknown[0]} "
                           "(written by a newer Dayflow? upgrade dayflow-tui)")
    complete: dict[str, Any] = {}
    for column, f in known.items():
        if column in row:
            value = row[column]
        elif f.default is not None or f.null:
            value = f.default() if callable(f.default) else f.default
        else:
            raise ArchiveError(f"{where}: {model._meta.table_name}.{column} is missing")
        _check_value(model, f, value, where)
        complete[column] = value
    return complete


def _check_blocks(row: dict[str, Any], column: str, where: str) -> None:
    raw = row[column]
    if raw is None:
        return
    try:
        value = json.loads(raw)
    except ValueError:
        raise ArchiveError(f"{where}: step {row['n']} {column} is not valid JSON") from None
    if not isinstance(value, list):
        raise ArchiveError(f"{where}: step {row['n']} {column} is not a list of blocks")


def _records(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with open(path, "rb") as fh:
            for number, raw in enumerate(fh, start=1):
                try:
                    yield number, raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ArchiveError(f"{path} line {number}: not UTF-8 text") from None
    except FileNotFoundError:
        raise NoSuchFile(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ArchiveError(f"{path}: is a directory") from None
    except PermissionError:
        raise ArchiveError(f"{path}: cannot be read (permission denied)") from None


def _parse(path: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(where, kind, row)`` for every record of a valid file; raises ``ArchiveError`` at the first fault.

    The whole file is checked by one pass of this generator; the import reads
    it a second time through the same checks, inside its transaction.
    """
    counts = Counts()
    runs: dict[str, int] = {}  # run id -> steps seen
    step_counts: dict[str, int] = {}
    task_keys: set[str] = set()
    current: str | None = None
    ended = False
    saw_header = False
    for number, text in _records(path):
        where = f"{path} line {number}"
        if ended:
            if text.strip():
                raise ArchiveError(f"{where}: data after the end line")
            continue
        try:
            record = json.loads(text)
        except ValueError as exc:
            raise ArchiveError(f"{where}: not a JSON object ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ArchiveError(f"{where}: not a JSON object")
        if not saw_header:
            if record.get("dayflow") != MARKER:
                raise ArchiveError(f"{where}: not a Dayflow runs file (its first line is no Dayflow header)")
            version = record.get("format")
            if not isinstance(version, int) or isinstance(version, bool):
                raise ArchiveError(f"{where}: the header has no format version")
            if version > FORMAT:
                raise ArchiveError(f"{where}: written by a newer Dayflow (format {version}); "
                                   f"this version reads format {FORMAT}. Upgrade dayflow-tui.")
            saw_header = True
            yield where, "header", record
            continue
        kind = record.get("kind")
        if kind == "end":
            told = record.get("counts")
            if told != counts.as_dict():
                raise ArchiveError(f"{where}: the end line counts {told}, the file holds {counts.as_dict()}")
            if current is not None and runs[current] != step_counts[current]:
                raise ArchiveError(f"{where}: run {current} has {runs[current]} step(s), its row says "
                                   f"{step_counts[current]}")
            ended = True
            continue
        if kind not in KINDS:
            raise ArchiveError(f"{where}: unknown record kind {kind!r}")
        row = _complete_row(KINDS[kind], record.get("row"), where)
        if kind == "run":
            if current is not None and runs[current] != step_counts[current]:
                raise ArchiveError(f"{where}: run {current} has {runs[current]} step(s), its row says "
                                   f"{step_counts[current]}")
            if row["id"] in runs:
                raise ArchiveError(f"{where}: run {row['id']} appears twice")
            if row["status"] not in {s.value for s in STORED}:
                raise ArchiveError(f"{where}: run {row['id']} has unknown status {row['status']!r}")
            current = row["id"]
            runs[current] = 0
            step_counts[current] = row["step_count"]
        elif kind == "task":
            if row["run_id"] is not None and row["run_id"] not in runs:
                raise ArchiveError(f"{where}: task {row['idempotency_key']!r} names run {row['run_id']}, "
                                   "which is not in the file before it")
            if row["idempotency_key"] in task_keys:
                raise ArchiveError(f"{where}: task key {row['idempotency_key']!r} appears twice")
            task_keys.add(row["idempotency_key"])
        else:
            if row["run_id"] != current:
                raise ArchiveError(f"{where}: a {kind} of run {row['run_id']} outside that run's records")
            if kind == "step":
                if row["n"] != runs[current] + 1:
                    raise ArchiveError(f"{where}: run {current} step {row['n']} follows step {runs[current]} "
                                       "(steps must be 1..N in order)")
                _check_blocks(row, "assistant", where)
                _check_blocks(row, "tool_results", where)
                runs[current] += 1
        counts.add(kind)
        yield where, kind, row
    if not saw_header:
        raise ArchiveError(f"{path}: empty file (no Dayflow header)")
    if not ended:
        raise ArchiveError(f"{path}: ends without its end line (cut short?)")


def read_archive(path: str | os.PathLike) -> Archive:
    """Validate the whole file; what it holds, or ``ArchiveError`` naming the first bad line."""
    path = Path(path).expanduser()
    archive = Archive(path=path, schema=0, counts=Counts())
    for where, kind, row in _parse(path):
        if kind == "header":
            archive.schema = row.get("schema") if isinstance(row.get("schema"), int) else 0
            continue
        archive.counts.add(kind)
        if kind == "run":
            archive.run_ids.append(row["id"])
    return archive


# -- import ----------------------------------------------------------------


@dataclass
class ImportReport:
    runs: list[tuple[str, str]] = field(default_factory=list)  # (id in the file, id written)
    steps: int = 0
    resumes: int = 0
    approvals: int = 0
    tasks_added: int = 0
    tasks_relinked: int = 0  # a task kept when its run was pruned, linked to its run again
    tasks_kept: int = 0  # a task with the same key was there already: the database's copy stays
    renumbered: int = 0  # rows whose id was taken here got a new one (tasks, resumes)


def _chunks(items: list, size: int = 500) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


@store_call
def existing_run_ids(store: "StoreHandle", run_ids: list[str]) -> set[str]:
    found: set[str] = set()
    for chunk in _chunks(run_ids):
        found |= {r for (r,) in Run.select(Run.id).where(Run.id.in_(chunk)).tuples()}
    return found


def _fields(model: type[peewee.Model], row: dict[str, Any]) -> dict[str, Any]:
    by_column = {f.column_name: f.name for f in columns(model)}
    return {by_column[column]: value for column, value in row.items()}


def _free_id(model: type[peewee.Model], wanted: int) -> bool:
    return not model.select(model.id).where(model.id == wanted).exists()


@store_call(cut_stalls=False)  # may rightly run long on a healthy server
def import_archive(store: "StoreHandle", archive: Archive, *, as_new: bool = False) -> ImportReport:
    """Write a validated archive's rows in one transaction (see the module docstring)."""
    report = ImportReport()
    taken = existing_run_ids(store, archive.run_ids)
    if taken and not as_new:
        first = sorted(taken)[0]
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise UsageError(f"run {first}{more} already exists in {store.label}; nothing imported "
                         "(--as-new imports under new run ids)")
    new_ids = {old: (uuid.uuid4().hex[:12] if as_new else old) for old in archive.run_ids}
    kept_ids = [m._meta.table_name for m in (Task, RunResume, Approval)]  # rows that keep their own id when free
    with store.write_transaction():
        # Ids are chosen here, then written: no concurrent insert may take one in between.
        store.dialect.lock_for_new_ids(store.db, kept_ids)
        for where, kind, row in _parse(archive.path):
            if kind == "header":
                continue
            if "run_id" in row and row["run_id"] is not None:
                row = {**row, "run_id": new_ids[row["run_id"]]}
            if kind == "run":
                old = row["id"]
                row = {**row, "id": new_ids[old]}
                store.db.execute_sql(*_insert_statement(store.db, Run, _fields(Run, row)))
                report.runs.append((old, row["id"]))
            elif kind == "step":
                # The store's cached INSERT (its per-step hot path): building each with Peewee cost 5x more.
                row = {**row, "tool_results": blobs.externalise(store, row["tool_results"] or "") or None}
                store.db.execute_sql(*_insert_statement(store.db, Step, {**_fields(Step, row), "index_pending": 0}))
                report.steps += 1
            elif kind == "resume":
                _insert_keeping_id(RunResume, row, report)
                report.resumes += 1
            elif kind == "approval":
                row = {**row, "result": blobs.externalise(store, row["result"] or "") or None}
                _insert_keeping_id(Approval, row, report)
                report.approvals += 1
            elif kind == "task":
                _import_task(row, report)
        store.dialect.after_explicit_ids(store.db, kept_ids)
        # Written around the commit paths, so indexed here, in the same transaction, as they would have been.
        index_runs(store, [new for _old, new in report.runs])
    return report


def _insert_keeping_id(model: type[peewee.Model], row: dict[str, Any], report: ImportReport) -> None:
    """Insert with the row's own id when it is free here, else with a new one (ids are local names)."""
    if not _free_id(model, row["id"]):
        row = {k: v for k, v in row.items() if k != "id"}
        report.renumbered += 1
    model.insert(**_fields(model, row)).execute()


def _import_task(row: dict[str, Any], report: ImportReport) -> None:
    """A task is the person's: one per key. A key this database has keeps the database's task.

    The one exception restores a prune: the same task (every column but its
    run equal) left without a run, because its run was pruned, is linked to
    the run again.
    """
    existing = Task.get_or_none(Task.idempotency_key == row["idempotency_key"])
    if existing is None:
        _insert_keeping_id(Task, row, report)
        report.tasks_added += 1
        return
    mine = row_of(Task, existing)
    same = all(mine[c] == row[c] for c in row if c not in ("id", "run_id"))
    if same and mine["run_id"] is None and row["run_id"] is not None:
        Task.update(run=row["run_id"]).where(Task.id == existing.id).execute()
        report.tasks_relinked += 1
        return
    report.tasks_kept += 1
