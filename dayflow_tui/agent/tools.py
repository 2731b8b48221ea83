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

from . import sample_data
from ..store import Store
from ..testhook import pause_point

TOOL_SCHEMAS: list[dict] = [
    {
        "name": "read_inbox",
        "description": "Read the newest mails in the user's inbox (sender, subject, received time, snippet).",
        "input_schema": {
            "type": "object",
            "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 50,
                                     "description": "How many mails, newest first (default 20)."}},
            "additionalProperties": False,
        },
    },
    {
        "name": "read_calendar",
        "description": "Read the user's calendar events for today or for the coming week.",
        "input_schema": {
            "type": "object",
            "properties": {"range": {"type": "string", "enum": ["today", "week"]}},
            "required": ["range"],
            "additionalProperties": False,
        },
    },
    {
        "name": "read_tasks",
        "description": "Read the user's task list.",
        "input_schema": {
            "type": "object",
            "properties": {"include_done": {"type": "boolean", "description": "Also list finished tasks."}},
            "additionalProperties": False,
        },
    },
    {
        "name": "create_task",
        "description": ("Create a follow-up task. idempotency_key must be stable for the thing the task is "
                        "about (for example 'mail-<mail id>'): a key that exists returns the existing task."),
        "input_schema": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 200},
                "due": {"type": "string", "format": "date", "description": "YYYY-MM-DD"},
                "notes": {"type": "string", "maxLength": 2000},
            },
            "required": ["title", "idempotency_key"],
            "additionalProperties": False,
        },
    },
]
SCHEMAS_BY_NAME = {schema["name"]: schema for schema in TOOL_SCHEMAS}
READ_ONLY_TOOLS = frozenset({"read_inbox", "read_calendar", "read_tasks"})

_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ToolInputError(ValueError):
    pass


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
        if "minimum" in spec and value < spec["minimum"] or "maximum" in spec and value > spec["maximum"]:
            raise ToolInputError(f"field {name!r} must be between {spec['minimum']} and {spec['maximum']}")
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
    store: Store
    run_id: str
    today: date


def _read_inbox(ctx: ToolContext, limit: int = 20) -> dict:
    mails = sample_data.inbox(ctx.today)[:limit]
    return {"ok": True, "count": len(mails), "mails": mails}


def _read_calendar(ctx: ToolContext, range: str) -> dict:  # noqa: A002 (the API's field name)
    events = sample_data.calendar(ctx.today, 1 if range == "today" else 7)
    return {"ok": True, "count": len(events), "range": range, "events": events}


def _task_json(task) -> dict:
    return {"id": task.id, "title": task.title, "due": task.due, "notes": task.notes, "done": task.done,
            "idempotency_key": task.idempotency_key}


def _read_tasks(ctx: ToolContext, include_done: bool = False) -> dict:
    tasks = ctx.store.list_tasks(include_done=include_done)
    return {"ok": True, "count": len(tasks), "tasks": [_task_json(t) for t in tasks]}


def _create_task(ctx: ToolContext, title: str, idempotency_key: str, due: str | None = None,
                 notes: str | None = None) -> dict:
    task, created = ctx.store.create_task(idempotency_key=idempotency_key, title=title.strip(), due=due,
                                          notes=notes, run_id=ctx.run_id)
    return {"ok": True, "created": created,
            "message": "created" if created else "a task with this idempotency_key already exists; returned it",
            "task": _task_json(task)}


_IMPLEMENTATIONS: dict[str, Callable[..., dict]] = {
    "read_inbox": _read_inbox,
    "read_calendar": _read_calendar,
    "read_tasks": _read_tasks,
    "create_task": _create_task,
}


def _error(code: str, message: str) -> dict:
    return {"ok": False, "error": {"code": code, "message": message}}


def run_tool(ctx: ToolContext, name: str, args: Any) -> tuple[dict, bool]:
    """Execute one tool call. Returns ``(payload, is_error)``; never raises for bad input."""
    schema = SCHEMAS_BY_NAME.get(name) if isinstance(name, str) else None
    if schema is None:
        return _error("unknown_tool", f"no tool named {name!r}; available: {', '.join(SCHEMAS_BY_NAME)}"), True
    try:
        validate(schema["input_schema"], args)
    except ToolInputError as exc:
        return _error("invalid_input", str(exc)), True
    return _IMPLEMENTATIONS[name](ctx, **args), False


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


def _result(block: dict, payload: dict, is_error: bool) -> dict:
    result = {"type": "tool_result", "tool_use_id": block.get("id"),
              "content": json.dumps(payload, ensure_ascii=False)}
    if is_error:
        result["is_error"] = True
    return result


tool_result = _result  # one tool_result block: the answer to one tool_use
