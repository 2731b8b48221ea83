"""Looking after the database and the prices: ``migrate``, ``prune``, ``vacuum``, ``prices``."""

from __future__ import annotations

import argparse
import os
import sys

from ...safe_text import printable, printable_json
from ..opening import open_db


def cmd_migrate(args: argparse.Namespace) -> int:
    from ...store import SCHEMA_VERSION

    store = open_db(args, create=False)
    print(f"{store.label}: schema {SCHEMA_VERSION}, up to date", file=sys.stderr)
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from ...store.retention import parse_statuses, prunable_runs, prune
    from ...store.transfer import new_file, write_jsonl
    from ...views.time import age_words

    statuses = parse_statuses(args.status)
    store = open_db(args, create=False)
    candidates = prunable_runs(store, older_than=args.older_than, statuses=statuses)
    which = "/".join(s.value for s in statuses)
    if not candidates:
        print(f"nothing to prune: no {which} run was last changed more than {age_words(args.older_than)} ago", file=sys.stderr)
        return 0

    def line(verb: str, c) -> str:
        return (f"{verb} {printable(c.id)}  {printable(c.status):<6}  last change {printable(c.updated_at[:19])}  "
                f"steps={c.steps}  tasks={c.tasks}  {c.row_bytes:,} bytes")

    if args.dry_run:
        for c in candidates:
            print(line("would remove", c))
        total = sum(c.row_bytes for c in candidates)
        archive = f"; --archive would first write them to {printable(args.archive)}" if args.archive else ""
        print(f"dry run: {len(candidates)} run(s), {sum(c.steps for c in candidates)} step(s), {total:,} bytes of "
              f"stored text would go; {sum(c.tasks for c in candidates)} task(s) would stay{archive}")
        return 0
    if args.archive:
        with new_file(args.archive, "dayflow prune --archive") as out:
            write_jsonl(store, [c.id for c in candidates], out)
    report = prune(store, candidates)
    for c in report.removed:
        print(line("removed", c))
    for run_id in report.changed:
        print(f"kept {printable(run_id)}: it changed after it was selected (resumed?)")
    summary = (f"removed {len(report.removed)} run(s), {report.steps} step(s), {report.resumes} resume record(s): "
               f"{report.row_bytes:,} bytes of stored text; {report.tasks_unlinked} task(s) kept")
    if args.archive:
        summary += f"; archived in {printable(args.archive)}"
    print(summary)
    if report.freed_bytes is not None:
        print(f"{report.freed_bytes:,} bytes of the database file are now free pages, reused by new runs; "
              "`dayflow vacuum` gives them back to the disk")
    else:
        print("PostgreSQL reuses the space for new rows; `dayflow vacuum` runs VACUUM (ANALYZE) now")
    return 0


def cmd_vacuum(args: argparse.Namespace) -> int:
    from ...store.retention import vacuum

    store = open_db(args, create=False)
    report = vacuum(store)
    before, after = report.before.total, report.after.total
    if not report.shrinks_files:
        print(f"VACUUM (ANALYZE) done in {report.seconds:.1f} s: Dayflow's tables hold {after:,} bytes; their free "
              "space is reused by new rows (VACUUM FULL would shrink the files but locks the tables: not run)")
        return 0
    print(f"vacuumed {printable(store.label)} in {report.seconds:.1f} s: {before:,} -> {after:,} bytes on disk "
          f"({max(before - after, 0):,} given back)")
    if report.converted:
        print("this first vacuum rewrote the file once to switch it to incremental vacuuming; later ones free "
              "space a megabyte at a time")
    if not report.wal_truncated:
        print("a reader still held the write-ahead log: the -wal file shrinks at the next checkpoint")
    return 0


def cmd_prices(args: argparse.Namespace) -> int:
    from ...config import settings
    from ...money import rates as pricing

    source = pricing.price_source()
    overrides = [pricing.override_prices(name, name, rates) for name, rates in sorted(settings.current().prices.items())]
    try:
        library = pricing.library_models()
    except ImportError as exc:
        library = []
        print(f"dayflow: {exc}", file=sys.stderr)
    today = pricing.day_of(None)
    builtin = [] if any(p.model == pricing.OFFLINE_MODEL for p in overrides) else \
        [("built in", pricing.offline_prices())]
    rows = [("settings file", p) for p in overrides] + builtin + [(pricing.LIBRARY, p) for _i, _n, p in library]

    def with_hour(found: dict) -> dict:
        # The library may lack the 1-hour write rate: Anthropic bills it at twice the input rate.
        if "cache_write_1h" not in found and "cache_write" in found and "input" in found:
            found = {**found, "cache_write_1h": pricing.Rate(found["input"].base * pricing.CACHE_WRITE_1H_FACTOR)}
        return found

    def rates(prices) -> dict:
        found = with_hour(prices.rates_on(today))
        return {key: str(found[key].base) for key in pricing.PRICE_KEYS if key in found} | (
            {"web_search_per_1000": str(pricing.WEB_SEARCH_USD_PER_1000 if prices.model != pricing.OFFLINE_MODEL
                                        else pricing.ZERO)}) | (
            {"tiers": {key: [[start, str(price)] for start, price in found[key].tiers]
                       for key in pricing.PRICE_KEYS if key in found and found[key].tiers}}
            if any(r.tiers for r in found.values()) else {})

    if args.json:
        print(printable_json({"source": source.line(), "library": source.library, "version": source.version,
                              "released": source.released if source.version == source.pinned else None,
                              "config_file": str(settings.current().config_file or settings.config_path(os.environ)),
                              "models": [{"model": p.model, "name": p.name, "from": origin, **rates(p)}
                                         for origin, p in rows]}))
        return 0
    print(f"prices: {source.line()}")
    print(f"overrides: [prices.\"MODEL\"] in {settings.current().config_file or settings.config_path(os.environ)}"
          " (dollars per million tokens: input, output, cache_write, cache_read)")
    print(f"rates today ({today}), dollars per million tokens:")
    print(f"  {'model':<28} {'input':>8} {'5m write':>9} {'1h write':>9} {'read':>8} {'output':>8}  from")
    for origin, prices in rows:
        found = with_hour(prices.rates_on(today))

        def cell(key: str) -> str:
            rate = found.get(key)
            return "-" if rate is None else format(rate.base.normalize(), "f") + ("+" if rate.tiers else "")

        print(f"  {printable(prices.model):<28} {cell('input'):>8} {cell('cache_write'):>9} "
              f"{cell('cache_write_1h'):>9} {cell('cache_read'):>8} {cell('output'):>8}  {origin}")
    if any(r.tiers for _o, p in rows for r in p.rates_on(today).values()):
        print("  + a higher rate applies to every token of a request whose input passes the model's tier "
              "(see --json)")
    print(f"web search: ${pricing.WEB_SEARCH_USD_PER_1000} per 1,000 searches on top of tokens (Anthropic's "
          "pricing page; the offline model never searches)")
    print("any other model: price unknown")
    return 0
