"""Commands for tool calls that wait for a person: ``pending``, ``approve``, ``deny``."""

from __future__ import annotations

import argparse
import sys

from ...config.errors import UsageError
from ...safe_text import one_line, printable, printable_json
from ...store.status import RunStatus
from ..driving import finish, show_step
from ..opening import open_db, open_for_reading


def read_edit(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    try:
        with open(source, encoding="utf-8") as fh:
            return fh.read(1_000_001)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--edit {printable(source)}: cannot be read ({exc.__class__.__name__})") from None


def cmd_pending(args: argparse.Namespace) -> int:
    store = open_for_reading(args)
    from ...agent.subagents import runs_above

    rows = store.pending_approvals()
    # A subagent's call waits: the runs above it wait with it (their ids, the parent first, the root last).
    trees = {run.id: [r.id for r in runs_above(store, run)] for _row, run in rows}
    if args.json:
        import json

        print(printable_json([{"run_id": run.id, "step": row.n, "tool_use_id": row.tool_use_id,
                               "tool": row.tool_name, "input": json.loads(row.input),
                               "input_hash": row.input_hash, "requested_at": row.requested_at,
                               "task": run.user_msg, "under": trees[run.id]} for row, run in rows]))
        return 0
    if not rows:
        print("nothing waits for a decision")
        return 0
    for row, run in rows:
        print(f"{run.id}  step {row.n}  {printable(row.tool_name)}  {printable(row.tool_use_id)}  "
              f"since {row.requested_at}  arguments {row.input_hash[:12]}")
        print(f"    {one_line(row.input, 300)}")
        print(f"    task: {one_line(run.user_msg, 100)}")
        if trees[run.id]:
            under = " under run ".join(trees[run.id])
            print(f"    in {printable(run.agent or 'an agent')} (run {run.id}) under run {under}: decide here, then "
                  f"dayflow resume {trees[run.id][-1]}")
    return 0


def _decide(args: argparse.Namespace, *, approve: bool) -> int:
    from ...agent.approvals import decider, validated_edit
    from ...config.errors import DecisionRefused

    from ...agent.registry import agent_for_run

    from ...store import refuse_imported

    store = open_db(args, create=False)
    run = store.get_run(args.run_id)
    refuse_imported(run)  # an imported run (Claude Code, collected trace) has nothing to decide here: said first
    # A decision lets a call run: it is taken for the agent the run recorded, or not at all (nothing written).
    _agent, change = agent_for_run(run, allow_changed=args.allow_changed_agent)
    if change is not None and args.queue:
        raise UsageError("--allow-changed-agent goes on here, with the new definition: a worker would refuse it; "
                         "leave out --queue")
    user, host = decider()
    if args.decider is not None:
        user = args.decider.strip()
        if not user or len(user) > 200:
            raise UsageError("--as needs a name (at most 200 characters)")
    edited, tool_use_id = None, args.tool_use_id
    if args.every and (tool_use_id is not None or args.expect_hash is not None
                       or (approve and args.edit is not None)):
        raise UsageError("--all decides every waiting call: it goes without TOOL_USE_ID, --hash and --edit")
    if approve and args.edit is not None:
        text = read_edit(args.edit)
        tool_use_id, edited = validated_edit(store, run.id, args.tool_use_id, text)
    reason = None
    if not approve:
        reason = args.reason.strip()
        if not reason:
            raise UsageError("--reason must say why (the model is told)")
        if len(reason) > 4000:
            raise UsageError("--reason is longer than 4,000 characters")
    targets = [tool_use_id or None]
    if args.every:
        targets = [r.tool_use_id for r in store.approvals(run.id) if r.state == "pending"]
        if not targets:
            raise DecisionRefused(f"run {run.id} has no tool call waiting for a decision")
    word = "approved" if approve else "denied"
    for target in targets:
        row = store.decide(run.id, target, approve=approve, by=user, host=host, reason=reason,
                           edited_input=edited, expect_hash=args.expect_hash)
        note = " with edited arguments" if row.edited_input is not None else ""
        print(f"[{word} {run.id}] {printable(row.tool_name)} ({printable(row.tool_use_id)}){note} by "
              f"{printable(user)} on {printable(host)}", file=sys.stderr)
    current = store.get_run(run.id)
    if current.status == RunStatus.WAITING.value:
        left = sum(1 for r in store.approvals(run.id) if r.state == "pending")
        print(f"[waiting {run.id}] {left} more call(s) wait for a decision (dayflow pending)", file=sys.stderr)
        return 0
    if args.queue:
        print(f"[queued {run.id}] a `dayflow worker` on this database continues it", file=sys.stderr)
        return 0
    from ...agent.runs import resume
    from ...config.errors import RunBusy
    from ..driving import waiting_out_rate_limits

    try:
        on_step = show_step if args.verbose else None
        # The decision is committed; going on is a resume like any other, and waits out back-pressure as one.
        result = waiting_out_rate_limits(
            lambda: resume(run.id, store=store, on_step=on_step, allow_changed_agent=args.allow_changed_agent),
            store, {"on_step": on_step})
    except RunBusy as exc:  # a worker took the run first: it continues it
        print(f"[{word} {run.id}] {printable(exc)}", file=sys.stderr)
        return 0
    return finish(result)


def cmd_approve(args: argparse.Namespace) -> int:
    return _decide(args, approve=True)


def cmd_deny(args: argparse.Namespace) -> int:
    return _decide(args, approve=False)
