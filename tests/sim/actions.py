"""Carrying out one action of a plan on a world: which command, on which run or call, and what to expect."""

from __future__ import annotations

import json
from dataclasses import replace

from .agent_file import IDEMPOTENT, PLAIN, READ_ONLY, AgentSpec
from .cancel_actions import cancel
from .plan import Action
from .scripted_model import MODEL
from .world import Proc, World, choose, read_ledger, read_snapshot, runs_with

RESUMABLE = {"running", "failed", "budget", "queued", "forked"}


def perform(world: World, action: Action) -> list[str]:
    """Carry ``action`` out; returns the problems seen in what it did (the world's checks come after)."""
    snap = read_snapshot(world.db)
    verb, kill, fault = action.verb, action.kill, action.fault
    world.outcome.verbs[verb] = world.outcome.verbs.get(verb, 0) + 1
    pending = sorted((a for a in snap.approvals.values() if a["state"] == "pending"),
                     key=lambda a: (a["run_id"], a["n"], a["tool_use_id"]))
    if verb in ("start", "queue"):
        task = f"sim task {len(snap.runs) + 1}: {world.plan.seed}"  # each run its own script
        args = ["run", f"{world.agent_path}:agent", task, "--model", MODEL] + (["--queue"] if verb == "queue" else [])
        if action.pick2 < 0.5:
            # Compaction on (issue #26): a reply that fills the context window is compacted and goes on; without
            # it the same reply fails the run, saying to fork with compaction on.
            args += ["--compact-at", "400"]
        world.run_one(*args, kill=kill, fault=fault)
        return []
    if verb == "worker":
        world.run_one("worker", "--once", kill=kill, fault=fault)
        return []
    if verb == "resume":
        run_id = choose(runs_with(snap, RESUMABLE), action.pick)
        if run_id is None:
            return _skipped(world)
        world.run_one("resume", run_id, kill=kill, fault=fault)
        return []
    if verb in ("approve", "deny"):
        run_id = choose(runs_with(snap, {"waiting"}), action.pick)
        if run_id is None:
            return _skipped(world)
        args = ["approve", run_id, "--all"] if verb == "approve" else ["deny", run_id, "--all", "--reason", "sim: no"]
        proc = world.run_one(*args, kill=kill, fault=fault)
        _note_decisions(world, proc, [a for a in pending if a["run_id"] == run_id],
                        "approved" if verb == "approve" else "denied")
        return []
    if verb in ("approve_one", "edit_approve"):
        row = choose(pending, action.pick)
        if row is None:
            return _skipped(world)
        run_id, call = row["run_id"], row["tool_use_id"]
        if verb == "approve_one":
            proc = world.run_one("approve", run_id, call, "--hash", row["input_hash"][:12], kill=kill, fault=fault)
        else:
            args = dict(json.loads(row["input"]))
            args["note"] = f"e{len(world.procs)}"
            proc = world.run_one("approve", run_id, call, "--edit", "-", kill=kill, fault=fault,
                                 stdin=json.dumps(args))
        _note_decisions(world, proc, [row], "approved")
        return []
    if verb == "decide_again":
        decided = sorted((a for a in snap.approvals.values() if a["state"] in ("approved", "denied")),
                         key=lambda a: (a["run_id"], a["tool_use_id"]))
        row = choose(decided, action.pick)
        if row is None:
            return _skipped(world)
        proc = world.run_one("approve", row["run_id"], row["tool_use_id"])
        if proc.exit_code == 0:
            return [f"{proc.tag}: a second decision on call {row['tool_use_id']} of run {row['run_id']} "
                    f"(already {row['state']}) was accepted"]
        return []
    if verb == "empty_hash":
        row = choose(pending, action.pick)
        if row is None:
            return _skipped(world)
        proc = world.run_one("approve", row["run_id"], row["tool_use_id"], "--hash", "")
        state = read_snapshot(world.db).approvals[(row["run_id"], row["tool_use_id"])]["state"]
        if proc.exit_code != 64 or state != "pending":
            return [f"{proc.tag}: `approve RUN CALL --hash \"\"` exited {proc.exit_code} and left the call {state} "
                    "(an empty prefix matches every hash: expected a usage error, exit 64, the call still waiting)"]
        return []
    if verb == "fork":
        candidates = [r for r in runs_with(snap, {"done", "failed", "waiting", "budget", "running", "forked",
                                                  "cancelled"})
                      if snap.runs[r]["step_count"] >= 1]
        run_id = choose(candidates, action.pick)
        if run_id is None:
            return _skipped(world)
        at = 1 + min(int(action.pick2 * snap.runs[run_id]["step_count"]), snap.runs[run_id]["step_count"] - 1)
        if action.pick2 < 0.5:
            world.run_one("fork", run_id, "--at", str(at), "--run", kill=kill, fault=fault)
            return []
        proc = world.run_one("fork", run_id, "--at", str(at))
        fork_id = proc.out.strip().split("\n")[0].strip() if proc.exit_code == 0 else ""
        if fork_id:
            world.run_one("resume", fork_id, kill=kill, fault=fault)
        return []
    if verb == "edit_agent":
        return _edit_and_probe(world, action, snap)
    if verb == "cancel":
        return cancel(world, action, snap)
    if verb == "race":
        run_id = choose(runs_with(snap, {"running", "queued", "failed"}), action.pick)
        if run_id is None:
            return _skipped(world)
        world.race(run_id)  # both may work (the worker on another run); the ledger shows a run shared
        return []
    raise ValueError(f"unknown verb {verb}")


