"""The search index: every place of every run, kept in the same transaction as the rows it indexes.

``docs`` (what an index row is), ``index`` (the writes the commit paths
make), ``backfill`` (the migration that builds it, and ``--reindex``),
``query`` (candidates from the index, checked against the stored rows),
``verbs`` (what ``api.Store`` calls). How words are stored and matched is
the dialect's (``store.dialect``): FTS5 on SQLite, a tsvector on PostgreSQL.
"""

from .backfill import OnNote, OnProgress, add_search_index, rebuild
from .docs import DOCS, IndexState
from .index import index_run_text, index_runs, index_state, index_step_text, unindex_runs
from .query import BUILT_IN_AGENT, Hit, SearchResult, search
from .verbs import rebuild_search_index, run_search

__all__ = ["BUILT_IN_AGENT", "DOCS", "Hit", "IndexState", "OnNote", "OnProgress", "SearchResult",
           "add_search_index", "index_run_text", "index_runs", "index_state", "index_step_text", "rebuild",
           "rebuild_search_index", "run_search", "search", "unindex_runs"]
