"""The workers, as ``dayflow workers`` prints them and the dashboard's workers screen draws them."""

from __future__ import annotations

from dataclasses import dataclass

from ..store import Store
from ..store.tables.workers import WorkerRow


@dataclass(frozen=True)
class WorkerLine:
    """One worker, its cells as text (host and version come from the database: shown as text, never markup)."""

    row: WorkerRow
    beat: str  # "3s ago", "—"
    held: str  # "2/4: 3bd67bee3b7f, 9a1c…"


def age_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{seconds:.0f}s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def worker_lines(store: Store) -> list[WorkerLine]:
    lines = []
    for row in store.workers():
        held = f"{len(row.runs)}/{row.concurrency}" + (f": {', '.join(row.runs)}" if row.runs else "")
        lines.append(WorkerLine(row, age_text(row.beat_age_s), held))
    return lines


def worker_document(line: WorkerLine) -> dict:
    row = line.row
    return {"id": row.id, "host": row.host, "pid": row.pid, "version": row.version, "state": row.state,
            "concurrency": row.concurrency, "started_at": row.started_at, "beat_age_s": row.beat_age_s,
            "runs": list(row.runs), "runs_done": row.runs_done}