def _skipped(world: World) -> list[str]:
    world.outcome.skipped += 1
    return []


def _note_decisions(world: World, proc: Proc, rows: list[dict], state: str) -> None:
    """A decision command that exited 0 committed its decisions: the checks hold the journal to them."""
    if proc.exit_code == 0 and not proc.killed:
        for row in rows:
            world.decisions[(row["run_id"], row["tool_use_id"])] = state


def edited_agent(spec: AgentSpec, edit: str, pick: float) -> tuple[AgentSpec, str]:
    """The agent with one change a resume must notice: a tool's kind, its approval flag, or the prompt."""
    if edit == "prompt":
        return replace(spec, prompt=spec.prompt + " Be brief."), "the prompt"
    tools = list(spec.tools)
    target = tools[min(int(pick * len(tools)), len(tools) - 1)]
    if edit == "kind":
        kind = {PLAIN: READ_ONLY, READ_ONLY: PLAIN, IDEMPOTENT: READ_ONLY}[target.kind]
        return spec.with_tool(replace(target, kind=kind)), f"{target.name} {target.kind} -> {kind}"
    return (spec.with_tool(replace(target, approval=not target.approval)),
            f"{target.name} needs_approval {target.approval} -> {not target.approval}")


def _edit_and_probe(world: World, action: Action, snap) -> list[str]:
    """Edit the agent file, try to go on with a run recorded under the old one, put the file back.

    Going on across a change must be refused (``dayflow resume`` says what changed unless
    ``--allow-changed-agent``; ``approve`` on a waiting run and a worker on a queued one likewise):
    no paid call, no tool body, no step.
    """
    edited, what = edited_agent(world.spec, action.edit, action.pick)
    # Not a subagent's child run (or a fork of one): its agent is the helper, which these edits leave as it was.
    candidates = [r for r in runs_with(snap, RESUMABLE | {"waiting"})
                  if snap.runs[r]["agent_ref"] and snap.runs[r]["status"] != "forked"
                  and ">" not in snap.runs[r]["agent_ref"]]
    run_id = choose(candidates, action.pick2)
    if run_id is None:
        return _skipped(world)
    status = snap.runs[run_id]["status"]
    ledger_before = len(read_ledger(world.ledger))
    world.write_agent(edited)
    try:
        if status == "waiting":
            proc = world.run_one("approve", run_id, "--all")
        elif status == "queued":
            proc = world.run_one("worker", "--once")
        else:
            proc = world.run_one("resume", run_id)
    finally:
        world.write_agent(world.spec)
    after = read_snapshot(world.db)
    ran = [line for line in read_ledger(world.ledger)[ledger_before:] if line.pid == proc.pid]
    calls = world.model.paid({proc.tag})
    went_on = [f"{calls} paid call(s)"] if calls else []
    went_on += [f"{len(ran)} tool bod{'y' if len(ran) == 1 else 'ies'}"] if ran else []
    if after.runs[run_id]["step_count"] != snap.runs[run_id]["step_count"]:
        went_on.append("new steps")
    if after.runs[run_id]["status"] != status and after.runs[run_id]["status"] not in ("failed", "queued", "running"):
        went_on.append(f"status {status} -> {after.runs[run_id]['status']}")
    if went_on:
        return [f"{proc.tag}: the agent was edited ({what}) and `{' '.join(proc.argv[1:4])}` on {status} run "
                f"{run_id} went on: {', '.join(went_on)} (exit {proc.exit_code})"]
    return []


def settle(world: World) -> list[str]:
    """Faults off, the agent as written: a worker, then a resume of every run still without a verdict."""
    world.model.end_burst()
    world.write_agent(world.spec)
    world.run_one("worker", "--once")
    snap = read_snapshot(world.db)
    for run_id in runs_with(snap, RESUMABLE):
        world.run_one("resume", run_id)
    return []
