"""Search queries: candidates from the index, each checked again against the stored rows.

Every candidate the index returns is checked again against the stored rows
by the same matcher that cuts the snippet, so a hit is always real and
always shows where it is. Without an index (a SQLite without FTS5) every
run and step is read and matched in Python, with one line saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ...search.query import Query, check_searchable
from ...search.text import LABELS, PlaceWords, Snippet, best_place, is_final_turn, place_matches, snippet
from ..leases import effective_status, with_clock
from ..models import Run, Step
from .docs import (DOCS, PART_ERROR, PART_FINAL, PART_FINAL_TURN, PART_RESULTS, PART_TASK, PART_TURN, STEP_PARTS,
                   WEIGHTS, Doc, IndexState, allowed_columns, blocks, chunks, load_docs)
from .index import index_state
from .pending import pending_steps

if TYPE_CHECKING:
    from ..handle import StoreHandle

# The agent every run belongs to until runs record their agent (``Run.agent``).
BUILT_IN_AGENT = "brief"


@dataclass(frozen=True)
class Hit:
    """One place that matches, with everything a front end shows (frozen: safe to hand to a UI thread)."""

    run_id: str
    step: int  # 0 for the task
    column: str  # search.text.COLUMNS
    tool: str | None
    snippet: Snippet
    status: str  # the run's effective status (interrupted included)
    at: str  # when the step was committed (the run's last update for the task, final text and errors)
    doc_id: int = 0  # position in the index (newest first); 0 when found by a scan
    others: tuple[tuple[str, str | None], ...] = ()  # other places of the same step that match too
    held: int = 0  # how many of the query's words and phrases the shown place holds

    @property
    def label(self) -> str:
        return LABELS[self.column]


@dataclass(frozen=True)
class SearchResult:
    hits: tuple[Hit, ...]
    more: bool  # the limit cut the list short
    cursor: int | None  # pass as ``before`` for the next page (indexed searches)
    indexed: bool  # False: no index here, every step was scanned
    note: str | None = None  # one line to show the user (no FTS5, an index that is behind)


def _parts_holding(columns: Iterable[str]) -> list[int]:
    wanted = set(columns)
    return [part for part, weights in WEIGHTS.items() if wanted & set(weights)]


def _agent_clause(store: "StoreHandle", agent: str | None) -> tuple[str, list] | None:
    """Runs of ``agent``: by the run's recorded agent when runs have one, else every run is the built-in one."""
    if agent is None:
        return None
    field = Run._meta.fields.get("agent")
    if field is None:
        return ("1 = 1", []) if agent == BUILT_IN_AGENT else ("1 = 0", [])
    return f'r."{field.column_name}" = {store.db.param}', [agent]


def _stored_statuses(query: Query) -> list[str]:
    return sorted({"running" if s.value == "interrupted" else s.value for s in query.statuses})


def search(store: "StoreHandle", query: Query, *, limit: int = 50, since: str | None = None, agent: str | None = None,
           before: int | None = None) -> SearchResult:
    """Hits for ``query``, newest first: at most ``limit``, from the index row ``before`` on (paging)."""
    check_searchable(query)
    state = index_state(store)
    run_ids = _resolve_runs(store, query.runs) if query.runs else None
    if run_ids == []:
        return SearchResult((), False, None, state.kind is not None)
    if state.kind is None:
        hits, more = _scan(store, query, limit=limit, since=since, agent=agent, run_ids=run_ids)
        unindexed = store.dialect.unindexed_note(state)
        note = f"{store.label}: {unindexed}" if unindexed else None
        return SearchResult(tuple(hits), more, None, False, note)
    # Steps committed but not yet indexed (search/pending.py) are read from their rows, and only there:
    # the newest writes, so they lead the first page.
    pending = pending_steps(store)
    hits: list[Hit] = []
    if pending and before is None:
        hits.extend(_scan_pending(store, query, pending, since=since, agent=agent, run_ids=run_ids))
    cursor = before
    page = max(limit * 2, 64)
    exhausted = False
    while len(hits) <= limit:
        rows = _candidates(store, query, state, cursor=cursor, page=page, since=since, agent=agent,
                           run_ids=run_ids)
        if rows:
            cursor = rows[-1][0]
            hits.extend(_verify(store, query, [row for row in rows if not _is_pending(row, pending)]))
        if len(rows) < page:
            exhausted = True
            break
        page = min(page * 2, 4096)
    more = len(hits) > limit or not exhausted
    hits = hits[:limit]
    next_cursor = (hits[-1].doc_id or _FIRST_INDEXED) if hits and more else None
    return SearchResult(tuple(hits), more and bool(hits), next_cursor, True, _stale_note(store))


# The cursor of a first page that ends among the not-yet-indexed steps: the next page starts at the
# newest index row (the rest of those steps are not shown again; they are indexed within a drive's end).
_FIRST_INDEXED = 2**62


