"""The spool: a paid reply that could not be committed waits on this host's disk, never in memory only.

When the commit of a paid reply keeps failing past its retry window (the
database is down, cut off or locked for minutes), the reply is written to an
owner-only file under the user's state directory and the process exits
naming it. The next ``dayflow resume`` or worker on this host stores it
before it makes any call, so the reply is bought once. It is lost only if
this host's disk is lost too.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import clock
from ..config import settings
from ..config.errors import StoreError
from .tables.runs import get_run
from .tables.steps import StepRecord, append_step, dumps, step_at

if TYPE_CHECKING:
    from .handle import StoreHandle
    from .leases import Lease

SPOOL_VERSION = 1


def spool_dir() -> Path:
    return settings.current().state_home / "spool"


def spool_files() -> int:
    """Replies waiting in this host's spool (for the metrics: a number above 0 wants a resume or a worker)."""
    folder = spool_dir()
    try:
        return sum(1 for path in folder.glob("*.json") if path.is_file())
    except OSError:
        return 0


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def spool_reply(store: "StoreHandle", run_id: str, step: StepRecord, final: tuple[str, str | None, str | None] | None,
                reason: str) -> Path:
    """Write one reply durably (temp file, fsync, rename, fsync of the directory) and return its path."""
    folder = _private_dir(spool_dir())
    record = {"version": SPOOL_VERSION, "database": store.label, "run_id": run_id, "n": step.n,
              "step": dataclasses.asdict(step), "final": list(final) if final else None,
              "spooled_at": clock.iso(), "reason": reason}
    path = folder / f"{run_id}-{step.n:06d}-{os.getpid()}.json"
    temp = path.with_suffix(".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(record, ensure_ascii=False))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(temp, path)
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def _spooled_for(store: "StoreHandle", run_id: str) -> list[tuple[int, Path, dict]]:
    folder = spool_dir()
    if not folder.is_dir():
        return []
    found = []
    for path in folder.glob(f"{run_id}-*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a file someone else put there, or one being written: not ours to judge
        if (isinstance(record, dict) and record.get("version") == SPOOL_VERSION
                and record.get("database") == store.label and record.get("run_id") == run_id):
            found.append((int(record["n"]), path, record))
    return sorted(found, key=lambda item: item[0])


def pending_spool(store: "StoreHandle", run_id: str) -> list[Path]:
    """Spool files on this host waiting to be stored into this run."""
    return [path for _n, path, _record in _spooled_for(store, run_id)]


def ingest_spool(store: "StoreHandle", run_id: str, lease: "Lease") -> int:
    """Store this run's spooled replies (in step order) under ``lease``; returns how many were stored.

    A reply whose step is already stored as spooled (its commit did land
    after all) is simply removed; one whose step number was meanwhile taken
    by another reply (another host drove the run) is set aside as
    ``.obsolete``, never stored twice.
    """
    stored = 0
    for n, path, record in _spooled_for(store, run_id):
        step = StepRecord(**_fields(record["step"]))
        existing = step_at(store, run_id, n)
        if existing is not None:
            if existing.assistant != dumps(step.assistant):
                os.replace(path, path.with_suffix(".obsolete"))
            else:
                path.unlink(missing_ok=True)
            continue
        if n != get_run(store, run_id).step_count + 1:
            raise StoreError(f"spool file {path}: step {n} of run {run_id} does not follow the stored steps; "
                             "left in place")
        status, text, error = record["final"] or (None, None, None)
        append_step(store, run_id, step, lease=lease, final_status=status, final_text=text, final_error=error)
        path.unlink(missing_ok=True)
        stored += 1
    return stored


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    known = {f.name for f in dataclasses.fields(StepRecord)}
    return {k: v for k, v in data.items() if k in known}

