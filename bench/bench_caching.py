"""16. Prompt caching: the dollars of a 40-step run with Dayflow's cache breakpoints, and without them.

The run is made by the real loop, tools and store (a fresh database per side): the scripted 40-step model
of the tests (``tests/long_run_model.py``: ``read_inbox`` and ``create_task`` every step, a brief at step
40) answers, and its usage is reported the way the offline model reports a prompt cache
(``agent.offline._cache_usage``): with a breakpoint on the last message, a request reads the prefix the
previous request wrote (everything up to its own last message) and writes the rest; with only the
system prompt's breakpoint, it reads the tools and system prompt; with none, nothing is cached. The
dollars are Dayflow's own accounting of the stored run (``money.cost.run_cost``) at claude-sonnet-4-5's
list prices (input $3, 5m writes $3.75, reads $0.30, output $15 per million tokens).

Three sides, one pass each (the figures are deterministic):

- **breakpoints** (the default: after the system prompt and on the last message);
- **system only** (the request's message breakpoint taken off before the model sees it);
- **none** (every ``cache_control`` taken off: what a request without caching pays).

``python -m bench --only 16`` or ``python bench/bench_caching.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # ``python bench/bench_caching.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, workdir  # noqa: E402

MODEL = "claude-sonnet-4-5"
TARGET = 0.5  # at least half the dollars saved by the breakpoints


def _strip(request: dict, keep_system: bool) -> dict:
    stripped = json.loads(json.dumps(request))
    for message in stripped["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            block.pop("cache_control", None)
    for tool in stripped.get("tools") or []:
        tool.pop("cache_control", None)
    if not keep_system and isinstance(stripped.get("system"), list):
        for block in stripped["system"]:
            block.pop("cache_control", None)
    return stripped


class CachingLongRun:
    """The scripted long-run model, with usage split the way a prompt cache reports it."""

    def __init__(self, side: str):
        from tests.long_run_model import STEPS

        self.side, self.steps, self.calls = side, STEPS, 0
        self.messages = self

    def create(self, **request):
        from anthropic.types import Message

        from dayflow_tui.agent.offline import _cache_usage
        from dayflow_tui.money.tokens import estimate_tokens
        from tests.long_run_model import respond, step_of

        self.calls += 1
        sent = json.loads(json.dumps(request))
        if self.side != "breakpoints":
            sent = _strip(sent, keep_system=self.side == "system only")
        content, stop_reason = respond(sent["messages"], self.steps)
        total = estimate_tokens({k: sent.get(k) for k in ("system", "tools", "messages")})
        read, written = _cache_usage({**sent, "cache_control": None}, total)
        return Message.model_validate({
            "id": f"msg_cache{step_of(sent['messages']):02d}", "type": "message", "role": "assistant",
            "model": MODEL, "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": total - read - written, "cache_creation_input_tokens": written,
                      "cache_read_input_tokens": read, "output_tokens": estimate_tokens(content)}})


def drive(tmp: Path, side: str):
    from dayflow_tui.agent.runs import run_brief
    from dayflow_tui.money.cost import run_cost
    from dayflow_tui.store import open_store

    store = open_store(tmp / f"cache-{side.replace(' ', '-')}.db")
    try:
        client = CachingLongRun(side)
        result = run_brief(store, client=client, model=MODEL, max_steps=client.steps + 5)
        if result.status != "done" or client.calls != client.steps:
            raise RuntimeError(f"{side}: the run ended {result.status} after {client.calls} calls")
        return run_cost(store, result.run_id)
    finally:
        store.close()


def run(quick: bool = False) -> list[Row]:
    with workdir("caching") as tmp:
        costs = {side: drive(tmp, side) for side in ("breakpoints", "system only", "none")}
    ours, system, none = (costs[s].total for s in ("breakpoints", "system only", "none"))
    saved = 1 - ours / none
    hit = costs["breakpoints"].cache_hit_rate or 0
    return [Row("16 caching", f"dollars of a 40-step run at {MODEL} list prices, breakpoints",
                f"${ours:.4f}", f"no caching ${none:.4f}", float(ours / none), f">= {TARGET:.0%} cheaper",
                saved >= TARGET, f"{saved:.0%} cheaper; {hit:.0%} of input tokens read from the cache"),
            Row("16 caching", "the same, only the system prompt's breakpoint (design check)", f"${system:.4f}",
                f"no caching ${none:.4f}", float(system / none),
                note="why the last message carries a breakpoint")]


def main() -> int:
    from bench.run_all import table

    print(table(run()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
