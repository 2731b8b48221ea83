"""Tasks, read: the dashboard's filtered pages (with the step that made each) and ``dayflow tasks``'s list.

A task is a side effect an agent made; each row says which run made it,
and the CLI adds what that whole run cost.
"""

from __future__ import annotations

from dataclasses import dataclass

PAGE = 500  # tasks the dashboard reads at once; the cursor at the last one reads the next page


@dataclass(frozen=True)
class TaskFilter:
    text: str = ""
    done: bool | None = None
    run_prefix: str | None = None


def parse_filter(raw: str) -> TaskFilter:
    """``open``/``done`` and ``run:ID`` are filters; every other word must appear in the title or notes."""
    words, done, run_prefix = [], None, None
    for word in raw.split():
        lowered = word.casefold()
        if lowered in ("open", "done"):
            done = lowered == "done"
        elif lowered.startswith("run:") and len(word) > 4:
            run_prefix = word[4:]
        else:
            words.append(word)
    return TaskFilter(" ".join(words), done, run_prefix)


@dataclass(frozen=True)
class TaskRow:
    id: int
    title: str
    due: str | None
    done: bool
    created_at: str
    run_id: str | None
    step: int | None


def read_tasks(store, task_filter: TaskFilter, *, before_id: int | None = None,
               limit: int = PAGE) -> tuple[tuple[TaskRow, ...], int]:
    """The newest ``limit`` matching tasks older than ``before_id``, and how many match in all."""
    tasks, total = store.find_tasks(text=task_filter.text or None, done=task_filter.done,
                                    run_prefix=task_filter.run_prefix, limit=limit, before_id=before_id)
    origins = store.task_origins(tasks)
    rows = tuple(TaskRow(t.id, t.title, t.due, bool(t.done), t.created_at, t.run_id, origins.get(t.id))
                 for t in tasks)
    return rows, total


@dataclass(frozen=True)
class TaskLine:
    """A task of ``dayflow tasks``, with the dollars of the run that created it (None: not from a run)."""

    task: object  # the stored row
    run_cost: object | None  # a RunCost


def task_lines(store, *, include_done: bool) -> tuple[TaskLine, ...]:
    from ..money.cost import run_costs

    tasks = store.list_tasks(include_done=include_done)
    # What the run that created each task cost (the whole run: a task is one of its side effects).
    costs = run_costs(store, [t.run_id for t in tasks if t.run_id])
    return tuple(TaskLine(t, costs[t.run_id] if t.run_id else None) for t in tasks)
