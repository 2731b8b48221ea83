"""The properties checked after every action of a simulation example, and once more when it is over.

Each check reads only what is outside the processes: the database through
the test's own connection, the side-effect ledger the tool bodies append to,
the model server's record of requests, and each process's exit and output.
A check returns problems as sentences; an empty list is a pass.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone

from .agent_file import MCP_PLAIN, SUBAGENT_TOOL
from .world import VERDICTS, LedgerLine, Proc, Snapshot, World, read_ledger, read_mcp_ledger, read_snapshot

BACK_PRESSURE = re.compile(r"\b(429|529)\b|rate.?limit|overload", re.I)
LEAKS = ("sim_injected_store_fault", "storeerror", "psycopg", "sqlite", "postgresql://", "dayflow.db")


def tool_names(snapshot: Snapshot) -> dict[tuple[str, str], str]:
    """(run, call id) -> the tool the model called, from every committed step."""
    names = {}
    for (run_id, _n), step in snapshot.steps.items():
        for block in json.loads(step["assistant"]):
            if block.get("type") == "tool_use":
                names[(run_id, block.get("id"))] = block.get("name")
    return names


def results(snapshot: Snapshot) -> dict[tuple[str, str], dict]:
    """(run, call id) -> the committed tool_result (a step's results, else the journal's kept result)."""
    found = {}
    for (run_id, call), row in snapshot.approvals.items():
        if row.get("result"):
            found[(run_id, call)] = json.loads(row["result"])
    for (run_id, _n), step in snapshot.steps.items():
        for block in json.loads(step["tool_results"] or "[]"):
            found[(run_id, block.get("tool_use_id"))] = block
    return found


def check_process(proc: Proc) -> list[str]:
    problems = []
    if proc.timed_out:
        problems.append(f"{proc.tag} `{' '.join(proc.argv[1:])}` was still running after its time limit "
                        "(a retry loop or a hang)")
    if "Traceback (most recent call last)" in proc.err:
        problems.append(f"{proc.tag} printed a traceback: {proc.err.strip().splitlines()[-1][:200]}")
    last_line = (proc.err.strip().splitlines() or [""])[-1]
    # The line it exited with: a wait notice earlier on stderr ("529 ... waiting") is the CLI doing it right.
    if (proc.backpressure and not proc.killed and proc.exit_code != 0 and proc.argv[1] in ("run", "resume")
            and BACK_PRESSURE.search(last_line)):
        problems.append(f"{proc.tag} `{' '.join(proc.argv[1:3])}` gave up on back-pressure (exit {proc.exit_code}: "
                        f"{proc.err.strip().splitlines()[-1][:160]}) instead of waiting out retry-after")
    if proc.exit_code == 70:
        problems.append(f"{proc.tag} exited 70 (an internal error): {proc.err.strip()[-200:]}")
    return problems


def check_world(world: World, snapshot: Snapshot) -> list[str]:
    """Every property that must hold between any two actions."""
    problems: list[str] = []
    problems += _steps_kept(world, snapshot)
    problems += _index_level(snapshot)
    problems += _titles(snapshot)
    ledger = read_ledger(world.ledger)
    names = tool_names(snapshot)
    kept = results(snapshot)
    killed_pids = {p.pid for p in world.procs if p.killed}

    # Plain bodies: at most once per call; a body killed mid-effect is answered outcome_unknown.
    starts = Counter((line.run, line.call) for line in ledger if line.what == "start")
    ends = {(line.run, line.call) for line in ledger if line.what == "end"}
    for (run_id, call), count in starts.items():
        if count > 1:
            problems.append(f"plain tool {names.get((run_id, call), '?')} call {call} of run {run_id} ran its body "
                            f"{count} times")
    for line in ledger:
        if line.what != "start" or (line.run, line.call) in ends or line.pid not in killed_pids:
            continue
        answer = kept.get((line.run, line.call))
        if answer is not None and not (answer.get("is_error") and "outcome_unknown" in str(answer.get("content"))):
            problems.append(f"plain call {line.call} of run {line.run} was killed in its body, yet its result is "
                            f"{str(answer.get('content'))[:120]!r}, not an outcome_unknown error")

    # A fork never runs again a plain call its parent had already started when the fork was made.
    first_run: dict[str, LedgerLine] = {}
    for line in ledger:
        if line.what != "start":
            continue
        earlier = first_run.setdefault(line.call, line)
        if earlier.run != line.run and _descends(snapshot, line.run, earlier.run) \
                and earlier.at < _unix(snapshot.runs[line.run]["created_at"]):
            problems.append(f"fork {line.run} ran plain call {line.call} again, which its ancestor "
                            f"{earlier.run} had started before the fork was made")

    # Idempotent effects: once per key.
    made = Counter(line.value for line in ledger if line.what == "idem-end" and line.created == 1)
    for key, count in made.items():
        if count > 1:
            problems.append(f"idempotent key {key}: its task was created {count} times")
    task_keys = Counter(t["idempotency_key"] for t in snapshot.tasks)
    for key, count in task_keys.items():
        if count > 1:
            problems.append(f"task key {key} stored {count} times")
    for key in made:
        if f"sim-{key}" not in task_keys:
            problems.append(f"idempotent key {key}: the body was told it made the task, but no task is stored")

    # One driver at a time: a run's ledger lines come from one process, then another, never interleaved.
    by_run: dict[str, list[int]] = defaultdict(list)
    for line in ledger:
        if not by_run[line.run] or by_run[line.run][-1] != line.pid:
            by_run[line.run].append(line.pid)
    for run_id, pids in by_run.items():
        if len(pids) != len(set(pids)):
            problems.append(f"run {run_id} was driven by two processes at once (tool bodies by pids {pids})")

    # Decisions: a call that waits runs nothing; an approval tool's body runs only when approved;
    # a denied call never runs; an edited approval runs with the edited arguments; a decision never changes.
    ran = {(line.run, line.call): line for line in ledger if line.what in ("start", "idem-start", "read")}
    approval_tools = {t.name for t in world.spec.tools if t.approval}
    for (run_id, call), line in ran.items():
        row = snapshot.approvals.get((run_id, call))
        state = row["state"] if row else None
        if state in ("pending", "denied"):
            problems.append(f"call {call} of run {run_id} ran although it is {state}")
        elif names.get((run_id, call)) in approval_tools and state != "approved":
            problems.append(f"approval tool {names.get((run_id, call))} call {call} of run {run_id} ran with no "
                            f"approval (journal state {state})")
        edited = json.loads(row["edited_input"]).get("note") if row and row.get("edited_input") else None
        if edited and line.what == "start" and line.value != edited:
            problems.append(f"call {call} of run {run_id} was approved with edited arguments but ran with "
                            f"note {line.value!r}, not {edited!r}")
    for key, row in snapshot.approvals.items():
        if row["state"] in ("approved", "denied"):
            decision = (row["state"], row["decided_at"], row["decided_by"], row["edited_input"], row["reason"])
            before = world.seen_decisions.setdefault(key, decision)
            if before != decision:
                problems.append(f"the decision on call {key[1]} of run {key[0]} changed: {before} -> {decision}")
        made_decision = world.decisions.get(key)
        if made_decision and row["state"] != made_decision:
            problems.append(f"call {key[1]} of run {key[0]}: `{made_decision}` exited 0 but the journal says "
                            f"{row['state']}")

    # Nothing that names the database, or the fault inside it, is a committed tool result.
    for (run_id, call), block in kept.items():
        text = str(block.get("content")).lower()
        leaked = [word for word in LEAKS if word in text]
        if leaked:
            problems.append(f"call {call} of run {run_id}: a store failure became its tool result "
                            f"({str(block.get('content'))[:160]!r})")

    problems += _mcp_calls(world, snapshot, names, kept)
    problems += _children(world, snapshot, names, kept)

    # Back-pressure never fails a run.
    for run in snapshot.runs.values():
        if run["status"] == "failed" and BACK_PRESSURE.search(run["error"] or ""):
            problems.append(f"run {run['id']} was set failed by back-pressure: {(run['error'] or '')[:160]!r}")
    problems += world.model.problems
    world.model.problems.clear()
    return problems


def _mcp_calls(world: World, snapshot: Snapshot, names: dict, kept: dict) -> list[str]:
    """The plain MCP tool (``sim__send``): its body runs at most once per call id, counted by the server in
    its own file. Its server is not killed with its client (the MCP SDK starts it in a session of its own),
    so a call whose client was killed mid-way may have run its body once, to the end: it is then answered
    ``outcome_unknown``, never run again. A kept result is that, or the body's own answer (and then the
    server finished the body). Read-only and idempotent MCP calls may run again: not counted."""
    problems = []
    starts: dict[str, list] = defaultdict(list)
    ended = set()
    for line in read_mcp_ledger(world.mcp_ledger):
        if line.tool == "send":
            if line.what == "mcp-start":
                starts[line.call].append(line)
            else:
                ended.add(line.call)
    holders: dict[str, list[str]] = defaultdict(list)  # call id -> the runs whose steps hold it (forks copy it)
    for (run_id, call), name in names.items():
        if name == MCP_PLAIN:
            holders[call].append(run_id)
    for call, lines in starts.items():
        runs = holders.get(call, [])
        first = min(line.at for line in lines)
        # A fork made before the body first ran holds the call unrun and may run it; one made after must not.
        origin = _origin(snapshot, runs, call)
        allowed = 1 + sum(1 for run_id in runs if run_id != origin
                          and _unix(snapshot.runs[run_id]["created_at"]) < first)
        if len(lines) > allowed:
            problems.append(f"plain MCP tool {MCP_PLAIN} call {call} ran its body {len(lines)} times (server pids "
                            f"{[line.pid for line in lines]}, clients {[line.client for line in lines]}) for "
                            f"{len(runs)} run(s) holding it")
    for (run_id, call), block in kept.items():
        if names.get((run_id, call)) != MCP_PLAIN:
            continue
        text = str(block.get("content"))
        if block.get("is_error") and "outcome_unknown" in text:
            continue
        if not block.get("is_error") and "sent " in text:
            if call not in ended:
                problems.append(f"plain MCP call {call} of run {run_id} was answered {text[:80]!r}, yet the "
                                "server never finished its body")
        elif call in starts:
            problems.append(f"plain MCP call {call} of run {run_id} ran its body, yet its result is "
                            f"{text[:120]!r}: neither its answer nor an outcome_unknown error")
    return problems


def _origin(snapshot: Snapshot, runs: list[str], call: str) -> str | None:
    """Of the runs holding ``call``, the one whose step holding it was paid for (not a fork's copy)."""
    for run_id in runs:
        forked_at = snapshot.runs[run_id].get("forked_at") or 0
        for (step_run, n), step in snapshot.steps.items():
            if step_run == run_id and n > forked_at and f'"{call}"' in step["assistant"]:
                return run_id
    return None


def _children(world: World, snapshot: Snapshot, names: dict, kept: dict) -> list[str]:
    """Subagents: one child run per (parent run, call id), ever; only a subagent call has one; a child that
    finished answers its parent (the result is its final text) and is never asked again."""
    problems = []
    by_call: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run in snapshot.runs.values():
        if run.get("parent_call_id"):
            by_call[(run["parent_id"], run["parent_call_id"])].append(run["id"])
    for key, ids in by_call.items():
        if len(ids) > 1:
            problems.append(f"call {key[1]} of run {key[0]} has {len(ids)} child runs: {sorted(ids)}")
        before = world.children.setdefault(key, ids[0])
        if before not in ids:
            problems.append(f"call {key[1]} of run {key[0]} had child run {before}, now {sorted(ids)}")
        if names.get(key) != SUBAGENT_TOOL:  # a child is made by a call its parent's committed step holds
            problems.append(f"child run {ids[0]} belongs to call {key[1]} of run {key[0]}, which is "
                            f"{'a ' + names[key] + ' call' if key in names else 'no call of that run'}")
        child = snapshot.runs[ids[0]]
        if child["status"] != "done":
            continue
        world.children_done.setdefault(child["id"], time.monotonic())
        answer = kept.get(key)
        if answer is not None and not answer.get("is_error") and (child["final_text"] or "") not in \
                str(answer.get("content")):
            problems.append(f"call {key[1]} of run {key[0]} was answered {str(answer.get('content'))[:100]!r}, "
                            f"not its finished child {child['id']}'s answer {(child['final_text'] or '')[:60]!r}")
    # A finished child is never asked again: no paid call of its task after it was first seen done (unless
    # another run shares the task: a fork of the child, or the child of a fork of the parent).
    tasks = Counter(run["user_msg"] for run in snapshot.runs.values())
    requests = world.model.recorded()
    for child_id, seen_done in world.children_done.items():
        task = snapshot.runs[child_id]["user_msg"]
        if tasks[task] > 1:
            continue
        late = [r for r in requests if r.status == 200 and r.task == task and r.arrived > seen_done]
        if late:
            problems.append(f"child run {child_id} had finished, yet {len(late)} more paid call(s) were made for it "
                            f"(by {sorted({r.tag for r in late})})")
    return problems


def _titles(snapshot: Snapshot) -> list[str]:
    """A run's title is the one its latest ``set_title`` call that ran left: the last call with a kept result,
    or a later one that ran without one yet (killed after its write: run again, it changes nothing). Never
    a title no call asked for, never one from before a call that was kept."""
    problems = []
    kept = results(snapshot)
    calls: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for (run_id, n), step in sorted(snapshot.steps.items()):
        for block in json.loads(step["assistant"]):
            if block.get("type") == "tool_use" and block.get("name") == "set_title":
                calls[run_id].append((block.get("id"), (block.get("input") or {}).get("title")))
    for run_id, run in snapshot.runs.items():
        title, made = run.get("title"), calls.get(run_id, [])
        ran = [i for i, (call, _t) in enumerate(made) if (run_id, call) in kept
               and not kept[(run_id, call)].get("is_error")]
        if not made:
            continue  # titled at creation or not at all: nothing of this tool's to check
        allowed = {t for _c, t in made[ran[-1]:]} if ran else {None} | {t for _c, t in made}
        if title not in allowed:
            problems.append(f"run {run_id} is titled {title!r}; its set_title calls that may have run last "
                            f"asked for {sorted(map(str, allowed))}")
    return problems


def _descends(snapshot: Snapshot, run_id: str, ancestor: str) -> bool:
    seen = set()
    while run_id in snapshot.runs and run_id not in seen:
        seen.add(run_id)
        run_id = snapshot.runs[run_id].get("parent_id")
        if run_id == ancestor:
            return True
    return False


def _unix(stamp) -> float:
    """A stored timestamp (ISO text on SQLite, text or a datetime on PostgreSQL) as unix seconds."""
    if isinstance(stamp, datetime):
        return stamp.timestamp() if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc).timestamp()
    parsed = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return parsed.timestamp() if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc).timestamp()


