"""Runs that travel in time and space: ``fork``, ``diff``, ``export``, ``import``."""

from __future__ import annotations

import argparse
import json
import sys

from ...config.errors import DayflowError, UsageError
from ...safe_text import one_line, printable, printable_json
from ..driving import driving_options, finish, saved_text
from ..opening import open_db, open_for_reading
from .approvals import read_edit


def _edits(specs: list[str]) -> dict[tuple[int, str], str]:
    edits: dict[tuple[int, str], str] = {}
    stdin_used = False
    for spec in specs:
        where, sep, source = spec.partition("=")
        step_text, colon, tool_use_id = where.partition(":")
        if not sep or not colon or not source or not tool_use_id.strip():
            raise UsageError(f"--edit-result {printable(spec)}: expected STEP:TOOL_USE_ID=FILE (or =- for stdin)")
        try:
            n = int(step_text)
        except ValueError:
            raise UsageError(f"--edit-result {printable(spec)}: {printable(step_text)!r} is not a step number") from None
        if source == "-":
            if stdin_used:
                raise UsageError("--edit-result: only one result can come from standard input")
            stdin_used = True
        text = read_edit(source) if source != "-" else sys.stdin.read()
        if len(text) > 1_000_000:
            raise UsageError(f"--edit-result {printable(spec)}: more than 1,000,000 characters")
        edits[(n, tool_use_id.strip())] = text
    return edits


def cmd_fork(args: argparse.Namespace) -> int:
    from ...agent.messages import messages_from
    from ...store.tables.forks import ForkPlan

    if args.append is not None and not args.append.strip():
        raise UsageError("--append needs some text")
    if args.model is not None and (not args.model.strip() or len(args.model) > 200):
        raise UsageError("--model needs a model name")
    edits = _edits(args.edit_result)  # every file read and checked before the database is opened for writing
    store = open_db(args, create=False)
    plan = ForkPlan(at=args.at, results=edits, note=args.append, model=args.model, max_steps=args.max_steps,
                    budget_tokens=args.budget, budget_usd=args.budget_usd)
    fork = store.fork_run(args.run_id, plan, check=lambda run, steps: messages_from(run, steps))
    print(fork.id)
    changes = []
    if edits:
        changes.append(f"{len(edits)} tool result(s) replaced")
    if args.append:
        changes.append("your note added")
    changed = f" ({', '.join(changes)})" if changes else ""
    print(f"[fork {fork.id}] of run {fork.parent_id} at step {fork.forked_at}{changed}; "
          + ("going on now" if args.run else f"continue it with: dayflow resume {fork.id}"), file=sys.stderr)
    if not args.run:
        return 0
    from ...agent.runs import resume
    from ..driving import waiting_out_rate_limits

    options = driving_options(args)
    result = waiting_out_rate_limits(lambda: resume(fork.id, store=store, **options), store, options)
    if result.replayed_steps:
        print(f"[fork {fork.id}] {saved_text(result)}", file=sys.stderr)
    return finish(result)


