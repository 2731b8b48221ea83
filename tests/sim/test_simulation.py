"""The simulation: random agents driven by real ``dayflow`` processes through features and faults at once.

Each example draws an agent (read-only, idempotent, plain and approval
tools) and a sequence of actions (new runs, resumes, workers, approvals,
denials, edited approvals, second decisions, forks, agent edits, races),
each with a kill -9 aimed somewhere and a fault laid over it (429 and 529
bursts, a held lock, a store error inside a tool, a dropped PostgreSQL
connection), and checks the promises after every action (``checks.py``).
docs/reliability.md ("The simulation") lists every fault and property.

First the plans shrunk from failures it found (``known_plans.py``) are
replayed; then random examples. Budget: by default each backend runs for
``DAYFLOW_SIM_BUDGET_S`` seconds (10, the known plans included, at least one
random example); ``DAYFLOW_SIM_EXAMPLES=N`` runs exactly N random examples
per backend instead; ``DAYFLOW_SIM_KNOWN=0`` leaves out the known plans.
``DAYFLOW_SIM_SEED`` fixes the base seed (printed on every run),
``DAYFLOW_SIM_ONLY=I`` replays example I of it, ``DAYFLOW_SIM_PLAN='{...}'``
replays a printed (shrunk) plan exactly; ``DAYFLOW_SIM_SHRINK_S`` bounds the
shrinking of the first failure (60 s; 0: none); ``DAYFLOW_SIM_REPORT=FILE``
writes every example's figures as JSON lines.
"""

from __future__ import annotations

import json
import os
import random
import time
from urllib.parse import urlsplit

import pytest

from ..conftest import PG_SKIP_REASON, PG_URL, pg_schema
from .known_plans import MUST_LAND, known_plans
from .plan import Plan, draw_plan
from .simulate import Database, fresh_dir, run_example, shrink



def _int_env(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else None


# The default budget ends well inside 30 minutes; a large DAYFLOW_SIM_EXAMPLES gets two minutes an example.
pytestmark = pytest.mark.timeout(max(1800, 120 * (_int_env("DAYFLOW_SIM_EXAMPLES") or 0)))


class Backend:
    """A fresh database per example: a SQLite file, or a PostgreSQL schema behind the fault proxy."""

    def __init__(self, name: str, proxy=None):
        self.name = name
        self.proxy = proxy

    def attempt(self, plan: Plan, workdir):
        with fresh_dir(workdir):
            if self.name == "sqlite":
                db = str(workdir / "sim.db")
                return run_example(plan, workdir, Database(db, db))
            with pg_schema() as url:
                return run_example(plan, workdir, Database(url, self.proxy.url(url), self.proxy))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sim_backend(request):
    if request.param == "sqlite":
        yield Backend("sqlite")
        return
    if not PG_URL:
        pytest.skip(PG_SKIP_REASON)
    from ..fault_proxy import FaultProxy

    server = urlsplit(PG_URL)
    with FaultProxy((server.hostname or "127.0.0.1", server.port or 5432)) as proxy:
        yield Backend("postgres", proxy)


def _failure(plan: Plan, outcome) -> str:
    """The plan, what went wrong, and the line that replays it exactly."""
    return (f"{plan.describe()}\n  problems:\n" + "\n".join(f"    - {p}" for p in outcome.problems)
            + f"\n  replay exactly: DAYFLOW_SIM_PLAN='{plan.to_json()}'")


def _record(report: str, backend: str, index: int, plan: Plan, outcome) -> None:
    """One example's figures, a JSON line appended to ``report``."""
    with open(report, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"backend": backend, "seed": plan.seed, "index": index, "actions": len(plan.actions),
                             "seconds": round(outcome.seconds, 2), "slowest_s": round(outcome.slowest_s, 2),
                             "processes": outcome.processes, "kills": outcome.kills,
                             "paid_calls": outcome.paid_calls, "paid_steps": outcome.paid_steps,
                             "skipped": outcome.skipped, "verbs": outcome.verbs, "faults": outcome.faults,
                             "kills_at": outcome.kills_at, "replies": outcome.replies,
                             "mcp": plan.agent.mcp, "subagent": plan.agent.subagent,
                             "mcp_bodies": outcome.mcp_bodies, "child_runs": outcome.child_runs,
                             "problems": outcome.problems}) + "\n")