def _is_pending(row: tuple, pending: dict[str, set[int]]) -> bool:
    """An index row of a step that is marked again (its tool results came after): read from the step's rows."""
    _id, run_id, n, part, _body = row
    return part in STEP_PARTS and n in pending.get(run_id, ())


def _scan_pending(store: "StoreHandle", query: Query, pending: dict[str, set[int]], *, since: str | None,
                  agent: str | None, run_ids: list[str] | None) -> list[Hit]:
    """Hits among the steps not yet indexed, matched on their stored rows, newest first."""
    wanted_runs = [run_id for run_id in pending if run_ids is None or run_id in run_ids]
    field = Run._meta.fields.get("agent")
    wanted = {s.value for s in query.statuses}
    hits: list[Hit] = []
    for chunk in chunks(sorted(wanted_runs), 300):
        for run in with_clock(store, Run.select()).where(Run.id.in_(list(chunk))):
            if agent is not None and (getattr(run, field.name) if field is not None else BUILT_IN_AGENT) != agent:
                continue
            status = effective_status(run)
            if wanted and status not in wanted:
                continue
            ns = sorted(pending[run.id])
            steps = list(Step.select(Step.run, Step.n, Step.assistant, Step.tool_results, Step.created_at)
                         .where((Step.run == run.id) & Step.n.in_(ns)))
            rows: list[tuple] = []
            for step in steps:
                final_turn = step.n == run.step_count and is_final_turn(blocks(step.assistant), run.final_text)
                rows.append((0, run.id, step.n, PART_FINAL_TURN if final_turn else PART_TURN, None))
                if step.tool_results is not None:
                    rows.append((0, run.id, step.n, PART_RESULTS, None))
            known = {(run.id, s.n): (s.assistant, s.tool_results, s.created_at) for s in steps}
            for doc in load_docs(store.db, rows, steps=known, tasks={}):
                at = doc.at or run.updated_at
                if since and at < since:
                    continue
                hit = _hit_of(doc, query, status, at)
                if hit is not None:
                    hits.append(hit)
    hits.sort(key=lambda hit: (hit.at, hit.step), reverse=True)
    return hits


def _stale_note(store: "StoreHandle") -> str | None:
    if not store.dialect.search_index_behind(store.db):
        return None
    return ("the search index misses steps written by a Dayflow whose SQLite has no FTS5; "
            "rebuild it with: dayflow search --reindex")


def _resolve_runs(store: "StoreHandle", prefixes: Sequence[str]) -> list[str]:
    found: list[str] = []
    for prefix in prefixes:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = store.db.execute_sql(
            f"SELECT id FROM \"runs\" WHERE id = {store.db.param} OR id LIKE {store.db.param} ESCAPE '\\' "
            "LIMIT 1000", (prefix, escaped + "%")).fetchall()
        found.extend(row[0] for row in rows if row[0].startswith(prefix))
    return sorted(set(found))


def _candidates(store: "StoreHandle", query: Query, state: IndexState, *, cursor: int | None, page: int,
                since: str | None, agent: str | None, run_ids: list[str] | None) -> list[tuple]:
    """Index rows that may hold a hit, newest first (checked against the stored rows afterwards)."""
    db = store.db
    p = db.param
    where: list[str] = []
    params: list[Any] = []
    joins = ""
    key = "d.id"
    base = f'FROM "{DOCS}" d'
    if query.positive:  # the dialect's index finds the rows whose words match, newest first
        base, key, clause, clause_params = store.dialect.search_match(query)
        where.append(clause)
        params += clause_params
    else:  # no word (in:, tool: or run: alone): walk the index rows of the places asked for, newest first
        parts = _parts_holding(allowed_columns(query))
        where.append(f"d.part IN ({', '.join(str(part) for part in parts)})")
    where.append("d.part >= 0")
    if cursor is not None:
        where.append(f"{key} < {p}")
        params.append(cursor)
    if run_ids is not None:
        where.append(f"d.run_id IN ({', '.join([p] * len(run_ids))})")
        params += run_ids
    statuses = _stored_statuses(query)
    agent_clause = _agent_clause(store, agent)
    if statuses or agent_clause or since:
        joins += ' JOIN "runs" r ON r.id = d.run_id'
    if statuses:
        where.append(f"r.status IN ({', '.join([p] * len(statuses))})")
        params += statuses
    if agent_clause:
        where.append(agent_clause[0])
        params += agent_clause[1]
    if query.tools:
        # Steps that called one of the tools (a superset: the stored JSON is checked exactly afterwards).
        patterns = []
        for name in query.tools:
            quoted = json.dumps(name, ensure_ascii=False)
            escaped = quoted.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            patterns.append(f'%"name":{escaped}%')
        likes = " OR ".join([f"t.assistant LIKE {p} ESCAPE '\\'"] * len(patterns))
        where.append(f'd.part IN ({PART_TURN}, {PART_FINAL_TURN}, {PART_RESULTS}) AND EXISTS (SELECT 1 FROM "steps" t '
                     f"WHERE t.run_id = d.run_id AND t.n = d.n AND ({likes}))")
        params += patterns
    if since:
        joins += (' LEFT JOIN "steps" s ON s.run_id = d.run_id AND s.n = d.n '
                  f"AND d.part IN ({PART_TURN}, {PART_FINAL_TURN}, {PART_RESULTS})")
        where.append(f"COALESCE(s.created_at, r.updated_at) >= {p}")
        params.append(since)
    sql = (f"SELECT d.id, d.run_id, d.n, d.part, d.body {base}{joins} WHERE {' AND '.join(where)} "
           f"ORDER BY {key} DESC LIMIT {int(page)}")
    return db.execute_sql(sql, params).fetchall()