def cmd_diff(args: argparse.Namespace) -> int:
    from ...views.travel import STATE_WORD, headline, read_diff

    store = open_for_reading(args)
    compared = read_diff(store, args.run_a, args.run_b)
    a, b, found = compared.a, compared.b, compared.diff
    if args.json:
        print(printable_json(found.as_json()))
        return 0
    print(f"diff {a.id} (a) .. {b.id} (b)" + (f"; steps 1..{found.common_fork} are shared copies"
                                               if found.common_fork else ""))
    for step in found.steps:
        if step.state in ("same", "shared"):
            print(f"step {step.n:>3}  {step.state}")
            continue
        if step.state in ("only_a", "only_b"):
            side = "a" if step.state == "only_a" else "b"
            print(f"step {step.n:>3}  only in {side}")
            continue
        (ta, tb) = step.tokens
        word = STATE_WORD[step.state]
        print(f"step {step.n:>3}  {word}  stop {printable(step.stop_reason[0])} -> {printable(step.stop_reason[1])}"
              f"  tokens {ta[0]}/{ta[1]} -> {tb[0]}/{tb[1]}")
        for line in step.text_diff:
            print(f"    text {one_line(line, 200)}")
        for call in step.calls:
            left = f"{call.a['name']}({one_line(json.dumps(call.a['input'], ensure_ascii=False), 120)})" if call.a else "-"
            right = f"{call.b['name']}({one_line(json.dumps(call.b['input'], ensure_ascii=False), 120)})" if call.b else "-"
            print(f"    call #{call.index + 1}: {printable(left)} -> {printable(right)}")
        for result in step.results:
            print(f"    result #{result.index + 1}: {one_line(result.a or '-', 100)} -> {one_line(result.b or '-', 100)}")
    (ia, oa), (ib, ob) = found.tokens
    where = headline(found)  # from the same rows as printed above
    print(f"{where}; tokens {ia}/{oa} (a) vs {ib}/{ob} (b), {ib + ob - ia - oa:+,}; "
          f"calls {found.calls[0]} vs {found.calls[1]}, {found.calls[1] - found.calls[0]:+}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store = open_db(args, create=False, upgrade=False)  # reading only
    # Every id is resolved (a prefix is enough) before any file is written or request sent.
    run_ids = list(dict.fromkeys(store.get_run(rid).id for rid in args.run_ids))
    if args.content is not None and not (args.otlp or args.otlp_file):
        raise UsageError("--content goes with --otlp or --otlp-file")
    if args.jsonl:
        from ...store.transfer import new_file, write_jsonl

        with new_file(args.jsonl, "dayflow export") as out:
            counts = write_jsonl(store, run_ids, out)
        print(f"exported {counts.run} run(s), {counts.step} step(s), {counts.resume} resume(s) and {counts.task} "
              f"task(s) to {printable(args.jsonl)}", file=sys.stderr)
        return 0
    if args.anthropic:
        from ...agent.request import replay_request
        from ...store import dumps, is_imported
        from ...store.transfer import new_file

        for rid in run_ids:  # Dayflow rebuilds the request of its own runs only (system prompt, tools)
            if is_imported(store.get_run(rid)):
                what = ("an OpenTelemetry trace received by `dayflow collect`" if store.get_run(rid).source == "otel"
                        else "an imported Claude Code session")
                raise UsageError(f"run {printable(rid)} is {what}: its requests are not "
                                 "Dayflow's to rebuild; export it with --jsonl or --otlp-file")

        bodies = [replay_request(store, rid) for rid in run_ids]
        with new_file(args.anthropic, "dayflow export") as out:
            for body in bodies:
                out.write(dumps(body) + "\n")
        print(f"wrote the messages of {len(bodies)} run(s) to {printable(args.anthropic)} as Messages API "
              "request bodies", file=sys.stderr)
        return 0
    return _export_traces(store, run_ids, args)


def _export_traces(store, run_ids: list[str], args: argparse.Namespace) -> int:
    from ...config import settings
    from ...otel.export import otlp_json, require_sdk, send_otlp, spans_of, traces_url
    from ...otel.plan import read_source

    require_sdk("dayflow export --otlp" if args.otlp else "dayflow export --otlp-file")
    if args.otlp:
        traces_url(args.otlp)  # a bad URL is refused before anything is read
    content = settings.current().otel_content if args.content is None else args.content
    sent: list[str] = []
    lines: list[str] = []
    for run_id in run_ids:
        spans = spans_of(read_source(store, run_id), content=content)
        if args.otlp:
            try:
                send_otlp(args.otlp, spans)
            except DayflowError as exc:
                if sent:
                    raise DayflowError(f"{exc} (already sent: run(s) {printable(', '.join(sent))})") from None
                raise
            sent.append(run_id)
            print(f"sent {len(spans)} span(s) of run {printable(run_id)}", file=sys.stderr)
        else:
            lines.append(otlp_json(spans))
    if args.otlp_file:
        from ...store.transfer import new_file

        with new_file(args.otlp_file, "dayflow export") as out:
            out.writelines(line + "\n" for line in lines)
        print(f"wrote the traces of {len(lines)} run(s) to {printable(args.otlp_file)} (OTLP JSON)", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    if args.claude_code is not None:
        if args.file is not None or args.as_new:
            raise UsageError("--claude-code DIR takes no FILE and no --as-new (give one or the other)")
        from .claude_code import import_sessions

        return import_sessions(args)
    if args.file is None:
        raise UsageError("import needs a FILE written by `dayflow export --jsonl`, or --claude-code [DIR]")
    from ...store.transfer import import_archive, read_archive

    archive = read_archive(args.file)  # the whole file is checked before the database is opened
    store = open_db(args)
    report = import_archive(store, archive, as_new=args.as_new)
    for old, new in report.runs:
        print(f"imported run {printable(old)}" + (f" as {printable(new)}" if new != old else ""))
    notes = [f"{report.steps} step(s)", f"{report.resumes} resume(s)", f"{report.tasks_added} task(s) added"]
    if report.tasks_relinked:
        notes.append(f"{report.tasks_relinked} kept task(s) linked to their run again")
    if report.tasks_kept:
        notes.append(f"{report.tasks_kept} task(s) already here under the same key (kept as they are)")
    if report.renumbered:
        notes.append(f"{report.renumbered} row id(s) taken here, given new ones")
    print(f"{len(report.runs)} run(s) into {printable(store.label)}: {', '.join(notes)}", file=sys.stderr)
    return 0
