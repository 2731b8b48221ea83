"""``dayflow search``: find text in every run (and ``--reindex``)."""

from __future__ import annotations

import argparse
import sys

from ...config.errors import UsageError
from ...safe_text import printable, printable_json
from ..opening import open_db
from ..parser import QUERY_WORD


def cmd_search(args: argparse.Namespace) -> int:
    from ...search.lines import hit_json, hit_plain, hit_text
    from ...search.query import check_searchable, parse, parse_since, parse_statuses
    from ...views.search import search_query

    if args.reindex:
        if args.query:
            raise UsageError("--reindex takes no query: dayflow search --reindex [--db PATH|URL]")
        from ...terminal_progress import ProgressBar

        store = open_db(args, create=False)
        with ProgressBar.for_stderr("rebuilding the search index") as bar:
            written = store.rebuild_search_index(on_progress=bar)
        print(f"search index rebuilt: {written:,} places indexed in {store.label}", file=sys.stderr)
        return 0
    # Everything the user typed is checked before the database is opened.
    words = " ".join(word.removeprefix(QUERY_WORD) for word in args.query)
    query = parse(words).with_filters(statuses=parse_statuses(args.status or ""), tools=tuple(args.tool))
    check_searchable(query)
    since = parse_since(args.since) if args.since else None
    store = open_db(args, create=False, upgrade=False)
    found = search_query(store, query, limit=args.limit, since=since, agent=args.agent)
    if found.note:
        print(f"dayflow: note: {printable(found.note)}", file=sys.stderr)
    if args.json:
        print(printable_json([{**hit_json(hit), "run_title": found.titles.get(hit.run_id, "")}
                              for hit in found.hits]))
    elif sys.stdout.isatty():
        from rich.console import Console
        from rich.text import Text

        console = Console(highlight=False, markup=False, emoji=False, soft_wrap=False)
        last = None
        for hit in found.hits:
            if hit.run_id != last and found.titles.get(hit.run_id):  # each run named once, by its title
                console.print(Text.assemble(("── ", "dim"), (printable(found.titles[hit.run_id]), "bold")))
            last = hit.run_id
            console.print(hit_text(hit))
    else:
        for hit in found.hits:
            print(hit_plain(hit))
    if not found.hits and query.listing:
        print(f"no {' or '.join(s.value for s in query.statuses)} runs", file=sys.stderr)
    elif not found.hits:
        print(f"no matches for {printable(query.source.strip() or 'the filters given')}", file=sys.stderr)
    elif found.more:
        print(f"showing the newest {len(found.hits)}; there are more (raise --limit or narrow the query)",
              file=sys.stderr)
    return 0
