"""8. Compaction: estimated input tokens of a 40-step inbox run, with and without compaction.

The run is made by the real loop and the real tools (a fresh database per
side): the scripted long-run model of the tests (``tests/long_run_model.py``)
calls ``read_inbox`` (about 2 KB of payload) and ``create_task`` with a new key
at every step, meets an ``invalid_input`` error every 7th step and an
``unknown_tool`` error every 11th, and writes its brief at step 40. Both
sides get the same answers; only ``compact_at`` differs.

Measured per request, summed over the 40 requests, with ``estimate_tokens``
(about 4 characters of JSON per token) of what the client was sent: system
prompt, tool schemas and messages.

- The headline is plain input tokens: compaction at 8,000 estimated tokens
  (the run's history reaches that at step 11 of 40, a quarter of its final
  size) against no compaction. A sweep of thresholds shows how the figure
  moves with the setting.
- Checked, not assumed: every request passes the API-rule validator of the
  tests, and every task key, task title and error code of the run is in the
  last (most compacted) request.
- Prompt caching changes the bill: without compaction most of each request is
  a cache read at a tenth of the price. The last line weights both runs the
  way the cache bills them (reads 0.1x, writes 1.25x), with a cache model
  that hits the longest prefix an earlier request wrote at one of its
  breakpoints (the top-level one on the last block and the summary's own).
  A last line drops the summary's breakpoint to show what it is worth.

``python -m bench --only 8`` or ``python bench/bench_compaction.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # ``python bench/bench_compaction.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, workdir  # noqa: E402

HEADLINE_THRESHOLD = 8_000
SWEEP = (4_000, 8_000, 16_000, 24_000)
TARGET = 0.60  # at least 60% fewer input tokens
CACHE_READ, CACHE_WRITE = 0.1, 1.25


def _estimate(obj) -> int:
    from dayflow_tui.money.tokens import estimate_tokens

    return estimate_tokens(obj)


def request_tokens(request: dict) -> int:
    return _estimate({key: request.get(key) for key in ("system", "tools", "messages")})


def drive(tmp: Path, compact_at: int | None) -> tuple[list[dict], object, list]:
    """One 40-step run; returns (requests as sent, run, tasks)."""
    from dayflow_tui.agent.runs import run_brief
    from dayflow_tui.store import open_store
    from tests.long_run_model import STEPS, LongRunClient

    store = open_store(tmp / f"compact-{compact_at or 'off'}.db")
    try:
        client = LongRunClient()
        result = run_brief(store, client=client, max_steps=STEPS + 5, compact_at=compact_at or 0)
        if result.status != "done" or client.calls != STEPS:
            raise RuntimeError(f"the run ended {result.status} after {client.calls} calls")
        return client.requests, store.get_run(result.run_id), store.list_tasks(run_id=result.run_id)
    finally:
        store.close()


def check(requests: list[dict], tasks: list) -> None:
    """Every request is valid; every decision is still in the last request."""
    from tests.api_rules import problems

    for n, request in enumerate(requests, start=1):
        found = problems(request["messages"])
        if found:
            raise AssertionError(f"request {n} breaks the API's rules: {found[:3]}")
    messages = requests[-1]["messages"]
    # The raw JSON (tool_use inputs) and the summary's texts as the model reads them.
    last = json.dumps(messages, ensure_ascii=False) + "\n".join(
        b.get("text", "") for m in messages if isinstance(m["content"], list) for b in m["content"])
    for task in tasks:
        for needed in (f'"{task.idempotency_key}"', json.dumps(task.title, ensure_ascii=False)[1:-1]):
            if needed not in last:
                raise AssertionError(f"task {task.idempotency_key}: {needed} is missing from the last request")
    for code in ("invalid_input", "unknown_tool"):
        if code not in last:
            raise AssertionError(f"error {code} is missing from the compacted request")


def _blocks(request: dict) -> list[str]:
    """The request as the cache sees it: one JSON string per cacheable block, in order."""
    out = [json.dumps(request["system"]), *(json.dumps(t) for t in request["tools"])]
    for message in request["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out += [json.dumps({k: v for k, v in b.items() if k != "cache_control"}) for b in blocks]
    return out


def _breakpoints(request: dict) -> list[int]:
    """Block counts at which this request writes a cache entry."""
    marks, position = [], 1 + len(request["tools"])
    for message in request["messages"]:
        content = message["content"]
        for block in ([content] if isinstance(content, str) else content):
            position += 1
            if isinstance(block, dict) and "cache_control" in block:
                marks.append(position)
    return marks + [position]  # top-level automatic caching: the last block


def cache_weighted(requests: list[dict]) -> float:
    """Input tokens as a prompt cache bills them: the longest earlier-written prefix read, the rest written."""
    written: set[tuple[str, ...]] = set()
    total = 0.0
    for request in requests:
        blocks = _blocks(request)
        sizes = [(len(b) + 3) // 4 for b in blocks]
        hit = max((n for n in range(len(blocks), 0, -1) if tuple(blocks[:n]) in written), default=0)
        read = sum(sizes[:hit])
        total += CACHE_READ * read + CACHE_WRITE * (sum(sizes) - read)
        for mark in _breakpoints(request):
            written.add(tuple(blocks[:mark]))
    return total


def measure() -> dict:
    with workdir("compaction") as tmp:
        plain, _run, _tasks = drive(tmp, None)
        check(plain, _tasks)
        found = {"plain": plain, "sweep": {}}
        for threshold in SWEEP:
            requests, run, tasks = drive(tmp, threshold)
            check(requests, tasks)
            found["sweep"][threshold] = requests
            if threshold == HEADLINE_THRESHOLD:
                found["tasks"] = len(tasks)
                # A compacted request has the summary as a second user turn right after the task.
                found["compacted_steps"] = sum(1 for r in requests
                                               if len(r["messages"]) > 1 and r["messages"][1]["role"] == "user")
    return found


def run(quick: bool = False) -> list[Row]:
    found = measure()  # deterministic: quick or not, one pass is the measurement
    plain = found["plain"]
    plain_sum = sum(request_tokens(r) for r in plain)
    head = found["sweep"][HEADLINE_THRESHOLD]
    head_sum = sum(request_tokens(r) for r in head)
    saved = 1 - head_sum / plain_sum
    rows = [Row("8 compaction", f"est. input tokens, 40 requests, compact at {HEADLINE_THRESHOLD:,}",
                f"{head_sum:,}", f"no compaction {plain_sum:,}", head_sum / plain_sum,
                f">= {TARGET:.0%} fewer", saved >= TARGET,
                f"{saved:.0%} fewer; {found['compacted_steps']} of 40 requests compacted; all "
                f"{found['tasks']} tasks and both error codes in the last request")]
    for threshold, requests in found["sweep"].items():
        if threshold == HEADLINE_THRESHOLD:
            continue
        total = sum(request_tokens(r) for r in requests)
        rows.append(Row("8 compaction", f"est. input tokens, compact at {threshold:,}", f"{total:,}",
                        f"no compaction {plain_sum:,}", total / plain_sum, note=f"{1 - total / plain_sum:.0%} fewer"))
    weighted_plain, weighted_head = cache_weighted(plain), cache_weighted(head)
    rows.append(Row("8 compaction", f"cache-weighted input tokens (read 0.1x, write 1.25x), compact at "
                    f"{HEADLINE_THRESHOLD:,}", f"{weighted_head:,.0f}", f"no compaction {weighted_plain:,.0f}",
                    weighted_head / weighted_plain, note=f"{1 - weighted_head / weighted_plain:.0%} fewer"))
    unmarked = cache_weighted(_without_breakpoints(head))
    rows.append(Row("8 compaction", "the same, summary without its cache breakpoint (design check)",
                    f"{unmarked:,.0f}", f"no compaction {weighted_plain:,.0f}", unmarked / weighted_plain,
                    note="why the summary carries a breakpoint"))
    return rows


def _without_breakpoints(requests: list[dict]) -> list[dict]:
    stripped = json.loads(json.dumps(requests))
    for request in stripped:
        for message in request["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                block.pop("cache_control", None)
    return stripped


def main() -> int:
    from bench.run_all import table

    print(table(run()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
