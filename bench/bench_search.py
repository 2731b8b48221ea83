"""12. Search: query time against a LIKE scan of the same rows, and what the index costs per step.

- **Queries**: 100,000 runs x 10 steps (1,000,000 steps) of generated agent
  work with a varied vocabulary (40,000 made-up words drawn Zipf-like, so a
  few are everywhere and most are rare): a model text per step, a tool call
  with arguments, a JSON tool result with a few items, a final text at the
  last step, some failed tool results. ``store.search`` (the whole path the
  CLI takes: the index, then every candidate checked against its stored row
  and a snippet cut, 50 hits newest first) against ``LIKE '%word%'`` over the
  step rows (``ILIKE`` on PostgreSQL), newest first, 50 rows: the same
  question asked without an index. Interleaved rounds, medians.
- **Index cost**: the same generated steps committed one by one through the
  real commit paths (``append_step`` then ``set_tool_results``, lease-checked)
  into a database with the index and one without it (its search tables
  dropped: the same code, nothing to index), alternating step by step; then
  the bytes each database holds per step. Also the bytes per step of the
  1,000,000-step databases before and after the index was built.

``python -m bench.bench_search`` prints the table (``--quick``: 20,000 runs).
The databases take a few minutes to build; ``DAYFLOW_BENCH_SEARCH_KEEP=DIR``
keeps (and reuses) them between runs. PostgreSQL as in item 7.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, scale, interleaved, median, ms, size, workdir  # noqa: E402

RUNS = 100_000
STEPS_PER_RUN = 10
SEED = 13
TOOLS = ("web_search", "read_file", "query_db", "send_mail", "create_ticket", "fetch_page")
BASE_TIME = 1_780_000_000  # 2026-05-28, seconds since the epoch


# -- the generated workload ---------------------------------------------------------------------------


def vocabulary(n: int = 40_000, seed: int = SEED) -> list[str]:
    """``n`` made-up words (letters only, 2-4 syllables), no two alike."""
    rng = random.Random(seed)
    onsets = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br",
              "ch", "cl", "dr", "fl", "gr", "pl", "qu", "sh", "st", "th", "tr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
    codas = ["", "", "", "n", "r", "s", "t", "l", "m", "x"]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        word = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                       for _ in range(rng.choice((2, 2, 3, 3, 4))))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class Workload:
    """Deterministic agent steps over the vocabulary; ``rank(word)`` says how common a word is."""

    def __init__(self, seed: int = SEED) -> None:
        self.words = vocabulary(seed=seed)
        self.rng = random.Random(seed + 1)
        weights = [1.0 / (rank + 1) ** 1.05 for rank in range(len(self.words))]
        # A pool of Zipf draws read at random offsets: drawing word by word would dominate the build.
        self.pool = self.rng.choices(self.words, weights=weights, k=3_000_000)

    def text(self, count: int) -> str:
        start = self.rng.randrange(0, len(self.pool) - count)
        return " ".join(self.pool[start:start + count])

    def step(self, run: int, n: int, last: bool) -> tuple[list[dict], list[dict] | None, str | None]:
        """(assistant blocks, tool results or None, final text or None) of step ``n`` of run ``run``."""
        rng = self.rng
        if last:
            final = self.text(rng.randint(40, 80)).capitalize() + "."
            return [{"type": "text", "text": final}], None, final
        tool = TOOLS[(run + n) % len(TOOLS)]
        tool_id = f"toolu_{run:06d}{n:02d}"
        args = ({"query": self.text(rng.randint(2, 5)), "limit": rng.choice((5, 10, 20))} if tool != "read_file"
                else {"path": f"docs/{self.text(1)}/{self.text(1)}.md"})
        assistant = [{"type": "text", "text": self.text(rng.randint(10, 30)).capitalize() + "."},
                     {"type": "tool_use", "id": tool_id, "name": tool, "input": args}]
        if rng.random() < 0.05:
            content = json.dumps({"ok": False, "error": {"code": "upstream_failed", "message": self.text(8)}})
            return assistant, [{"type": "tool_result", "tool_use_id": tool_id, "content": content,
                                "is_error": True}], None
        items = [{"id": f"x-{run}-{n}-{k}", "title": self.text(rng.randint(3, 7)),
                  "summary": self.text(rng.randint(8, 25)), "score": round(rng.random(), 3)}
                 for k in range(rng.randint(2, 5))]
        content = json.dumps({"ok": True, "count": len(items), "items": items}, ensure_ascii=False)
        return assistant, [{"type": "tool_result", "tool_use_id": tool_id, "content": content}], None


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


def _rows(workload: Workload, runs: int) -> Iterator[tuple[tuple, list[tuple]]]:
    """(run row, step rows) per run, oldest first, as the store would have written them."""
    dumps = lambda value: json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    for r in range(runs):
        at = BASE_TIME + r * 60
        run_id = f"{r:06x}{random.Random(r).getrandbits(24):06x}"
        steps = []
        final = None
        for n in range(1, STEPS_PER_RUN + 1):
            assistant, results, final_text = workload.step(r, n, n == STEPS_PER_RUN)
            final = final_text or final
            steps.append((run_id, n, "end_turn" if final_text else "tool_use", dumps(assistant),
                          dumps(results) if results is not None else None, 900, 60, _iso(at + n * 2)))
        task = workload.text(12).capitalize() + "."
        yield (run_id, task, "done", final, STEPS_PER_RUN, _iso(at), _iso(at + STEPS_PER_RUN * 2)), steps


_RUN_COLUMNS = "id, user_msg, status, final_text, step_count, created_at, updated_at, model, max_steps, " \
               "input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, attempts"
_STEP_COLUMNS = "run_id, n, stop_reason, assistant, tool_results, input_tokens, output_tokens, created_at, " \
                "cache_creation_input_tokens, cache_read_input_tokens"


def build(store, runs: int, say: Callable[[str], None]) -> dict:
    """Fill ``store`` with ``runs`` generated runs (rows written directly, no index), then build the index
    the way the migration does. Returns the sizes before and after and the time the index build took."""
    from dayflow_tui.store.dialect.sqlite import FTS
    from dayflow_tui.store.search import backfill
    from dayflow_tui.store.search.docs import DOCS
    from dayflow_tui.terminal_progress import ProgressBar

    workload = Workload()
    db = store.db
    started = time.perf_counter()
    with store.write_transaction():
        db.execute_sql(f'DROP TABLE IF EXISTS "{FTS}"')
        db.execute_sql(f'DROP TABLE IF EXISTS "{DOCS}"')
    store._search_state = None
    if store.dialect.name == "postgres":
        raw = db.connection()
        batch_runs: list[tuple] = []
        batch_steps: list[tuple] = []

        def flush() -> None:
            with raw.cursor() as cur:
                with cur.copy(f"COPY runs ({_RUN_COLUMNS}) FROM STDIN") as copy:
                    for row in batch_runs:
                        copy.write_row((*row, "offline", 12, 0, 0, 0, 0, 0))
                with cur.copy(f"COPY steps ({_STEP_COLUMNS}) FROM STDIN") as copy:
                    for row in batch_steps:
                        copy.write_row((*row, 0, 0))
            raw.commit()
            batch_runs.clear()
            batch_steps.clear()
    else:
        batch_runs, batch_steps = [], []

        def flush() -> None:
            with store.write_transaction():
                cursor = db.cursor()
                cursor.executemany(f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES ({', '.join(['?'] * 14)})",
                                   [(*row, "offline", 12, 0, 0, 0, 0, 0) for row in batch_runs])
                cursor.executemany(f"INSERT INTO steps ({_STEP_COLUMNS}) VALUES ({', '.join(['?'] * 10)})",
                                   [(*row, 0, 0) for row in batch_steps])
            batch_runs.clear()
            batch_steps.clear()

    for i, (run_row, step_rows) in enumerate(_rows(workload, runs)):
        batch_runs.append(run_row)
        batch_steps.extend(step_rows)
        if len(batch_runs) >= 2000:
            flush()
            if (i + 1) % 20_000 == 0:
                say(f"  {i + 1:,} runs written")
    flush()
    rows_s = time.perf_counter() - started
    before = _db_size(store)
    say(f"  rows written in {rows_s:.0f} s ({size(before)}); building the index")
    started = time.perf_counter()
    with store.write_transaction(), ProgressBar.for_stderr("  indexing") as bar:
        store.dialect.create_search_tables(db)
        store._search_state = None
        written = backfill.fill(store, bar)
    index_s = time.perf_counter() - started
    after = _db_size(store)
    say(f"  index built in {index_s:.0f} s ({written:,} places; {size(after)})")
    return {"before": before, "after": after, "index_s": index_s, "steps": runs * STEPS_PER_RUN, "written": written}


def _db_size(store) -> int:
    if store.dialect.name == "postgres":
        return store.db.execute_sql(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = current_schema() "
            "AND c.relkind IN ('r', 'm')").fetchone()[0]
    store.db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    path = Path(store.label)
    return path.stat().st_size + (Path(f"{path}-wal").stat().st_size if Path(f"{path}-wal").exists() else 0)


# -- queries --------------------------------------------------------------------------------------------


def queries(words: list[str]) -> list[tuple[str, str, list[str], str]]:
    """(name, our query, words the LIKE scan must all find, note): from common to rare."""
    w = words
    return [
        ("two words (the target)", f"{w[300]} {w[1500]}", [w[300], w[1500]], "ranks 300 and 1,500 of 40,000"),
        ("one common word", w[5], [w[5]], "rank 5: in most steps"),
        ("one rare word", w[25_000], [w[25_000]], "rank 25,000"),
        ("a phrase", f'"{w[40]} {w[41]}"', [f"{w[40]} {w[41]}"], "ranks 40, 41 next to each other"),
        ("word -word", f"{w[300]} -{w[2]}", [w[300]], "LIKE side: the word alone"),
        ("in:result word", f"in:result {w[1500]}", [w[1500]], "LIKE side: every column"),
        ("prefix*", f"{w[800][:4]}*", [w[800][:4]], "LIKE side: the same letters anywhere"),
    ]


def _like_sql(store, needles: int) -> str:
    op = "ILIKE" if store.dialect.name == "postgres" else "LIKE"
    p = store.db.param
    one = f"(assistant {op} {p} OR tool_results {op} {p})"
    return (f"SELECT run_id, n FROM steps WHERE {' AND '.join([one] * needles)} "
            f"ORDER BY created_at DESC LIMIT 50")


def query_rows(store, label: str, rounds: int) -> list[Row]:
    from dayflow_tui.search.query import parse

    rows: list[Row] = []
    for name, text, needles, note in queries(vocabulary()):
        query = parse(text)
        like = _like_sql(store, len(needles))
        params = [value for needle in needles for value in (f"%{needle}%", f"%{needle}%")]
        found: dict[str, int] = {}

        def ours() -> None:
            found["ours"] = len(store.search(query, limit=50).hits)

        def scan() -> None:
            found["scan"] = len(store.db.execute_sql(like, params).fetchall())

        ours_t, scan_t = interleaved(ours, scan, rounds=rounds, warmup=1)
        ratio = median(ours_t) / median(scan_t)
        target = name.startswith("two words")
        met = (ratio <= 0.05 and median(ours_t) < 0.1) if target else None
        rows.append(Row(f"13 search {label}", f"{name}: `{text}`, 50 newest hits, median",
                        ms(median(ours_t)), f"LIKE scan {ms(median(scan_t))}", ratio,
                        "<= 0.05x and < 100 ms" if target else "", met,
                        f"{note}; {found['ours']} hits (scan: {found['scan']} rows)"))
    return rows


def trigram_rows(store, label: str, rounds: int) -> list[Row]:
    """pg_trgm, the alternative for PostgreSQL: a GIN trigram index over the step rows' text, answering
    ``ILIKE '%word%'`` (substrings, the way grep matches), measured on the same rows."""
    db = store.db
    try:
        db.execute_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except Exception as exc:  # not installed, or not allowed here
        db.rollback()
        return [Row(f"13 search {label}", f"pg_trgm alternative: skipped ({str(exc).splitlines()[0]})", "")]
    text = "(assistant || ' ' || coalesce(tool_results, ''))"
    started = time.perf_counter()
    db.execute_sql("SET maintenance_work_mem = '256MB'")
    db.execute_sql(f"CREATE INDEX bench_steps_trgm ON steps USING gin ({text} gin_trgm_ops)")
    built_s = time.perf_counter() - started
    index_bytes = db.execute_sql("SELECT pg_relation_size('bench_steps_trgm')").fetchone()[0]
    steps_bytes = db.execute_sql("SELECT pg_total_relation_size('steps') - pg_relation_size('bench_steps_trgm')"
                                 ).fetchone()[0]
    ours_bytes = db.execute_sql("SELECT pg_total_relation_size('search_docs')").fetchone()[0]
    count = db.execute_sql("SELECT count(*) FROM steps").fetchone()[0]
    words = vocabulary()
    name, query_text, needles, _note = queries(words)[0]
    from dayflow_tui.search.query import parse

    query = parse(query_text)
    like = (f"SELECT run_id, n FROM steps WHERE {' AND '.join([f'{text} ILIKE %s'] * len(needles))} "
            "ORDER BY created_at DESC LIMIT 50")
    ours_t, trgm_t = interleaved(lambda: store.search(query, limit=50),
                                 lambda: db.execute_sql(like, [f"%{n}%" for n in needles]).fetchall(),
                                 rounds=rounds, warmup=1)
    db.execute_sql("DROP INDEX bench_steps_trgm")
    return [
        Row(f"13 search {label}", f"pg_trgm GIN index over the steps' text: {name} `{query_text}`, median",
            ms(median(trgm_t)), f"ours (tsvector) {ms(median(ours_t))}", median(trgm_t) / median(ours_t), "", None,
            "ILIKE both words through the trigram index, newest first, 50 rows"),
        Row(f"13 search {label}", "pg_trgm index bytes per step, vs our index (tsvector rows + GIN)",
            f"{size(index_bytes / count)}/step", f"ours {size(ours_bytes / count)}/step", index_bytes / ours_bytes,
            "", None, f"the steps themselves {size(steps_bytes / count)}/step; trigram index built in {built_s:.0f} s"),
    ]


# -- what the index costs ---------------------------------------------------------------------------


def commit_cost(url_with: str, url_without: str, label: str, rounds: int) -> list[Row]:
    from dayflow_tui.store import StepRecord, open_store
    from dayflow_tui.store.dialect.sqlite import FTS
    from dayflow_tui.store.search import DOCS

    workload = Workload(seed=SEED + 7)
    stores = {}
    for key, url in (("with", url_with), ("without", url_without)):
        store = open_store(url)
        run, lease = store.create_claimed_run("bench", model="offline", max_steps=10**6)
        stores[key] = (store, run, lease)
    store = stores["without"][0]
    with store.write_transaction():
        store.db.execute_sql(f'DROP TABLE IF EXISTS "{FTS}"')  # SQLite's; none on PostgreSQL
        store.db.execute_sql(f'DROP TABLE IF EXISTS "{DOCS}"')
    store._search_state = None
    counters = {"with": 0, "without": 0}
    steps = [workload.step(7, n, False) for n in range(1, rounds + 60)]

    def commit(key: str) -> Callable[[], None]:
        store, run, lease = stores[key]

        def one() -> None:
            counters[key] += 1
            n = counters[key]
            assistant, results, _final = steps[n - 1]
            store.append_step(run.id, StepRecord(n=n, stop_reason="tool_use", assistant=assistant,
                                                 input_tokens=900, output_tokens=60, model="offline"), lease=lease)
            store.set_tool_results(run.id, n, results, lease=lease)
        return one

    with_t, without_t = interleaved(commit("with"), commit("without"), rounds=rounds, warmup=20)
    sizes = {}
    for key, (store, run, lease) in stores.items():
        store.release(lease)
        sizes[key] = _db_size(store) / counters[key]
        store.close()
    ratio = median(with_t) / median(without_t)
    bytes_ratio = sizes["with"] / sizes["without"]
    return [
        Row(f"13 search {label}", "step commit with the index (append_step + set_tool_results), median",
            ms(median(with_t)), f"without the index {ms(median(without_t))}", ratio, "<= 1.15x", ratio <= 1.15,
            f"{(median(with_t) - median(without_t)) * 1e6:+.0f} us per step; {rounds} steps each, alternating"),
        Row(f"13 search {label}", f"database bytes per step after {counters['with']:,} steps committed one by one",
            f"{size(sizes['with'])}/step", f"without the index {size(sizes['without'])}/step", bytes_ratio,
            "<= 1.5x", bytes_ratio <= 1.5, "a tiny database: fixed costs (pages, the sample tasks) weigh more"),
    ]


# -- the whole item -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _sqlite_target(keep: str | None, name: str) -> Iterator[tuple[str, bool]]:
    if keep:
        path = Path(keep) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        yield str(path), path.exists()
        return
    with workdir("search") as tmp:
        yield str(tmp / name), False


def _big(label: str, target: str, existed: bool, runs: int, rounds: int, say) -> list[Row]:
    from dayflow_tui.store import open_store

    store = open_store(target)
    try:
        built = None
        if not existed or store.db.execute_sql("SELECT count(*) FROM steps").fetchone()[0] != runs * STEPS_PER_RUN:
            say(f"{label}: writing {runs:,} runs x {STEPS_PER_RUN} steps")
            built = build(store, runs, say)
        say(f"{label}: queries")
        rows = query_rows(store, label, rounds)
        if store.dialect.name == "postgres":
            say(f"{label}: the pg_trgm alternative")
            rows += trigram_rows(store, label, rounds)
        if built:
            ratio = built["after"] / built["before"]
            rows.append(Row(f"13 search {label}", f"database bytes per step, {built['steps']:,} steps, index "
                            "built by the migration", f"{size(built['after'] / built['steps'])}/step",
                            f"without the index {size(built['before'] / built['steps'])}/step", ratio, "<= 1.5x",
                            ratio <= 1.5, f"index built in {built['index_s']:.0f} s "
                            f"({built['steps'] / built['index_s']:,.0f} steps/s)"))
        return rows
    finally:
        store.close()


def run(quick: bool = False, backends: tuple[str, ...] = ("sqlite", "postgres")) -> list[Row]:
    from bench.bench_postgres import pg_schema

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    runs = scale(20_000 if quick else RUNS, 300)
    rounds = scale(3 if quick else 7, 1)
    keep = os.environ.get("DAYFLOW_BENCH_SEARCH_KEEP")
    rows: list[Row] = []
    if "sqlite" in backends:
        with _sqlite_target(keep, f"search-{runs}.db") as (path, existed):
            rows += _big("SQLite", path, existed, runs, rounds, say)
        with workdir("search-commit") as tmp:
            rows += commit_cost(str(tmp / "with.db"), str(tmp / "without.db"), "SQLite", scale(150 if quick else 500, 10))
    if "postgres" not in backends:
        return rows
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return rows + [Row("13 search PostgreSQL", "skipped: psycopg is not installed", "")]
    try:
        with pg_schema() as url:
            rows += _big("PostgreSQL", url, False, runs, rounds, say)
        with pg_schema() as with_url, pg_schema() as without_url:
            rows += commit_cost(with_url, without_url, "PostgreSQL", scale(100 if quick else 400, 10))
    except Exception as exc:  # no server: the SQLite half still stands
        if "connect" not in str(exc).lower():
            raise
        rows.append(Row("13 search PostgreSQL", f"skipped: {str(exc).splitlines()[0]}", ""))
    return rows


if __name__ == "__main__":
    import argparse

    from bench.run_all import table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 runs and fewer rounds (a smoke run)")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), help="only this backend")
    args = parser.parse_args()
    print(table(run(quick=args.quick, backends=(args.backend,) if args.backend else ("sqlite", "postgres"))))
