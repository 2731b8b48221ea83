"""Running examples: a plan on a fresh world, checked after every action; shrinking a failing plan.

``run_example`` stops at the first action after which a property fails (what
follows a broken state proves little) and otherwise settles the world and
checks that every run reached a verdict. ``shrink`` removes actions one at a
time, keeping each removal after which the same property still fails, so the
plan printed with a failure is short.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

from .actions import perform, settle
from .cancel_actions import check_cancels
from .checks import check_calls, check_fleet_numbers, check_process, check_verdicts, check_world
from .plan import Plan
from .scripted_model import ScriptedModel
from .world import Outcome, World, read_mcp_ledger, read_snapshot

# How long a killed client's last request may take to reach the server after the process died.
LATE_REQUEST_S = 0.3


@dataclass
class Database:
    """Where an example's store lives: what the test reads, what the processes are given, the fault proxy."""

    read_target: str
    process_target: str
    proxy: object | None = None


def run_example(plan: Plan, workdir: Path, database: Database) -> Outcome:
    started = time.monotonic()
    with ScriptedModel(int(hashlib.sha256(plan.seed.encode()).hexdigest()[:8], 16)) as model:
        world = World(plan, workdir, db_target=database.read_target, process_db=database.process_target,
                      proxy=database.proxy)
        world.model = model
        model.agent_tools = plan.agent.tool_names
        model.child_tools = plan.agent.child_tool_names
        outcome = world.outcome
        for index, action in enumerate(plan.actions):
            first_proc = len(world.procs)
            problems = perform(world, action)
            for proc in world.procs[first_proc:]:
                problems += check_process(proc)
            snapshot = read_snapshot(world.db)
            problems += check_world(world, snapshot) + check_cancels(world, snapshot)
            if problems:
                outcome.problems += [f"after action {index + 1} ({action}): {p}" for p in problems]
                break
        else:
            first_proc = len(world.procs)
            settle(world)
            problems = [p for proc in world.procs[first_proc:] for p in check_process(proc)]
            snapshot = read_snapshot(world.db)
            problems += check_world(world, snapshot) + check_cancels(world, snapshot) + check_verdicts(snapshot)
            problems += check_fleet_numbers(world.db, snapshot)
            outcome.problems += [f"after settling: {p}" for p in problems]
        time.sleep(LATE_REQUEST_S)
        outcome.problems += [f"calls: {p}" for p in check_calls(world, final=True)]
        outcome.replies = dict(model.replies)
        for line in read_mcp_ledger(world.mcp_ledger):
            if line.what == "mcp-start":
                outcome.mcp_bodies[line.tool] = outcome.mcp_bodies.get(line.tool, 0) + 1
    outcome.seconds = time.monotonic() - started
    return outcome


def signature(problem: str) -> str:
    """What kind of failure a problem is, without its ids and numbers (shrinking keeps the same kind)."""
    text = problem.split(": ", 1)[-1] if problem.startswith(("after", "calls")) else problem
    text = re.sub(r"toolu_\w+|\b[0-9a-f]{12}\b|\bp\d+\b|\d+(\.\d+)?", "#", text)
    return text[:60]


def shrink(plan: Plan, first: Outcome, attempt: Callable[[Plan], Outcome], *, budget_s: float
           ) -> tuple[Plan, Outcome, int]:
    """Drop actions (latest first) while the failure's kind survives; at most ``budget_s`` seconds."""
    wanted = {signature(p) for p in first.problems}
    deadline = time.monotonic() + budget_s
    best, best_outcome, tries = plan, first, 0
    index = len(best.actions) - 1
    while index >= 1 and time.monotonic() < deadline:  # the first action (a new run) stays
        candidate = best.without(index)
        outcome = attempt(candidate)
        tries += 1
        if {signature(p) for p in outcome.problems} & wanted:
            best, best_outcome = candidate, outcome
        index -= 1
    # Then the kills and faults of what is left, each dropped if the failure stays without it.
    for index in range(len(best.actions)):
        for lighter in ({"kill": None}, {"fault": None}):
            action = best.actions[index]
            if time.monotonic() >= deadline or all(getattr(action, k) is None for k in lighter):
                continue
            candidate = best.replaced(index, replace(action, **lighter))
            outcome = attempt(candidate)
            tries += 1
            if {signature(p) for p in outcome.problems} & wanted:
                best, best_outcome = candidate, outcome
    return best, best_outcome, tries


@contextlib.contextmanager
def fresh_dir(path: Path) -> Iterator[Path]:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    yield path
