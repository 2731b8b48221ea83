"""The search index: every place of every run; a step's places are indexed just after its commit.

``docs`` (what an index row is), ``index`` (the writes the commit paths
make), ``pending`` (steps indexed after their commit, and the marks that
say which are not yet), ``backfill`` (the migration that builds it, and ``--reindex``),
``query`` (candidates from the index, checked against the stored rows),
``verbs`` (what ``api.Store`` calls). How words are stored and matched is
the dialect's (``store.dialect``): FTS5 on SQLite, a tsvector on PostgreSQL.
"""

from .backfill import OnNote, OnProgress, add_search_index, rebuild
from .docs import DOCS, IndexState
from .index import index_run_end, index_run_text, index_runs, index_state, unindex_runs
from .pending import FLUSH_EVERY, index_pending_steps, pending_steps
from .query import BUILT_IN_AGENT, Hit, SearchResult, search
from .verbs import rebuild_search_index, run_search

__all__ = ["BUILT_IN_AGENT", "DOCS", "FLUSH_EVERY", "Hit", "IndexState", "OnNote", "OnProgress", "SearchResult",
           "add_search_index", "index_pending_steps", "index_run_end", "index_run_text", "index_runs",
           "index_state", "pending_steps", "rebuild", "rebuild_search_index", "run_search", "search",
           "unindex_runs"]
