"""The search verbs ``api.Store`` calls: a query, and building the index again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...search.query import Query
from ..retry import store_call
from .backfill import OnProgress, rebuild
from .query import SearchResult, search

if TYPE_CHECKING:
    from ..handle import StoreHandle


@store_call(cut_stalls=False)  # may rightly run long on a healthy server
def run_search(store: StoreHandle, query: Query, *, limit: int = 50, since: str | None = None,
               agent: str | None = None, before: int | None = None) -> SearchResult:
    """Hits for a parsed query (``search.query.parse``), newest first; see ``store.search.query.search``."""
    return search(store, query, limit=limit, since=since, agent=agent, before=before)


@store_call(cut_stalls=False)  # may rightly run long on a healthy server
def rebuild_search_index(store: StoreHandle, on_progress: OnProgress | None = None) -> int:
    """Build the search index again from every stored run (``dayflow search --reindex``).

    ``on_progress(done, total)`` is called after each step indexed; the store itself writes nothing.
    """
    return rebuild(store, on_progress)
