"""2. Growth: database bytes and per-step commit time as a run gets long, ours vs LangGraph.

Both sides run the same agent-like steps (``common.agent_step``: a short
assistant turn with one tool call and about 2 KB of tool result) for 10, 100
and 400 steps, each length in a fresh file, then one final answer.

- Ours: the loop's two commits per step, ``append_step`` (the response) and
  ``set_tool_results`` (the results), under a lease.
- LangGraph: ``SqliteSaver`` checkpointing a two-node agent/tools
  ``StateGraph`` whose state is the message list (``MessagesState``), the
  standard shape of a LangGraph tool-calling agent. Its per-step time is the
  wall time of one agent -> tools cycle minus the time spent inside our two
  node functions (which only build the messages): the checkpointing and graph
  engine cost. ``durability="sync"``: each checkpoint is written before the
  next node runs, as ours commits before the next paid call (LangGraph's
  default, "async", writes it in a background thread while the next node runs).

The two sides run in lockstep (our step i is committed inside LangGraph's
tools node i), so load from anything else on the machine hits both alike.

Sizes are the file after a WAL checkpoint (the data, not a transient log),
minus the empty database, per step.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from bench.common import Row, scale, agent_step, median, ms, settled_bytes, size, step_record, workdir

LENGTHS = scale((10, 100, 400), (10, 20))
_LAST = 25  # per-step time at length N: the median of the last 25 steps (all of them for N = 10)


class OurRun:
    """Our store driving one run, a step at a time, the way the loop commits it."""

    def __init__(self, path: Path, n_steps: int):
        from dayflow_tui.store import open_store

        self.path = path
        self.store = open_store(path)
        self.empty = settled_bytes(path)
        self.run, self.lease = self.store.create_claimed_run("Prepare my day.", model="offline",
                                                             max_steps=n_steps + 1)
        self.times: list[float] = []

    def step(self, i: int) -> None:
        assistant, results = agent_step(i)
        record = step_record(i, assistant)
        started = time.perf_counter()
        self.store.append_step(self.run.id, record, lease=self.lease)
        self.store.set_tool_results(self.run.id, i, results, lease=self.lease)
        self.times.append(time.perf_counter() - started)

    def finish(self, n: int) -> int:
        from dayflow_tui.store import StepRecord

        final = StepRecord(n=n, stop_reason="end_turn", assistant=[{"type": "text", "text": "done"}])
        self.store.append_step(self.run.id, final, lease=self.lease, final_status="done", final_text="done")
        self.store.release(self.lease)
        self.store.close()
        return settled_bytes(self.path) - self.empty


def side_by_side(n_steps: int, tmp: Path) -> dict:
    """Both sides for ``n_steps``, in lockstep: our step i is committed inside LangGraph's tools node i.

    So the two sides meet the same moments of machine load; our commits are
    timed on their own and taken out of LangGraph's cycle time.
    """
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    ours = OurRun(tmp / f"ours-{n_steps}.db", n_steps)
    path = tmp / f"langgraph-{n_steps}.db"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute("PRAGMA synchronous = FULL")  # the same durability as ours (SqliteSaver sets WAL itself)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.commit()
    empty = settled_bytes(path)

    entered: list[float] = []  # perf_counter at each agent-node entry
    inside: list[float] = []  # seconds spent inside the node bodies (and our commits), per cycle
    state = {"i": 0}

    def agent(graph_state):
        entered.append(time.perf_counter())
        started = time.perf_counter()
        state["i"] += 1
        i = state["i"]
        if i > n_steps:
            message = AIMessage(content="done")
        else:
            assistant, _results = agent_step(i)
            call = assistant[1]
            message = AIMessage(content=assistant[0]["text"],
                                tool_calls=[{"name": call["name"], "args": call["input"], "id": call["id"]}])
        inside.append(time.perf_counter() - started)
        return {"messages": [message]}

    def tools(graph_state):
        started = time.perf_counter()
        last = graph_state["messages"][-1]
        _assistant, results = agent_step(state["i"])
        message = ToolMessage(content=results[0]["content"], tool_call_id=last.tool_calls[0]["id"])
        ours.step(state["i"])
        inside[-1] += time.perf_counter() - started
        return {"messages": [message]}

    def route(graph_state):
        return "tools" if graph_state["messages"][-1].tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    app = graph.compile(checkpointer=saver)
    app.invoke({"messages": [HumanMessage(content="Prepare my day.")]},
               {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * n_steps + 10},
               durability="sync")
    conn.close()
    lg_times = [entered[k + 1] - entered[k] - inside[k] for k in range(n_steps)]
    return {"ours": (ours.finish(n_steps + 1), ours.times), "langgraph": (settled_bytes(path) - empty, lg_times)}


def _json_per_step(n: int = 400) -> float:
    """The JSON a step actually stores (assistant blocks + tool results), averaged over a run."""
    from dayflow_tui.store import dumps

    total = sum(len(dumps(a).encode()) + len(dumps(r).encode()) for a, r in map(agent_step, range(1, n + 1)))
    return total / n


def measure() -> dict:
    found: dict = {}
    with workdir("growth") as tmp:
        for n in LENGTHS:
            both = side_by_side(n, tmp)
            found[("ours", n)] = both["ours"]
            found[("langgraph", n)] = both["langgraph"]
    return found


def run(quick: bool = False) -> list[Row]:
    found = measure()
    rows = []
    for n in LENGTHS:
        our_bytes, our_t = found[("ours", n)]
        lg_bytes, lg_t = found[("langgraph", n)]
        tail_ours, tail_lg = median(our_t[-_LAST:]), median(lg_t[-_LAST:])
        at_400 = n == LENGTHS[-1]
        rows.append(Row("2 growth", f"DB bytes per step after {n} steps ({size(_json_per_step())} JSON/step)",
                        f"{size(our_bytes / n)}/step ({size(our_bytes)})",
                        f"LangGraph {size(lg_bytes / n)}/step ({size(lg_bytes)})", our_bytes / lg_bytes,
                        "<= 0.01x (100x smaller)" if at_400 else "", our_bytes * 100 <= lg_bytes if at_400 else None,
                        f"{lg_bytes / our_bytes:,.0f}x smaller than LangGraph"))
        rows.append(Row("2 growth", f"per-step commit time at step {n} (median of last {min(_LAST, n)})",
                        ms(tail_ours), f"LangGraph {ms(tail_lg)}", tail_ours / tail_lg, "", None,
                        "ours: append_step + set_tool_results; " + (
                            f"{tail_lg / tail_ours:.1f}x faster" if tail_ours <= tail_lg
                            else f"{tail_ours / tail_lg:.1f}x slower")))
    first, last = found[("ours", LENGTHS[0])][0] / LENGTHS[0], found[("ours", LENGTHS[-1])][0] / LENGTHS[-1]
    lg_first = found[("langgraph", LENGTHS[0])][0] / LENGTHS[0]
    lg_last = found[("langgraph", LENGTHS[-1])][0] / LENGTHS[-1]
    rows.append(Row("2 growth", f"bytes/step at {LENGTHS[-1]} vs at {LENGTHS[0]} steps (flat = 1x)",
                    f"{last / first:.2f}x", f"LangGraph {lg_last / lg_first:.1f}x", None, "flat",
                    last / first <= 1.25))
    return rows
