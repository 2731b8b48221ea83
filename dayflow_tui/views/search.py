"""Search results, read: hits grouped per run (the dashboard) or as found (``dayflow search``).

Parsing is the caller's (a bad query is one line before anything is read);
``QueryError`` from a query typed into the dashboard passes through for the
screen to show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Mapping

from ..search.query import Query, check_searchable, parse
from ..store.search import Hit
from .titles import titles_of

# What the beginning of a run id looks like (ids are 12 hex digits; tests and imports use words and dashes).
RUN_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]{3,31}$")


@dataclass(frozen=True)
class RunHits:
    """One run's hits, newest first, and the one shown for it."""

    run_id: str
    status: str
    hits: tuple[Hit, ...]
    title: str = ""  # views.titles.run_title

    @property
    def best(self) -> Hit:
        """The hit whose place holds the most of the query (the newest of those)."""
        return max(self.hits, key=lambda hit: hit.held)  # max keeps the first on a tie: the newest


def group_by_run(hits: tuple[Hit, ...]) -> tuple[RunHits, ...]:
    """Hits grouped per run, runs in the order of their newest hit."""
    runs: dict[str, list[Hit]] = {}
    for hit in hits:
        runs.setdefault(hit.run_id, []).append(hit)
    return tuple(RunHits(run_id, found[0].status, tuple(found)) for run_id, found in runs.items())


@dataclass(frozen=True)
class Found:
    """One search's answer: the hits (newest first), grouped per run when every run was searched."""

    query: Query
    hits: tuple[Hit, ...]
    more: bool  # more hits than the limit
    note: str | None = None  # what the store says about the search (an index being built)
    runs: tuple[RunHits, ...] = ()  # every run searched: the runs, those found by their id first
    by_id: int = 0  # how many of ``runs`` were found by the beginning of their id
    titles: Mapping[str, str] = field(default_factory=dict)  # run id -> title, for every run with a hit


def search_typed(store, text: str, *, limit: int, run_id: str | None = None) -> Found:
    """What the dashboard's search box finds as you type (the last word a prefix); ``run_id``: in that run only."""
    query = parse(text, prefix_last=True)
    check_searchable(query)
    narrowed = query.with_filters(runs=(run_id,)) if run_id else query
    result = store.search(narrowed.searched(), limit=limit)
    hits = tuple(hit for hit in result.hits if run_id is None or hit.run_id == run_id)
    if run_id is not None:
        return Found(query, hits, result.more, result.note)
    runs = group_by_run(hits)
    by_id: tuple[RunHits, ...] = ()
    if RUN_ID.match(text.strip()):  # the beginning of a run id finds that run too, first
        known = {run.run_id for run in runs}
        by_id = group_by_run(tuple(hit for hit in store.search(parse(f"run:{text.strip()} in:task"),
                                                               limit=20).hits if hit.run_id not in known))
    runs = by_id + runs
    titles = titles_of(store, [run.run_id for run in runs])
    return Found(query, hits, result.more, result.note,
                 tuple(replace(run, title=titles.get(run.run_id, "")) for run in runs), len(by_id), titles)


def search_query(store, query: Query, *, limit: int, since: str | None = None, agent: str | None = None) -> Found:
    """``dayflow search``: the newest ``limit`` hits of a checked query."""
    result = store.search(query.searched(), limit=limit, since=since, agent=agent)
    return Found(query, tuple(result.hits), result.more, result.note,
                 titles=titles_of(store, [hit.run_id for hit in result.hits]))
