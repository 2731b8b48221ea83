"""The agent's tools: their JSON schemas (sent to the API) and their execution.

Every argument is checked against its schema before anything runs, so a
malformed call from the model becomes an ``is_error`` tool_result with a
clear code and never a side effect.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from typing import Any, Callable

from ..store import Store
from ..testhook import pause_point
from .tool_content import ToolContentError, content_blocks, is_rich

_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ToolInputError(ValueError):
    pass


class CallPaused(Exception):
    """The call has no outcome yet and keeps none: it waits (a subagent's run waits for a person's decision).

    Not a tool error: the step's other calls are answered, then the run itself waits, and the call runs again
    (finding its child where it stopped) when the run is driven next.
    """


def validate(schema: dict, args: Any) -> None:
    """Check ``args`` against the subset of JSON Schema the tool schemas use."""
    if not isinstance(args, dict):
        raise ToolInputError(f"arguments must be an object, got {type(args).__name__}")
    props = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in args]
    if missing:
        raise ToolInputError(f"missing required field(s): {', '.join(missing)}")
    unknown = [name for name in args if name not in props]
    if unknown and schema.get("additionalProperties") is False:
        raise ToolInputError(f"unknown field(s): {', '.join(sorted(unknown))}")
    for name, value in args.items():
        spec = props[name]
        if not _TYPES[spec["type"]](value):
            raise ToolInputError(f"field {name!r} must be {spec['type']}, got {type(value).__name__}")
        if "enum" in spec and value not in spec["enum"]:
            raise ToolInputError(f"field {name!r} must be one of {spec['enum']}, got {value!r}")
        low, high = spec.get("minimum"), spec.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = (f"between {low} and {high}" if low is not None and high is not None
                      else f"at least {low}" if low is not None else f"at most {high}")
            raise ToolInputError(f"field {name!r} must be {bounds}, got {value!r}")
        item_type = spec.get("items", {}).get("type") if spec["type"] == "array" else None
        if item_type is not None and not all(_TYPES[item_type](item) for item in value):
            raise ToolInputError(f"field {name!r} must be a list of {item_type}")
        if "minLength" in spec and len(value.strip()) < spec["minLength"]:
            raise ToolInputError(f"field {name!r} must not be empty")
        if "maxLength" in spec and len(value) > spec["maxLength"]:
            raise ToolInputError(f"field {name!r} is longer than {spec['maxLength']} characters")
        if isinstance(value, str) and "\x00" in value:
            # PostgreSQL text cannot hold NUL; refuse it on every backend alike, before any side effect.
            raise ToolInputError(f"field {name!r} contains a NUL character")
        if spec.get("format") == "date":
            try:
                if not _DATE.match(value):
                    raise ValueError
                date.fromisoformat(value)
            except ValueError:
                raise ToolInputError(f"field {name!r} must be a date YYYY-MM-DD, got {value!r}") from None


@dataclass
class ToolContext:
    """What a tool may use besides its arguments; ``agent`` (the run's, the built-in brief included) owns the tools."""

    store: Store
    run_id: str
    today: date
    agent: Any
    call_id: str = ""  # the tool_use id of the call being run (a subagent's run is keyed by it)
    # Starts or resumes a subagent's child run and returns its answer: ``(ctx, agent, task, handback) -> str``;
    # set by whoever drives the run (``runs``), so a tool made in ``define`` reaches the driver without importing it.
    hand_over: Any = None
    lease: Any = None  # the run's lease: a child run started here stops when this run's cancel is seen
    above: tuple = ()  # the leases of the runs above this one (a subagent's parents), nearest first

    @property
    def tools_of(self) -> Any:
        return self.agent


def _error(code: str, message: str) -> dict:
    return {"ok": False, "error": {"code": code, "message": message}}


def run_tool(ctx: ToolContext, name: str, args: Any) -> tuple[Any, bool]:
    """Execute one tool call of the run's agent. Returns ``(payload, is_error)``; never raises for bad input."""
    agent = ctx.tools_of
    found = agent.tool_named(name) if isinstance(name, str) else None
    if found is None:
        names = ", ".join(t.name for t in agent.tools)
        return _error("unknown_tool", f"no tool named {name!r}; available: {names}"), True
    return found.run(ctx, args)


def run_tools(ctx: ToolContext, assistant_blocks: list[dict]) -> list[dict]:
    """One tool_result per tool_use, ids matched, in order: the next user turn."""
    results = []
    for block in assistant_blocks:
        if block.get("type") != "tool_use":
            continue
        pause_point("tools")
        payload, is_error = run_tool(ctx, block.get("name", ""), block.get("input"))
        results.append(_result(block, payload, is_error))
    return results


def cut_off_results(assistant_blocks: list[dict]) -> list[dict]:
    """Answers for the tool calls of a response that stopped at max_tokens: none of them runs.

    A call cut short can still look valid (a truncated title passes the
    schema), so running it could make a wrong side effect.
    """
    payload = _error("cut_off", "the response hit max_tokens inside this call, so it was not run; "
                     "send the call again, complete")
    return [_result(block, payload, True) for block in assistant_blocks if block.get("type") == "tool_use"]


def _result(block: dict, payload: Any, is_error: bool) -> dict:
    if is_rich(payload):  # images, documents, a list of blocks: sent as the API's content blocks
        try:
            content: Any = content_blocks(payload)
        except ToolContentError as exc:
            content, is_error = json.dumps(_error("bad_content", str(exc)), ensure_ascii=False), True
    else:
        content = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, default=str)
    result = {"type": "tool_result", "tool_use_id": block.get("id"), "content": content}
    if is_error:
        result["is_error"] = True
    return result


tool_result = _result  # one tool_result block: the answer to one tool_use

