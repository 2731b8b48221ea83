"""14. The run list at scale: End/G, a status filter and a search on 10, 10,000, 100,000 and 1,000,000 runs.

Each figure is the read model's work for one key (``RunListModel``, what the
dashboard's thread worker runs before the rows are drawn): open the list,
jump to the last run (End/G), filter by a status (``f``), search the task
text (``/``). Every size is measured in its own fresh process, the sizes in
alternation round by round (noise hits them alike), so the peak RSS belongs
to one size; the ratio is against the 10-run database in the same run.
Targets (issue #17): each <= 2x the 10-run case; peak RSS at 1M <= 1.5x.

Fixture databases are written with one ``INSERT ... SELECT`` over a counter
(the store's own ``create_run`` costs ~1.4 ms a run: 25 minutes for 1M), on
the schema the store creates, with a tenth of the runs failed.
``python bench/bench_scale.py`` runs this item alone.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # ``python bench/bench_scale.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, Row, scale, median, ms, quiet_env, size  # noqa: E402

SIZES = scale((10, 10_000, 100_000, 1_000_000), (10, 200))
QUICK_SIZES = scale((10, 10_000, 100_000), (10, 200))
_dir: Path | None = None


def fixture(n_runs: int) -> Path:
    """``n_runs`` finished runs (every tenth failed), one a second, in a database the store created."""
    global _dir
    from dayflow_tui.store import open_store

    if _dir is None:
        kept = os.environ.get("DAYFLOW_BENCH_SCALE_DIR")  # keep the fixtures between runs (1M: ~7 s to write)
        _dir = Path(kept) if kept else Path(tempfile.mkdtemp(prefix="dayflow-bench-scale-"))
        _dir.mkdir(parents=True, exist_ok=True)
        if not kept:
            atexit.register(shutil.rmtree, _dir, True)
    path = _dir / f"runs-{n_runs}.db"
    if path.exists():
        return path
    store = open_store(path)
    store.db.execute_sql("""
        WITH RECURSIVE counter(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM counter WHERE n + 1 < ?)
        INSERT INTO runs (id, user_msg, status, error, input_tokens, output_tokens, cache_creation_tokens,
                          cache_read_tokens, step_count, model, max_steps, attempts, agent, created_at, updated_at)
        SELECT printf('bulk-%07d', n), 'Read my inbox and plan day ' || n,
               CASE WHEN n % 10 = 3 THEN 'failed' ELSE 'done' END,
               CASE WHEN n % 10 = 3 THEN 'model API error ' || n ELSE NULL END,
               1000 + n % 97, 100 + n % 13, 0, 0, 3, 'offline', 20, 0, 'brief',
               strftime('%Y-%m-%dT%H:%M:%f', '2025-01-01', '+' || n || ' seconds') || '000+00:00',
               strftime('%Y-%m-%dT%H:%M:%f', '2025-01-01', '+' || n || ' seconds') || '000+00:00'
        FROM counter""", (n_runs,))
    store.db.execute_sql("ANALYZE")
    store.close()
    return path


def probe(n_runs: int) -> dict:
    """One size, measured in a fresh process (``python -m bench.bench_scale --probe N``)."""
    done = subprocess.run([sys.executable, "-m", "bench.bench_scale", "--probe", str(fixture(n_runs))],
                          cwd=REPO, env=quiet_env(), capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"scale probe {n_runs} failed: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _probe_main(path: str) -> None:
    from bench.dashboard_probe import peak_rss_bytes
    from dayflow_tui.store import open_store
    from dayflow_tui.views.run_list import RunFilter, RunListModel

    store = open_store(path, create=False)
    model = RunListModel(store)
    found: dict = {}

    def timed(name: str, job) -> object:
        started = time.perf_counter()
        result = job()
        found[name] = time.perf_counter() - started
        return result

    window = timed("open", lambda: model.reload(RunFilter()))
    window = timed("end", lambda: model.load_until(window.total - 1) or model.window)
    last = window.row(window.shown_total - 1)
    found["end_ok"] = last is not None and last.id == "bulk-0000000"
    timed("up_page", lambda: model.load_until(window.shown_total - 400))
    filtered = timed("status", lambda: model.reload(RunFilter(status="failed")))
    found["status_ok"] = all(run.status == "failed" for run in filtered.rows[:50])
    timed("status_end", lambda: model.load_until(filtered.total - 1))
    found["rss"] = peak_rss_bytes()
    store.close()
    print(json.dumps(found))


TARGETED = ("end", "status", "status_end")
MEASURES = (("open", "open the list (first page)"), ("end", "End/G: the last run loaded"),
            ("up_page", "PgUp twice from the end"), ("status", "status filter (failed): first page"),
            ("status_end", "status filter, then End/G"))


def _growth(key: str, n: int, results: dict[int, list[dict]]) -> str:
    """How the figure grows past 10,000 runs (flat = 1x): what paging costs beyond one page of rows."""
    if n <= 10_000 or 10_000 not in results:
        return "one page read" if key in ("end", "up_page", "status_end") else ""
    ratio = median([r[key] for r in results[n]]) / median([r[key] for r in results[10_000]])
    return f"{ratio:.2f}x the 10,000-run figure"


def run(quick: bool = False) -> list[Row]:
    sizes = QUICK_SIZES if quick else SIZES
    rounds = scale(3 if quick else 5, 1)
    for n in sizes:
        fixture(n)
    results: dict[int, list[dict]] = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:  # alternating: each round measures every size once
            results[n].append(probe(n))
    base = results[sizes[0]]
    rows: list[Row] = []
    for key, what in MEASURES:
        # With 10 runs End/G and paging read nothing (every run is on the first page): their floor is
        # reading that first page, the work of one page on the smallest database.
        floor_key = "open" if key in ("end", "up_page") else "status" if key == "status_end" else key
        floor = median([r[floor_key] for r in base])
        for n in sizes[1:]:
            ours = median([r[key] for r in results[n]])
            ok = all(r.get("end_ok", True) and r.get("status_ok", True) for r in results[n])
            rows.append(Row("14 scale", f"{what}, {n:,} runs", ms(ours),
                            f"10 runs {ms(floor)}" + ("" if floor_key == key else f" ({floor_key})"),
                            ours / floor if floor else None, "<= 2x" if key in TARGETED else "",
                            (ours <= 2 * floor) if key in TARGETED else None,
                            ("WRONG ROWS; " if not ok else "") + _growth(key, n, results)))
    floor = median([r["rss"] for r in base])
    for n in sizes[1:]:
        ours = median([r["rss"] for r in results[n]])
        rows.append(Row("14 scale", f"peak RSS after all of the above, {n:,} runs", size(ours), f"10 runs {size(floor)}",
                        ours / floor, "<= 1.5x" if n == sizes[-1] else "", (ours <= 1.5 * floor) if n == sizes[-1] else None,
                        ""))
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        _probe_main(sys.argv[2])
    else:
        from bench.run_all import table

        print(table(run(quick="--quick" in sys.argv)))
