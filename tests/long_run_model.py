"""A scripted model that makes long runs: many steps of reading the inbox and creating tasks.

The offline model finishes in 3 steps; compaction needs a history that
grows. Each step here calls ``read_inbox`` (about 2 KB of payload) and
``create_task`` with a new key; every 7th step sends an invalid due date
(an ``invalid_input`` error) and every 11th calls a tool that does not exist
(``unknown_tool``). The last step writes a brief that lists every task key
(tried or created) and error code it can still find in the request it was sent, so a brief
written from a compacted request shows whether the decisions survived.

Answers depend only on the request (the step number is read from the ids of
the last tool calls in it), never on call order, so a crashed and resumed
run gets exactly the answers a run that never stopped gets.
"""

from __future__ import annotations

import json
import re

from anthropic.types import Message

from dayflow_tui.money.tokens import estimate_tokens

STEPS = 40
_ID = re.compile(r"^toolu_long(\d+)_")


def task_key(step: int) -> str:
    return f"long-{step:02d}"


def task_title(step: int) -> str:
    # A quote and non-ASCII text: the summary must keep titles exactly, escapes and all.
    return f'Follow up {step:02d}: "Q4" numbers for Zoë'


def makes_invalid_task(step: int) -> bool:
    return step % 7 == 0


def calls_unknown_tool(step: int) -> bool:
    return step % 11 == 0


def step_of(messages: list[dict]) -> int:
    """The step this request asks for: one after the step whose tool calls it last answers."""
    for message in reversed(messages):
        if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
            continue
        for block in message["content"]:
            found = _ID.match(str(block.get("id", ""))) if block.get("type") == "tool_use" else None
            if found:
                return int(found.group(1)) + 1
    return 1


def _tool_use(step: int, index: int, name: str, args: dict) -> dict:
    return {"type": "tool_use", "id": f"toolu_long{step:02d}_{index}", "name": name, "input": args}


def respond(messages: list[dict], steps: int = STEPS) -> tuple[list[dict], str]:
    step = step_of(messages)
    if step >= steps:
        seen = json.dumps(messages, ensure_ascii=False)
        keys = sorted(set(re.findall(r"long-\d\d", seen)))
        codes = sorted(set(re.findall(r"\b(invalid_input|unknown_tool)\b", seen)))
        text = f"## Brief\nTasks: {', '.join(keys)}\nErrors met: {', '.join(codes)}"
        return [{"type": "text", "text": text}], "end_turn"
    task = {"title": task_title(step), "idempotency_key": task_key(step)}
    if makes_invalid_task(step):
        task["due"] = "2026-02-30"
    calls = [("read_inbox", {"limit": 8}), ("create_task", task)]
    if calls_unknown_tool(step):
        calls.append(("read_contacts", {"query": "Priya"}))
    content = [{"type": "text", "text": f"Step {step}: reading the inbox and filing a follow-up."}]
    content += [_tool_use(step, i, name, args) for i, (name, args) in enumerate(calls)]
    return content, "tool_use"


def answer(request: dict, steps: int = STEPS) -> dict:
    """The JSON body a server would send for ``request``."""
    content, stop_reason = respond(request["messages"], steps)
    prompt = {k: request.get(k) for k in ("system", "tools", "messages")}
    return {"id": f"msg_long{step_of(request['messages']):02d}", "type": "message", "role": "assistant",
            "model": request["model"], "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": estimate_tokens(prompt), "output_tokens": estimate_tokens(content)}}


class LongRunClient:
    """Quacks like ``anthropic.Anthropic``: counts its calls and keeps each request as sent."""

    def __init__(self, steps: int = STEPS):
        self.steps = steps
        self.calls = 0
        self.requests: list[dict] = []
        self.messages = self

    def create(self, **request) -> Message:
        self.calls += 1
        frozen = json.loads(json.dumps(request))  # what was sent, as JSON, at call time
        self.requests.append(frozen)
        return Message.model_validate(answer(frozen, self.steps))