def _steps_kept(world: World, snapshot: Snapshot) -> list[str]:
    """No committed step lost or changed; steps 1..N with no gap; totals add up."""
    problems = []
    for key, before in world.seen_steps.items():
        now = snapshot.steps.get(key)
        if now is None:
            problems.append(f"committed step {key[1]} of run {key[0]} is gone")
            continue
        if now["assistant"] != before["assistant"]:
            problems.append(f"committed step {key[1]} of run {key[0]} was rewritten")
        if before["tool_results"] is not None and now["tool_results"] != before["tool_results"]:
            problems.append(f"the committed tool results of step {key[1]} of run {key[0]} changed")
    for key, step in snapshot.steps.items():
        if key not in world.seen_steps or world.seen_steps[key]["tool_results"] is None:
            world.seen_steps[key] = {"assistant": step["assistant"], "tool_results": step["tool_results"]}
    for run in snapshot.runs.values():
        numbers = sorted(n for (run_id, n) in snapshot.steps if run_id == run["id"])
        if numbers != list(range(1, len(numbers) + 1)) or run["step_count"] != len(numbers):
            problems.append(f"run {run['id']}: steps {numbers} with step_count {run['step_count']}")
    return problems


def _index_level(snapshot: Snapshot) -> list[str]:
    """The search index, written after each commit (issue #28): a step is in it once per part, and a step no
    longer marked ``index_pending`` has its turn there (and its results, once committed): a search that
    skips the marked steps' index rows and reads their rows then misses nothing and shows nothing twice."""
    if snapshot.index_rows is None:
        return []
    problems = []
    parts = Counter((run_id, n, 1 if part == 2 else part) for run_id, n, part in snapshot.index_rows)
    for (run_id, n, part), count in parts.items():
        if count > 1:
            problems.append(f"step {n} of run {run_id} has {count} index rows for part {part}")
    for (run_id, n), step in snapshot.steps.items():
        if step.get("index_pending", 0):
            continue
        if (run_id, n, 1) not in parts:
            problems.append(f"step {n} of run {run_id} is not marked for indexing, yet its turn is not indexed")
        if step["tool_results"] not in (None, "[]") and (run_id, n, 3) not in parts:
            problems.append(f"step {n} of run {run_id} is not marked for indexing, yet its results are not indexed")
    return problems