def test_simulation_mixing_features_and_faults(sim_backend, tmp_path):
    base_seed = os.environ.get("DAYFLOW_SIM_SEED") or str(random.randrange(10**6))
    examples = _int_env("DAYFLOW_SIM_EXAMPLES")
    budget_s = float(os.environ.get("DAYFLOW_SIM_BUDGET_S") or 10)
    only = _int_env("DAYFLOW_SIM_ONLY")
    shrink_s = float(os.environ.get("DAYFLOW_SIM_SHRINK_S") or 60)
    report = os.environ.get("DAYFLOW_SIM_REPORT")
    print(f"\nsimulation on {sim_backend.name}: DAYFLOW_SIM_SEED={base_seed}")

    given = os.environ.get("DAYFLOW_SIM_PLAN")
    plans = iter([Plan.from_json(given)]) if given else None
    started = time.monotonic()
    failures: list[str] = []
    if plans is None and only is None and os.environ.get("DAYFLOW_SIM_KNOWN", "1") != "0":
        for what, plan in known_plans(sim_backend.name):
            outcome = sim_backend.attempt(plan, tmp_path / "known")
            landed = {moment: outcome.kills_at.get(moment, 0) for moment in MUST_LAND.get(plan.seed, {})}
            if landed != MUST_LAND.get(plan.seed, {}):
                outcome.problems.append(f"its kills landed {landed}, not {MUST_LAND[plan.seed]}: it missed a junction")
            if outcome.problems:
                text = f"known plan ({what}) failed again:\n" + _failure(plan, outcome)
                print(text)
                failures.append(text)
        print(f"simulation on {sim_backend.name}: {len(known_plans(sim_backend.name))} known plan(s) in "
              f"{time.monotonic() - started:.1f} s")
    index = only or 0
    ran = 0
    shrunk = False  # only the first failure is shrunk (shrinking costs a run per try)
    while True:
        if plans is not None:
            plan = next(plans, None)
            if plan is None:
                break
            if plan.backend != sim_backend.name:
                pytest.skip(f"the replayed plan is for {plan.backend}")
        else:
            if only is not None and ran:
                break
            if examples is not None and ran >= examples:
                break
            if examples is None and only is None and ran and time.monotonic() - started > budget_s:
                break
            seed = f"{base_seed}:{sim_backend.name}:{index}"
            plan = draw_plan(seed, sim_backend.name, random.Random(seed).randint(3, 8))
        outcome = sim_backend.attempt(plan, tmp_path / f"ex{index}")
        ran += 1
        if report:
            _record(report, sim_backend.name, index, plan, outcome)
        if outcome.problems:
            text = (f"example {index} (DAYFLOW_SIM_SEED={base_seed} DAYFLOW_SIM_ONLY={index}), seed {plan.seed}:\n"
                    + _failure(plan, outcome))
            if not shrunk and shrink_s > 0 and plans is None:
                shrunk = True
                small, small_outcome, tries = shrink(plan, outcome,
                                                     lambda p: sim_backend.attempt(p, tmp_path / "shrink"),
                                                     budget_s=shrink_s)
                text += f"\n  shrunk in {tries} tries to:\n" + _failure(small, small_outcome)
            print(text)
            failures.append(text)
        index += 1
    print(f"simulation on {sim_backend.name}: {ran} example(s) in {time.monotonic() - started:.1f} s, "
          f"{len(failures)} failing")
    assert not failures, "\n\n".join(failures)
