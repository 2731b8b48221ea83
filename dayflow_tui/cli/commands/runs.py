"""Commands that read runs: ``runs``, ``show``, ``tasks``, ``spend``; they print what ``views`` reads."""

from __future__ import annotations

import argparse
import sys

from ...config.errors import UsageError
from ...safe_text import one_line, printable, printable_json
from ..opening import open_db, open_for_reading


def cmd_runs(args: argparse.Namespace) -> int:
    from ...views.costs import budget_text, cache_text, cost_text
    from ...views.run_tree import rollup_text
    from ...views.runs import run_json, run_lines, tree_lines, tree_run_json
    from ...views.titles import run_title

    store = open_for_reading(args)
    listing = tree_lines if getattr(args, "tree", False) else run_lines
    lines = listing(store, limit=args.limit, status=args.status, source=args.source)
    if args.json:
        print(printable_json([(tree_run_json if args.tree else run_json)(line) for line in lines]))
        return 0
    if not lines:
        if args.status or args.source:
            print(f"no {' '.join(w for w in (args.status, args.source) if w)} runs", file=sys.stderr)
        else:
            print("no runs yet; start one with: dayflow brief", file=sys.stderr)
    for shown in lines:  # forks under their parents: the same tree as the dashboard's (views.forks)
        r, depth, cost = shown.run, shown.depth, shown.cost
        indent = "  " * (depth - 1) + "└─ " if depth else ""
        line = (f"{indent}{printable(r.id)}  {shown.status:<11}  {printable(r.created_at[:19])}  steps={r.step_count}  "
                f"tokens={r.input_tokens}/{r.output_tokens}  cost={cost_text(cost.total)}  "
                f"cache={cache_text(cost)}  {printable(r.model)}")
        budget = budget_text(r.budget_usd, cost.total)
        if budget:
            line += f"  budget={budget.replace(' ', '')}"
        if r.agent and r.agent != "brief":
            line += f"  agent={printable(r.agent)}"
        if r.priority:
            line += f"  priority={r.priority}"
        if r.cancel_at and r.status != "cancelled":
            line += "  cancel asked"
        imported = (r.source or "dayflow") != "dayflow"
        if imported:
            line += f"  source={printable(r.source)}"
            if r.parent_id:
                line += f"  subagent of {printable(r.parent_id)}" if not depth else "  subagent"
            if r.external_dir:
                line += f"  dir={printable(r.external_dir)}"
        elif r.parent_id and r.parent_call_id:  # a subagent's run: started by its parent's call
            line += f"  subagent of {printable(r.parent_id)}" if not depth else "  subagent"
        elif r.parent_id and not depth:
            line += f"  fork of {printable(r.parent_id)} at step {r.forked_at}"
        elif r.parent_id:
            line += f"  at step {r.forked_at}"
        if shown.rollup is not None:  # runs --tree: the whole tree at its parent (a child failed, one waits)
            line += f"  tree: {rollup_text(shown.rollup)}"
        if r.error and r.status != "done":
            line += f"  {one_line(r.error, 60)}"
        line += f"  · {run_title(r, 100)}"  # what it is: given, or made from the task and the answer
        print(printable(line))  # counts and the status too are whatever a (damaged) row holds
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from ...views.costs import format_usd, usd_number
    from ...views.tasks import task_lines

    store = open_for_reading(args)
    lines = task_lines(store, include_done=args.all)
    if args.json:
        print(printable_json([{"id": t.id, "title": t.title, "due": t.due, "notes": t.notes, "done": t.done,
                               "idempotency_key": t.idempotency_key, "run_id": t.run_id,
                               "run_cost_usd": usd_number(line.run_cost.total) if t.run_id else None}
                              for line in lines for t in (line.task,)]))
        return 0
    for line in lines:
        t = line.task
        mark = "x" if t.done else " "
        due = f"  due {printable(t.due)}" if t.due else ""  # a date when a tool wrote it; a row can hold anything
        origin = f"  (run {printable(t.run_id)}, {format_usd(line.run_cost.total)})" if t.run_id else ""
        print(f"[{mark}] {t.id:>4}  {one_line(t.title, 80)}{due}  key={printable(t.idempotency_key)}{origin}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from ...render import print_transcript
    from ...views.transcript import read_show, show_pages
    from ..pager import paged

    if getattr(args, "follow", False) and (args.raw or args.jsonl):
        raise UsageError("--follow prints the transcript as text; it cannot be combined with --raw or --jsonl")
    store = open_db(args, create=False, upgrade=False)
    if args.raw or args.jsonl:
        return _show_json(store, store.get_run(args.run_id), lines=args.jsonl)
    shown = read_show(store, args.run_id)
    if args.json:
        return _show_document(store, shown)
    if getattr(args, "follow", False):
        return _follow(store, shown)
    # Written as it is read, a page of steps at a time: a 5,000-step run's first screen does not wait for the rest.
    with paged(not args.no_pager) as console:
        print_transcript(shown.run, run_cost=shown.cost, resumes=list(shown.resumes), console=console,
                         approvals=list(shown.approvals), status=shown.status, title=shown.title,
                         pages=show_pages(store, shown.run.id), tree=_tree_words(shown.tree))
    return 0


def _tree_words(tree):
    """What ``print_transcript`` says of the subagent tree: the summary's lines and each call's child, in words
    (``views.run_tree``); None for a run no call of which started a child."""
    from ...render import TreeWords
    from ...views.run_tree import node_text, roll_up, rollup_text

    if tree is None or not (tree.children or tree.run.parent_call_id):
        return None
    lines = tuple((depth, node_text(node)) for node, depth in tree.walk())
    calls = {call_id: node_text(child) for call_id, child in tree.child_for_call().items()}
    parent = (f"a subagent's run: started by call {tree.run.parent_call_id} of run {tree.run.parent_id}"
              if tree.run.parent_call_id else None)
    return TreeWords(rollup_text(roll_up(tree)), lines if tree.children else (), calls, parent)


def _show_document(store, shown) -> int:
    """``show --json``: the run, its subagent tree with the roll-up, and its steps, each subagent call with
    the child it started (id, agent, status, steps, cost) under the call's id."""
    from ...views.json_rows import step_document
    from ...views.run_tree import roll_up, rollup_json, tree_json
    from ...views.runs import RunLine, run_json
    from ...views.transcript import show_pages

    tree = shown.tree
    children = tree.child_for_call()
    steps = []
    for page in show_pages(store, shown.run.id):
        for step in page:
            doc = step_document(shown.run.id, step)
            calls = [b.get("id") for b in doc.get("assistant") or [] if isinstance(b, dict)
                     and b.get("type") == "tool_use"]
            started = {str(c): _child_json(children[c]) for c in calls if isinstance(c, str) and c in children}
            if started:
                doc["subagent_runs"] = started
            steps.append(doc)
    print(printable_json({"run": run_json(RunLine(shown.run, shown.status, 0, shown.cost)), "title": shown.title,
                          "tree": tree_json(tree), "tree_rollup": rollup_json(roll_up(tree)), "steps": steps}))
    return 0


def _child_json(node) -> dict:
    from ...views.run_tree import tree_json

    return {key: value for key, value in tree_json(node).items() if key != "children"}


def _follow(store, shown) -> int:
    """``show --follow``: the transcript, then each step as it commits, until the run ends (Ctrl-C: stop)."""
    from ...render import print_transcript
    from ...views.transcript import follow_pages

    feed = store.change_feed().start()
    try:
        print_transcript(shown.run, run_cost=shown.cost, resumes=list(shown.resumes), approvals=list(shown.approvals),
                         status=shown.status, title=shown.title, pages=follow_pages(store, shown.run, feed),
                         tree=_tree_words(shown.tree))
    except KeyboardInterrupt:
        return 130  # the reader stopped following; nothing of the run's changed
    finally:
        feed.stop()
    return 0


def _show_json(store, run, *, lines: bool) -> int:
    """``show --raw`` / ``--jsonl``: every step as data (``views.json_rows.step_document``), never wrapped,
    boxed or styled; a stored column that is not valid JSON is given as the text it holds."""
    from ...views.json_rows import step_document

    from ...views.transcript import show_pages

    for page in show_pages(store, run.id):
        for step in page:
            print(printable_json(step_document(run.id, step), indent=None if lines else 2))
        sys.stdout.flush()
    return 0


def cmd_spend(args: argparse.Namespace) -> int:
    from ...config.values import parse_since
    from ...views.costs import read_spend, spend_cache_text, spend_cost_text, spend_json

    since = parse_since(args.since) if args.since else None
    store = open_for_reading(args)
    table = read_spend(store, since=since, by=args.by)
    rows, total = list(table.rows), table.total
    if args.json:
        print(printable_json({"since": since, "by": args.by, "rows": [spend_json(r, args.by) for r in rows],
                              "total": spend_json(total, "total")}))
        return 0
    print(f"spend {table.label()}, by {args.by}")
    width = max([len(args.by), 5] + [len(printable(r.key)) for r in rows])
    print(f"{args.by:<{width}}  {'runs':>5}  {'calls':>6}  {'input tok':>11}  {'output tok':>10}  "
          f"{'cache':>5}  cost")
    for row in rows + [total]:
        print(f"{printable(row.key):<{width}}  {row.runs:>5}  {row.calls:>6}  {row.input_tokens:>11,}  "
              f"{row.output_tokens:>10,}  {spend_cache_text(row):>5}  {spend_cost_text(row)}")
    return 0
