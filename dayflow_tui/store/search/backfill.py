"""Building the whole search index at once: the schema migration that adds it, and ``search --reindex``.

Both report through callbacks and write nothing themselves: ``on_progress(done,
total)`` after each step indexed (a front end may draw a bar), ``on_note(text)``
for the one line a person should read (this process cannot build the index).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ...config.errors import StoreError
from .docs import DocRow, chunks
from .index import RUN_COLUMNS, forget_state, run_docs, write_docs

if TYPE_CHECKING:
    from ..handle import StoreHandle

OnProgress = Callable[[int, int], None]  # (steps indexed so far, steps in all)
OnNote = Callable[[str], None]

_FILL_BATCH = 500


def _no_progress(done: int, total: int) -> None:
    pass


def _no_note(text: str) -> None:
    pass


def add_search_index(store: "StoreHandle") -> None:
    """Schema migration: the search tables, filled from every run and step already stored.

    Runs inside the migration's transaction; reports to the callbacks ``open_store`` was given
    (``store.migration_progress``, ``store.migration_note``).
    """
    on_progress = getattr(store, "migration_progress", None) or _no_progress
    on_note = getattr(store, "migration_note", None) or _no_note
    reason = store.dialect.search_unavailable(store.db)
    if reason is not None:
        on_note(f"{store.label}: {reason}, so runs are not indexed and `dayflow search` scans every step; "
                "with an FTS5 build, run `dayflow search --reindex` once")
        forget_state(store)
        return
    store.dialect.create_search_tables(store.db)
    forget_state(store)
    fill(store, on_progress)


def rebuild(store: "StoreHandle", on_progress: OnProgress | None = None) -> int:
    """Drop and rebuild the whole index from the stored rows; returns the number of rows indexed.

    The one repair for an index that cannot be trusted (written around by a
    process without FTS5, or a database restored from elsewhere). One
    transaction: searches see the old index or the new one.
    """
    reason = store.dialect.search_unavailable(store.db)
    if reason is not None:
        raise StoreError(f"{store.label}: {reason}, so the search index cannot be built here; use a Python "
                         "whose sqlite3 has FTS5")
    with store.write_transaction():
        store.dialect.clear_search_tables(store.db)
        store.dialect.create_search_tables(store.db)
        forget_state(store)
        return fill(store, on_progress or _no_progress)


def fill(store: "StoreHandle", on_progress: OnProgress) -> int:
    """Index every run and step, oldest run first (ids then follow time, so newest-first is id order)."""
    db = store.db
    written = 0
    with store.dialect.filling_search_index(db):
        total = db.execute_sql('SELECT count(*) FROM "steps"').fetchone()[0]
        done = 0
        batch: list[DocRow] = []

        def stepped() -> None:
            nonlocal done
            done += 1
            on_progress(done, total)

        def flush() -> None:
            nonlocal written
            written += write_docs(store, batch)
            batch.clear()

        runs = db.execute_sql(f'SELECT {RUN_COLUMNS} FROM "runs" ORDER BY created_at, id').fetchall()
        for chunk in chunks(runs, 200):
            for doc in run_docs(store, chunk, on_step=stepped):
                batch.append(doc)
                if len(batch) >= _FILL_BATCH:
                    flush()
        flush()
    # Every step is in the index now, those marked as waiting for it included (the column is there from
    # schema 11 on; a database migrated from before it gets it later, unmarked).
    if any(column.name == "index_pending" for column in db.get_columns("steps")):
        db.execute_sql('UPDATE "steps" SET index_pending = 0 WHERE index_pending = 1')
    return written