def check_calls(world: World, final: bool) -> list[str]:
    """Model calls <= committed steps + deaths, per process (a race's two processes together)."""
    problems = []
    groups: dict[str, list[Proc]] = defaultdict(list)
    for proc in world.procs:
        groups[proc.group or proc.tag].append(proc)
    total_calls = total_steps = total_deaths = 0
    for name, procs in groups.items():
        tags = {p.tag for p in procs}
        calls = world.model.paid(tags)
        steps = procs[0].steps_after - procs[0].steps_before
        deaths = sum(1 for p in procs if p.killed)
        total_calls, total_steps, total_deaths = total_calls + calls, total_steps + steps, total_deaths + deaths
        if calls > steps + deaths:
            what = " + ".join(f"`{' '.join(p.argv[1:3])}`" for p in procs)
            problems.append(f"{name} {what} made {calls} paid call(s) for {steps} committed step(s) and "
                            f"{deaths} death(s)")
    if final:
        world.outcome.paid_calls, world.outcome.paid_steps = total_calls, total_steps
        problems += _tree_calls(world)
    return problems


def _tree_calls(world: World) -> list[str]:
    """The invariant over each tree of runs (a run, its forks and its children, by ``parent_id``): the paid
    calls made for its runs (told apart by their task, the first message) <= the tree's paid steps + the
    deaths of the processes that called for it. A compacted run's requests no longer start with its task:
    they are left out (the per-process count above holds them)."""
    snapshot = read_snapshot(world.db)

    def root(run_id: str) -> str:
        seen = set()
        while snapshot.runs[run_id].get("parent_id") in snapshot.runs and run_id not in seen:
            seen.add(run_id)
            run_id = snapshot.runs[run_id]["parent_id"]
        return run_id

    tree_of_task: dict[str, set[str]] = defaultdict(set)
    for run in snapshot.runs.values():
        tree_of_task[run["user_msg"]].add(root(run["id"]))
    steps: Counter = Counter()
    for (run_id, n) in snapshot.steps:
        if n > (snapshot.runs[run_id].get("forked_at") or 0):
            steps[root(run_id)] += 1
    killed = {p.tag for p in world.procs if p.killed}
    calls: Counter = Counter()
    callers: dict[str, set[str]] = defaultdict(set)
    requests = world.model.recorded()
    for request in requests:
        trees = tree_of_task.get(request.task, set())
        if len(trees) != 1:
            continue
        (tree,) = trees
        callers[tree].add(request.tag)
        calls[tree] += request.status == 200
    world.outcome.child_runs = sum(1 for run in snapshot.runs.values() if run.get("parent_call_id"))
    problems = []
    for tree, count in calls.items():
        deaths = len(callers[tree] & killed)
        if count > steps[tree] + deaths:
            problems.append(f"the tree of run {tree} ({sum(1 for r in snapshot.runs if root(r) == tree)} run(s)) "
                            f"had {count} paid call(s) for {steps[tree]} committed step(s) and {deaths} death(s)")
    return problems


