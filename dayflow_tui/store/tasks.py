"""Tasks: the agent's side effects, created once per idempotency key."""

from __future__ import annotations

from typing import TYPE_CHECKING

import peewee

from .. import clock
from .models import Task
from .retry import store_call

if TYPE_CHECKING:
    from .core import Store


class TaskQueries:
    """The store's task operations (a part of ``Store``)."""

    @store_call
    def create_task(self: "Store", *, idempotency_key: str, title: str, due: str | None = None,
                    notes: str | None = None, run_id: str | None = None) -> tuple[Task, bool]:
        """Create a task once per key. Returns ``(task, created)``; a repeat returns the existing task."""
        existing = Task.get_or_none(Task.idempotency_key == idempotency_key)
        if existing is not None:
            return existing, False
        try:
            with self.write_transaction():
                task = Task.create(idempotency_key=idempotency_key, title=title, due=due, notes=notes,
                                   run=run_id, created_at=clock.iso())
            return task, True
        except peewee.IntegrityError:
            # Another process created it between our read and our insert.
            return Task.get(Task.idempotency_key == idempotency_key), False

    @store_call
    def list_tasks(self: "Store", *, include_done: bool = False, run_id: str | None = None) -> list[Task]:
        query = Task.select()
        if not include_done:
            query = query.where(Task.done == False)  # noqa: E712 (peewee expression)
        if run_id is not None:
            query = query.where(Task.run == run_id)
        return list(query.order_by(Task.id))
