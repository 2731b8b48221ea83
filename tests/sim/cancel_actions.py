"""Cancel in the simulation: ``dayflow cancel`` at a random moment, of a run at rest or of one a process drives
(a process that is then killed, now and then), and what must hold of a cancelled run from then on.

The promises (README, "Cancel and priorities"): a cancel of a run that has ended is refused (exit 4) and changes
nothing; one of a run at rest cancels it at once; one of a run a live process drives is asked, its call in flight
finishes and is committed, and after the cancel is committed the run gets at most that one call, whoever drives
it next (a killed driver's successor sees the cancel at its claim); a cancelled run stays cancelled. Its
subagents' child runs are cancelled with it: that one call is counted over the run and its children.
"""

from __future__ import annotations

import time

from .plan import Action
from .scripted_model import MODEL
from .world import Snapshot, World, choose, read_snapshot

ENDED = {"done", "failed", "budget", "cancelled"}
# How long the server holds each call of a run cancelled while driven: longer than a `dayflow cancel` takes to
# start, so the cancel lands in the run (in a call, its tools or a commit), not after it.
CALL_S = 1.0
# How long a new run's driver may take to record it (a loaded machine takes seconds to start one).
FIND_RUN_S = 60.0


def cancel(world: World, action: Action, snap: Snapshot) -> list[str]:
    """``pick2`` < 0.5: cancel a run at rest (any run, ended ones included); else one a process drives."""
    if action.pick2 < 0.5:
        ids = sorted(snap.runs, key=lambda i: (str(snap.runs[i]["created_at"]), i))
        run_id = choose(ids, action.pick)
        if run_id is None:
            world.outcome.skipped += 1
            return []
        return _cancel_at_rest(world, run_id, snap)
    return _cancel_while_driven(world, action, snap)


def _cancel_at_rest(world: World, run_id: str, snap: Snapshot) -> list[str]:
    before = snap.runs[run_id]
    proc = world.run_one("cancel", run_id, "--reason", "sim: stop")
    after = read_snapshot(world.db).runs[run_id]
    if before["status"] in ENDED:
        if proc.exit_code != 4 or after["status"] != before["status"] or after["cancel_at"] != before["cancel_at"]:
            return [f"{proc.tag}: `cancel` of a {before['status']} run {run_id} exited {proc.exit_code} and left it "
                    f"{after['status']} (expected a refusal, exit 4, the run unchanged)"]
        return []
    if proc.exit_code != 0 or after["status"] != "cancelled":
        # Nothing drives it (every process of the world has ended): it is cancelled at once.
        return [f"{proc.tag}: `cancel` of {before['status']} run {run_id} at rest exited {proc.exit_code} and "
                f"left it {after['status']}: {proc.err.strip()[-160:]}"]
    world.cancels.setdefault(run_id, (time.monotonic(), after["step_count"]))
    return []


def _cancel_while_driven(world: World, action: Action, snap: Snapshot) -> list[str]:
    """A new run driven by ``dayflow run`` (calls held in flight), cancelled after a random wait; with a kill,
    the driver is killed a moment after the cancel (before or after it saw it)."""
    task = f"sim task {len(snap.runs) + 1}: {world.plan.seed}"
    driver = world.new_proc("run", f"{world.agent_path}:agent", task, "--model", MODEL)
    driver.steps_before = snap.paid_steps()
    world.model.delay = CALL_S
    popen = world.spawn(driver)
    problems: list[str] = []
    try:
        deadline = time.monotonic() + FIND_RUN_S
        run_id = None
        while run_id is None and time.monotonic() < deadline and popen.poll() is None:
            run_id = next((r for r, row in read_snapshot(world.db).runs.items() if row["user_msg"] == task), None)
            time.sleep(0.02)
        if run_id is None:
            world.outcome.skipped += 1
        else:
            time.sleep(action.pick * CALL_S * 1.5)  # a random moment: in a call, its tools, a commit, or after
            # Not run_one: that sets the server's hold for its own process; the driver's calls stay held.
            proc = world.new_proc("cancel", run_id, "--as", "sim-canceller")
            world.finish(proc, world.spawn(proc))
            after = read_snapshot(world.db).runs[run_id]
            if proc.exit_code == 0:
                world.cancels.setdefault(run_id, (time.monotonic(), after["step_count"]))
            elif proc.exit_code != 4:
                problems.append(f"{proc.tag}: `cancel` of run {run_id} while driven exited {proc.exit_code}: "
                                f"{proc.err.strip()[-160:]}")
            if action.kill:
                time.sleep(action.kill[2] * 0.5)
                driver.kill_aim = "after-cancel"
                world.kill(driver, popen)
    finally:
        world.finish(driver, popen)
        world.model.delay = 0.0
        driver.steps_after = read_snapshot(world.db).paid_steps()
    if not driver.killed and driver.exit_code not in (0, 3):
        problems.append(f"{driver.tag}: the driver of a run cancelled while it drove exited {driver.exit_code}: "
                        f"{driver.err.strip()[-160:]}")
    return problems


def check_cancels(world: World, snapshot: Snapshot) -> list[str]:
    """After its cancel is committed a run gets at most one model call (the one in flight, or one begun as the
    cancel landed) and at most one step; a cancelled run stays cancelled."""
    problems = []
    tasks = [row["user_msg"] for row in snapshot.runs.values()]
    for run_id, (at, steps) in world.cancels.items():
        run = snapshot.runs[run_id]
        if run["step_count"] > steps + 1:
            problems.append(f"run {run_id} was cancelled at step {steps} and went on to step {run['step_count']}")
        # Its subagents' child runs are part of its work (issue #27): cancelled with it, the whole tree gets at
        # most that one call (one process drives a parent and its child, one call at a time).
        family = [run_id] + _children_of(snapshot, run_id)
        if all(tasks.count(snapshot.runs[r]["user_msg"]) == 1 for r in family):  # a fork shares its parent's task
            calls = sum(world.model.paid_for(snapshot.runs[r]["user_msg"], at) for r in family)
            if calls > 1:
                problems.append(f"run {run_id} got {calls} model calls after its cancel was committed"
                                + (f" (with its {len(family) - 1} child run(s))" if len(family) > 1 else ""))
    for run_id in world.seen_cancelled:
        if snapshot.runs[run_id]["status"] != "cancelled":
            problems.append(f"cancelled run {run_id} became {snapshot.runs[run_id]['status']}")
    world.seen_cancelled |= {r for r, row in snapshot.runs.items() if row["status"] == "cancelled"}
    return problems


def _children_of(snapshot: Snapshot, run_id: str) -> list[str]:
    """The subagent child runs under ``run_id``, their children too."""
    found = []
    for row in snapshot.runs.values():
        if row.get("parent_call_id") and row["parent_id"] == run_id:
            found += [row["id"]] + _children_of(snapshot, row["id"])
    return found
