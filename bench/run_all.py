"""Run every benchmark and print one table: ``python -m bench`` (from the repository root).

``--quick`` takes fewer samples (not for publishing); ``--smoke`` runs every item at a tiny size in
seconds (does it still run? no ratio means anything; tests/bench runs it);
``--only 1,3`` runs some items; ``--markdown FILE`` also writes the table as
Markdown with the machine it ran on.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sqlite3
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # ``python bench/run_all.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import Row  # noqa: E402

# item number -> (module, title). Optional modules (another developer's, or a
# backend that is not there) are skipped with a note, never a failure of the rest.
ITEMS = {
    "1": ("bench.bench_commit", "per-step commit"),
    "2": ("bench.bench_growth", "growth vs LangGraph"),
    "3": ("bench.bench_resume", "resume"),
    "4": ("bench.bench_startup", "start-up"),
    "5": ("bench.bench_dashboard", "dashboard"),
    "6": ("bench.bench_memory", "memory"),
    "7": ("bench.bench_postgres", "PostgreSQL"),
    "8": ("bench.bench_compaction", "compaction"),
    "9": ("bench.bench_bytes", "bytes per step"),
    "10": ("bench.bench_step", "full step"),
    "11": ("bench.bench_chaos", "calls per step under chaos"),
    "12": ("bench.bench_travel", "export, import, vacuum"),
    "13": ("bench.bench_search", "search"),
    "14": ("bench.bench_scale", "run list at 1M runs"),
    "15": ("bench.bench_live", "a live 5,000-step run on screen"),
    "16": ("bench.bench_caching", "prompt caching dollars"),
    "17": ("bench.bench_fleet", "PostgreSQL fleet: schema setting, LISTEN/NOTIFY"),
    "18": ("bench.bench_mcp", "MCP call over HTTP vs stdio"),
    "19": ("bench.bench_workers", "16 worker processes on a private PostgreSQL cluster"),
}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        if names:
            cpu = f"{names[0]} x{len(names)}"
    except OSError:
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = f", load {os.getloadavg()[0]:.1f} at start"
    return (f"{cpu}{load}; Python {platform.python_version()}; SQLite {sqlite3.sqlite_version}; "
            f"{platform.system()} {platform.release()}")


def table(rows: list[Row]) -> str:
    header = ["item", "measure", "ours", "baseline (same run)", "ratio", "target", "met", "note"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r.item, r.measure, r.ours, r.baseline, r.ratio_text(), r.target, r.met_text(), r.note]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (not for publishing)")
    parser.add_argument("--smoke", action="store_true",
                        help="every item at a tiny size, in seconds: does it still run (no ratio means anything)")
    parser.add_argument("--only", help="comma-separated item numbers, e.g. 1,3")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else list(ITEMS)
    unknown = [c for c in chosen if c not in ITEMS]
    if unknown:
        parser.error(f"unknown item(s) {', '.join(unknown)}; choose from {', '.join(ITEMS)}")

    if args.smoke:
        # Before any item is imported: their sizes are module constants read through bench.common.scale.
        os.environ["DAYFLOW_BENCH_SMOKE"] = "1"
        common.SMOKE = True
    quick = args.quick or args.smoke
    os.environ.pop("ANTHROPIC_API_KEY", None)  # benchmarks never spend money
    os.environ["DAYFLOW_OFFLINE_DELAY"] = "0"
    about = machine()
    print(f"machine: {about}", file=sys.stderr)
    rows: list[Row] = []
    failed = 0
    for key in chosen:
        module_name, title = ITEMS[key]
        started = time.perf_counter()
        print(f"[{key}] {title} ...", file=sys.stderr, flush=True)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (exc.name == module_name or not exc.name.startswith("bench")):
                rows.append(Row(f"{key} {title}", "skipped", "", note=f"needs {exc.name}"))
                print(f"[{key}] skipped: needs {exc.name}", file=sys.stderr)
                continue
            raise
        try:
            found = module.run(quick=quick)
        except Exception as exc:
            if isinstance(exc, ModuleNotFoundError) and exc.name and not exc.name.startswith(("bench", "dayflow_tui")):
                # An optional package the item imports only when it runs (LangGraph, the Agents SDK).
                rows.append(Row(f"{key} {title}", "skipped", "", note=f"needs {exc.name}"))
                print(f"[{key}] skipped: needs {exc.name}", file=sys.stderr)
                continue
            failed += 1  # one broken item must not hide the others' numbers
            traceback.print_exc()
            rows.append(Row(f"{key} {title}", "FAILED", "", note=f"{type(exc).__name__}: {exc}"[:200]))
            continue
        rows.extend(found)
        print(f"[{key}] done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        if args.markdown:  # the items so far: a long run stopped part-way keeps what it measured
            Path(args.markdown).write_text(f"Machine: {about}\n\n{table(rows)}\n", encoding="utf-8")
    text = table(rows)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(f"Machine: {about}\n\n{text}\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
