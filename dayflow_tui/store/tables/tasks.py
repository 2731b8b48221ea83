"""Tasks: the agent's side effects, created once per idempotency key."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Iterable

import peewee

from ... import clock
from ..models import Step, Task
from ..retry import store_call

if TYPE_CHECKING:
    from ..handle import StoreHandle


@store_call
def create_task(store: StoreHandle, *, idempotency_key: str, title: str, due: str | None = None,
                notes: str | None = None, run_id: str | None = None) -> tuple[Task, bool]:
    """Create a task once per key. Returns ``(task, created)``; a repeat returns the existing task."""
    existing = Task.get_or_none(Task.idempotency_key == idempotency_key)
    if existing is not None:
        return existing, False
    try:
        with store.write_transaction():
            task = Task.create(idempotency_key=idempotency_key, title=title, due=due, notes=notes,
                               run=run_id, created_at=clock.iso())
        return task, True
    except peewee.IntegrityError:
        # Another process created it between our read and our insert. Any other constraint failing (a
        # CHECK, a trigger, a damaged schema) is the database's fault, not a race: raised as it is, never
        # passed off as "the task does not exist".
        raced = Task.get_or_none(Task.idempotency_key == idempotency_key)
        if raced is None:
            raise
        return raced, False


@store_call
def list_tasks(store: StoreHandle, *, include_done: bool = False, run_id: str | None = None) -> list[Task]:
    query = Task.select()
    if not include_done:
        query = query.where(Task.done == False)  # noqa: E712 (peewee expression)
    if run_id is not None:
        query = query.where(Task.run == run_id)
    return list(query.order_by(Task.id))


@store_call
def find_tasks(store: StoreHandle, *, text: str | None = None, done: bool | None = None,
               run_prefix: str | None = None, limit: int = 500,
               before_id: int | None = None) -> tuple[list[Task], int]:
    """Tasks newest first, narrowed by words in the title or notes, done or open, and a run id prefix.

    Returns the first ``limit`` (older than task ``before_id``: the next page, by key, so tasks made
    meanwhile do not shift it) and how many match in all (the dashboard's tasks screen).
    """
    query = Task.select()
    for word in (text or "").split():
        query = query.where(Task.title.contains(word) | Task.notes.contains(word))
    if done is not None:
        query = query.where(Task.done == done)
    if run_prefix:
        query = query.where(Task.run.startswith(run_prefix))
    total = query.count()
    if before_id is not None:
        query = query.where(Task.id < before_id)
    return list(query.order_by(Task.id.desc()).limit(limit)), total


@store_call
def task_origins(store: StoreHandle, tasks: Iterable[Task]) -> dict[int, int]:
    """The step that created each task: the first of its run's steps whose tool call carried the task's
    idempotency key (the model chooses the key, so it is matched in the calls' arguments, exactly).

    One query per run, narrowed in SQL by the key's JSON text, confirmed on the decoded blocks.
    Tasks made outside a run (sample data, imports) have none.
    """
    by_run: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        if task.run_id:
            by_run[task.run_id].append(task)
    origins: dict[int, int] = {}
    for run_id, run_tasks in by_run.items():
        keys = {task.idempotency_key: task for task in run_tasks}
        needles = [json.dumps(key)[1:-1] for key in keys]
        condition = Step.assistant.contains(needles[0])
        for needle in needles[1:]:
            condition |= Step.assistant.contains(needle)
        rows = Step.select(Step.n, Step.assistant).where((Step.run == run_id) & condition).order_by(Step.n)
        for n, assistant in rows.tuples():
            try:
                blocks = json.loads(assistant)
            except ValueError:
                continue  # a damaged row: no origin from it
            for block in blocks if isinstance(blocks, list) else ():
                if not isinstance(block, dict) or block.get("type") != "tool_use":
                    continue
                arguments = block.get("input")
                for value in arguments.values() if isinstance(arguments, dict) else ():
                    task = keys.get(value) if isinstance(value, str) else None
                    if task is not None and task.id not in origins:
                        origins[task.id] = n
    return origins