def _verify(store: "StoreHandle", query: Query, rows: Sequence[tuple]) -> list[Hit]:
    """The candidates that really match, as hits (the stored rows are the truth; the index only narrows)."""
    docs = load_docs(store.db, rows)
    runs = _runs_by_id(store, sorted({doc.run_id for doc in docs}))
    wanted = {s.value for s in query.statuses}
    hits: list[Hit] = []
    for doc in docs:
        run = runs.get(doc.run_id)
        if run is None:
            continue
        status = effective_status(run)
        if wanted and status not in wanted:
            continue
        hit = _hit_of(doc, query, status, doc.at or run.updated_at)
        if hit is not None:
            hits.append(hit)
    return hits


def _hit_of(doc: Doc, query: Query, status: str, at: str) -> Hit | None:
    columns = allowed_columns(query)
    places = [p for p in doc.places if p.column in columns]
    if query.tools:
        if doc.part not in STEP_PARTS:
            return None
        places = [p for p in places if p.tool in query.tools]
    measured = [PlaceWords.of(p) for p in places]
    if not measured or not place_matches(measured, query.terms):
        return None
    best = best_place(measured, query.terms)
    if best is None:  # no positive term (in:, tool: or run: alone): the first place stands for the step
        chosen, groups = measured[0], []
    else:
        chosen, groups = best
    others = tuple((pw.place.column, pw.place.tool) for pw in measured
                   if pw is not chosen and any(pw.spans(t) for t in query.positive))
    held = sum(1 for term in query.positive if chosen.spans(term))
    return Hit(doc.run_id, doc.n, chosen.place.column, chosen.place.tool, snippet(chosen.place.text, groups),
               status, at, doc.doc_id, others, held)


def _runs_by_id(store: "StoreHandle", run_ids: Sequence[str]) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    for chunk in chunks(list(run_ids), 300):
        columns = [f for f in Run._meta.sorted_fields if f.name != "final_text"]
        for run in with_clock(store, Run.select(*columns)).where(Run.id.in_(list(chunk))):
            runs[run.id] = run
    return runs


# -- without an index: scan ---------------------------------------------------------------------------


def _scan(store: "StoreHandle", query: Query, *, limit: int, since: str | None, agent: str | None,
          run_ids: list[str] | None) -> tuple[list[Hit], bool]:
    """Every run and step read and matched in Python, newest run first: the same answers, slowly."""
    agent_clause = _agent_clause(store, agent)
    if agent_clause is not None and agent_clause[0] == "1 = 0":
        return [], False
    runs = with_clock(store, Run.select()).order_by(Run.created_at.desc(), Run.id.desc())
    if run_ids is not None:
        runs = runs.where(Run.id.in_(run_ids))
    if query.statuses:
        runs = runs.where(Run.status.in_(_stored_statuses(query)))
    wanted = {s.value for s in query.statuses}
    hits: list[Hit] = []
    for run in runs.iterator():
        status = effective_status(run)
        if wanted and status not in wanted:
            continue
        steps = list(Step.select(Step.run, Step.n, Step.assistant, Step.tool_results, Step.created_at)
                     .where(Step.run == run.id).order_by(Step.n))
        rows: list[tuple] = [(0, run.id, 0, PART_TASK, None)]
        final_indexed = False
        for step in steps:
            assistant = blocks(step.assistant)
            final_turn = step.n == steps[-1].n and is_final_turn(assistant, run.final_text)
            final_indexed = final_indexed or final_turn
            rows.append((0, run.id, step.n, PART_FINAL_TURN if final_turn else PART_TURN, None))
            if step.tool_results is not None:
                rows.append((0, run.id, step.n, PART_RESULTS, None))
        if run.final_text and not final_indexed:
            rows.append((0, run.id, run.step_count, PART_FINAL, run.final_text))
        if run.error:
            rows.append((0, run.id, run.step_count, PART_ERROR, run.error))
        known = {(run.id, s.n): (s.assistant, s.tool_results, s.created_at) for s in steps}
        for doc in reversed(load_docs(store.db, rows, steps=known, tasks={run.id: run.user_msg})):
            at = doc.at or run.updated_at
            if since and at < since:
                continue
            hit = _hit_of(doc, query, status, at)
            if hit is not None:
                hits.append(hit)
                if len(hits) > limit:
                    return hits[:limit], True
    return hits, False