def check_verdicts(snapshot: Snapshot) -> list[str]:
    """Once settled, every run has a verdict: done, failed with why, waiting, out of budget, or cancelled."""
    problems = []
    for run in snapshot.runs.values():
        if run["status"] not in VERDICTS:
            problems.append(f"run {run['id']} reached no verdict after settling: {run['status']}")
        elif run["status"] == "failed" and not (run["error"] or "").strip():
            problems.append(f"run {run['id']} failed without saying why")
    return problems


def check_fleet_numbers(target: str, snapshot: Snapshot) -> list[str]:
    """Once settled, the metrics' numbers (``Store.fleet_stats``, what ``dayflow metrics`` and a worker's
    /metrics serve) agree with the rows: runs by status, nothing ready in the queue, nothing held."""
    from dayflow_tui.store import open_store

    store = open_store(target, create=False, upgrade=False)
    try:
        stats = store.fleet_stats()
    finally:
        store.close()
    problems = []
    counted = Counter(run["status"] for run in snapshot.runs.values())
    for status in set(counted) | {s for s, n in stats.by_status.items() if n}:
        if stats.by_status.get(status, 0) != counted.get(status, 0):
            problems.append(f"fleet_stats counts {stats.by_status.get(status, 0)} {status} run(s), the rows "
                            f"{counted.get(status, 0)}")
    if stats.queue_ready or stats.held:
        problems.append(f"settled, yet fleet_stats has {stats.queue_ready} run(s) ready in the queue and "
                        f"{stats.held} held")
    return problems
