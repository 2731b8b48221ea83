"""Agents and tools as code: a tool is one decorated function, an agent is a value.

```python
from typing import Annotated, Literal
from dayflow_tui.agent.define import Agent, Param, ToolContext, tool

@tool(read_only=True)
def weather(city: str, unit: Literal["C", "F"] = "C") -> dict:
    \"\"\"Today's weather in a city.

    Args:
        city: The city's name.
    \"\"\"
    return {"ok": True, "city": city, "temp": 21}

agent = Agent(name="forecaster", system="Answer with today's weather.", tools=(weather,))
```

``@tool`` derives the JSON schema the API is sent from the signature (types,
``Literal`` choices, ``X | None`` and defaults make a field optional) and the
docstring (its first paragraph describes the tool, ``Args:`` lines describe
the fields), with ``Annotated[..., Param(...)]`` for bounds. The model's
arguments are checked against that schema before the function runs: a bad
call becomes an ``is_error`` tool_result with a code, never an exception.

A tool carries its kind, which says what may happen after a crash:
``read_only`` (safe to run again), ``idempotent`` (a side effect keyed by
one argument, ``key=``, so a repeat is a no-op: ``create_task``), or plain
(a side effect that must never run twice: started and not finished, it is
answered "outcome unknown" instead of being run again). A first parameter
named ``ctx`` receives the ``ToolContext`` (the store, the run id, today).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from ..config.errors import McpUnavailable
from .agent_options import check_options
from .tool_faults import abandon_on_store_fault, tool_error_message
from .tools import CallPaused, ToolContext, ToolInputError, validate

READ_ONLY, IDEMPOTENT, PLAIN = "read_only", "idempotent", "plain"
HANDBACKS = ("final", "summary")  # what a subagent's call answers with: its final text, or its transcript compacted
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Param:
    """Bounds and a description for one argument: ``Annotated[int, Param(minimum=1, maximum=50)]``."""

    description: str | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    min_length: int | None = None
    max_length: int | None = None
    format: str | None = None  # "date": YYYY-MM-DD


class ToolDefinitionError(TypeError):
    """A function that cannot be a tool (an argument type JSON Schema cannot say, a bad name)."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict
    fn: Callable[..., Any] = field(compare=False)
    kind: str = PLAIN
    key: str | None = None  # idempotent: the argument that names the side effect
    takes_context: bool = False
    needs_approval: bool | Callable[[dict], bool] = field(default=False, compare=False)
    checks_input: bool = field(default=True, compare=False)  # False: the MCP server checks its own arguments
    server: str | None = None  # the MCP server it comes from (None: a Python function)
    mcp_annotations: dict | None = field(default=None, compare=False)  # as the server listed them (camelCase)
    subagent: Any = field(default=None, compare=False, repr=False)  # the Agent a call hands its task to
    handback: str = "final"  # a subagent's tool: its final text ("final") or its transcript compacted ("summary")

    def to_api(self) -> dict:
        """The tool as the Messages API is sent it."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def wants_approval(self, args: Any) -> bool:
        if callable(self.needs_approval):
            try:
                return bool(self.needs_approval(args if isinstance(args, dict) else {}))
            except Exception:
                return True  # a predicate that cannot decide asks the person
        return bool(self.needs_approval)

    def run(self, ctx: ToolContext, args: Any) -> tuple[Any, bool]:
        """``(payload, is_error)``: the arguments checked first; the function's own failure is a result too."""
        try:
            validate(self.input_schema, args) if self.checks_input else _an_object(args)
        except ToolInputError as exc:
            return {"ok": False, "error": {"code": "invalid_input", "message": str(exc)}}, True
        try:
            payload = self.fn(ctx, **args) if self.takes_context else self.fn(**args)
        except (McpUnavailable, CallPaused):
            raise  # no outcome: the server could not answer (a failed attempt), or the call waits (a child run)
        except Exception as exc:  # the model is told, the run goes on
            abandon_on_store_fault(ctx, exc)  # a database fault is no outcome: it ends the attempt instead
            return {"ok": False, "error": {"code": "tool_error", "message": tool_error_message(ctx, exc)}}, True
        return payload, False

    def rules(self) -> dict:
        """What may happen to a call of this tool after a crash, and who must allow it: part of the fingerprint."""
        rules = {"kind": self.kind, "key": self.key, "approval": approval_rule(self.needs_approval)}
        if self.handback != "final":
            rules["handback"] = self.handback  # what the parent is told changes what its runs were sent
        return rules

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _an_object(args: Any) -> None:
    if not isinstance(args, dict):
        raise ToolInputError("the arguments must be a JSON object")


def tool(fn: Callable | None = None, *, name: str | None = None, read_only: bool = False,
         idempotent: str | None = None, needs_approval: bool | Callable[[dict], bool] = False) -> Any:
    """Make ``fn`` a tool. ``read_only=True``, or ``idempotent="key_argument"``, or neither (plain)."""

    def make(fn: Callable) -> Tool:
        tool_name = name or fn.__name__
        if not _NAME.match(tool_name):
            raise ToolDefinitionError(f"tool name {tool_name!r}: letters, digits, _ and - only, at most 64")
        if read_only and idempotent:
            raise ToolDefinitionError(f"tool {tool_name}: read_only or idempotent, not both")
        description, arg_docs = _docstring(fn)
        schema, takes_context = _schema(fn, arg_docs)
        if idempotent is not None and idempotent not in schema["properties"]:
            raise ToolDefinitionError(f"tool {tool_name}: idempotent key {idempotent!r} is not one of its arguments")
        kind = READ_ONLY if read_only else IDEMPOTENT if idempotent else PLAIN
        return Tool(tool_name, description or tool_name, schema, fn, kind, idempotent, takes_context, needs_approval)

    return make(fn) if fn is not None else make


def _docstring(fn: Callable) -> tuple[str, dict[str, str]]:
    doc = inspect.getdoc(fn) or ""
    paragraphs = re.split(r"\n\s*\n", doc.strip()) if doc.strip() else []
    description = " ".join(paragraphs[0].split()) if paragraphs and not paragraphs[0].startswith("Args:") else ""
    args: dict[str, str] = {}
    in_args, current = False, None
    for line in doc.splitlines():
        if line.strip() in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if not in_args:
            continue
        if line and not line.startswith(" "):
            in_args = False
            continue
        match = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
        if match and len(line) - len(line.lstrip()) <= 8:
            current = match.group(1)
            args[current] = match.group(2).strip()
        elif current and line.strip():
            args[current] += " " + line.strip()
    return description, args


_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_type(hint: Any, where: str) -> dict:
    origin = typing.get_origin(hint)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is Literal:
        values = list(typing.get_args(hint))
        kinds = {_SCALARS.get(type(v)) for v in values}
        if len(kinds) != 1 or None in kinds:
            raise ToolDefinitionError(f"{where}: Literal choices must all be str, int, float or bool")
        return {"type": kinds.pop(), "enum": values}
    if origin in (list, tuple) or hint in (list, tuple):
        args = typing.get_args(hint)
        spec: dict = {"type": "array"}
        if args and args[0] is not Ellipsis:
            spec["items"] = _json_type(args[0], where)
        return spec
    if origin is dict or hint is dict:
        return {"type": "object"}
    raise ToolDefinitionError(f"{where}: {hint!r} has no JSON Schema type (use str, int, float, bool, Literal, "
                              "list, dict or X | None)")


def _schema(fn: Callable, arg_docs: dict[str, str]) -> tuple[dict, bool]:
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    properties: dict[str, dict] = {}
    required: list[str] = []
    params = list(signature.parameters.values())
    takes_context = bool(params) and params[0].name == "ctx"
    for param in params[1:] if takes_context else params:
        where = f"tool {fn.__name__}, argument {param.name}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"{where}: *args and **kwargs cannot be described to the model")
        hint = hints.get(param.name, str)
        extra: Param | None = None
        if typing.get_origin(hint) is typing.Annotated:
            hint, *metadata = typing.get_args(hint)
            extra = next((m for m in metadata if isinstance(m, Param)), None)
        optional = param.default is not inspect.Parameter.empty
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(hint) if a is not type(None)]
            if len(members) != 1:
                raise ToolDefinitionError(f"{where}: a union of several types cannot be described")
            hint, optional = members[0], True
        spec = _json_type(hint, where)
        if extra is not None:
            for key, value in (("minimum", extra.minimum), ("maximum", extra.maximum),
                               ("minLength", extra.min_length), ("maxLength", extra.max_length),
                               ("format", extra.format)):
                if value is not None:
                    spec[key] = value
        description = (extra.description if extra is not None and extra.description else arg_docs.get(param.name))
        if description:
            spec["description"] = description
        properties[param.name] = spec
        if not optional:
            required.append(param.name)
    schema: dict = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema, takes_context


@dataclass(frozen=True)
class Agent:
    """An agent: what it is told, which tools it has, and its limits. ``task`` is the default request."""

    name: str
    system: str
    tools: tuple[Tool, ...] = ()
    model: str | None = None
    max_steps: int = 12
    task: str | None = None
    # Each run's title: a string, where ``{task}`` stands for the first line of the run's task
    # ("Triage: {task}"). None: the title shown is made from the task and the answer (views.titles).
    title: str | None = None
    # Request options in the Messages API's own shapes (agent_options.py says what each takes).
    max_tokens: int | None = None  # None: the model's longest reply (model_limits.py)
    thinking: dict | None = field(default=None, hash=False)
    tool_choice: dict | None = field(default=None, hash=False)
    temperature: float | None = None
    top_p: float | None = None
    stop_sequences: tuple[str, ...] | None = None
    metadata: dict | None = field(default=None, hash=False)
    server_tools: tuple[dict, ...] = field(default=(), hash=False)
    betas: tuple[str, ...] = ()
    cache_ttl: str = "5m"
    mcp_servers: tuple = field(default=(), hash=False)  # ``mcp.stdio/http(...)``: tools join on ``connected``
    # Agents this one hands tasks to: each is a tool named after it (``subagent_tool``), its calls child runs.
    subagents: tuple = field(default=(), hash=False)
    handback: str = "final"  # as a subagent: what its parent's call is answered with (``HANDBACKS``)
    mcp_listed: bool = field(default=False, hash=False, repr=False)  # the servers' tools are in ``tools``

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ToolDefinitionError(f"agent name {self.name!r}: letters, digits, _ and - only, at most 64")
        if self.title is not None and (not isinstance(self.title, str) or not self.title.strip()):
            raise ToolDefinitionError(f"agent {self.name}: title must be a non-empty string (\"{{task}}\" for the task)")
        if self.handback not in HANDBACKS:
            raise ToolDefinitionError(f"agent {self.name}: handback must be one of {', '.join(HANDBACKS)}")
        subagents = tuple(self.subagents)
        for item in subagents:
            if not isinstance(item, Agent):
                raise ToolDefinitionError(f"agent {self.name}: subagent {item!r} is not a dayflow Agent")
        object.__setattr__(self, "subagents", subagents)
        tools = tuple(self.tools)
        # Made once: ``dataclasses.replace`` (``connected``) runs this again with the tools made the first time.
        tools += tuple(subagent_tool(item) for item in subagents
                       if not any(t.subagent is item for t in tools))
        for item in tools:
            if not isinstance(item, Tool):
                raise ToolDefinitionError(f"agent {self.name}: {item!r} is not a @tool")
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ToolDefinitionError(f"agent {self.name}: two tools share a name ({', '.join(twice)}; a "
                                      "subagent's tool is named after the agent)")
        object.__setattr__(self, "tools", tools)
        from .model_limits import limits_for

        limits = limits_for(self.model) if self.model else None
        check_options(self.name, names, limits=limits if limits is not None and limits.known else None,
                      max_tokens=self.max_tokens, thinking=self.thinking, tool_choice=self.tool_choice,
                      temperature=self.temperature, top_p=self.top_p, stop_sequences=self.stop_sequences,
                      metadata=self.metadata, server_tools=self.server_tools, betas=self.betas,
                      cache_ttl=self.cache_ttl)
        for name in ("stop_sequences", "server_tools", "betas", "mcp_servers"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))

    def title_for(self, task: str) -> str | None:
        """The title a new run of this agent is given for ``task`` (None: the agent sets none)."""
        if self.title is None:
            return None
        first = next((line.strip() for line in task.splitlines() if line.strip()), "")
        return self.title.replace("{task}", first)

    @property
    def schemas(self) -> list[dict]:
        """The tools as the API is sent them: the agent's own, then its server tools as given."""
        return [t.to_api() for t in self.tools] + [dict(item) for item in self.server_tools]

    def request_options(self) -> dict:
        """The body fields this agent sets beyond model, messages, system and tools, as given (none: {})."""
        options: dict[str, Any] = {}
        for name in ("thinking", "tool_choice", "temperature", "top_p", "metadata"):
            value = getattr(self, name)
            if value is not None:
                options[name] = value
        if self.stop_sequences is not None:
            options["stop_sequences"] = list(self.stop_sequences)
        return options

    def options(self) -> dict:
        """Every option set away from its default (for the fingerprint, ``dayflow show`` and the preview)."""
        shown: dict[str, Any] = dict(self.request_options())
        if self.max_tokens is not None:
            shown["max_tokens"] = self.max_tokens
        if self.server_tools:
            shown["server_tools"] = [dict(item) for item in self.server_tools]
        if self.betas:
            shown["betas"] = list(self.betas)
        if self.cache_ttl != "5m":
            shown["cache_ttl"] = self.cache_ttl
        return shown

    def tool_named(self, name: Any) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def fingerprint(self) -> str:
        """What a resume must find unchanged: everything that decides what is sent or what may run again.

        The system prompt, the model and each tool's schema (what the API is sent), and each tool's kind,
        idempotency key and approval rule (what a crash or a person's decision lets run): changing a plain
        tool to ``read_only`` after a kill in its body, or dropping ``needs_approval`` from a queued run's
        tool, would otherwise run a side effect nobody allowed.
        """
        return _digest(self.describe())

    def legacy_fingerprint(self) -> str:
        """The fingerprint as Dayflow recorded it before tool kinds and approval rules were part of it.

        A run recorded then is checked for what was recorded (prompt, schemas, model) and nothing more.
        """
        shape = {"system": self.system, "tools": self.schemas, "model": self.model}
        if self.options():  # options did not exist then: a run recorded then cannot have had them
            shape["options"] = self.options()
        return _digest(shape)

    def describe(self) -> dict:
        """The agent's shape as the run records it (``agent_shape``): what ``what_changed`` compares.

        The request options join it only when one is set, so an agent without any keeps the fingerprint
        its runs recorded before options existed.
        """
        shape = {"system": self.system, "model": self.model,
                 "tools": {t.name: t.input_schema for t in self.tools},
                 "tool_rules": {t.name: t.rules() for t in self.tools}}
        options = self.options()
        if options:
            shape["options"] = options
        if self.mcp_servers:
            shape["mcp_servers"] = {server.name: server.describe() for server in self.mcp_servers}
        listed = {t.name: {"server": t.server, "annotations": t.mcp_annotations or {}}
                  for t in self.tools if t.server is not None}
        if listed:  # the hints as the server gave them: recorded in the run, shown by the dashboard
            shape["mcp_tools"] = listed
        return shape

    def connected(self) -> "Agent":
        """This agent with its MCP servers' tools (listed from each server, which starts now); itself when it
        has no servers or they are listed already."""
        if not self.mcp_servers or self.mcp_listed:
            return self
        from . import mcp_servers

        found = []
        for server in self.mcp_servers:
            for listed in mcp_servers.list_tools(server):
                found.append(Tool(listed.offered_name, listed.description, listed.input_schema,
                                  _mcp_caller(server, listed.name), listed.kind, None, False,
                                  listed.needs_approval, checks_input=False, server=server.name,
                                  mcp_annotations=listed.annotations))
        return dataclasses.replace(self, tools=self.tools + tuple(found), mcp_listed=True)


def subagent_tool(agent: Agent, *, name: str | None = None, description: str | None = None,
                  handback: str | None = None) -> Tool:
    """A tool that hands its ``task`` to ``agent`` as a durable child run (``subagents.py`` says how).

    It is idempotent, keyed by the call itself: the child's run id is fixed by the parent run and the call's id.
    ``handback`` (default: the agent's own) says what the call answers with: the child's final text, or a
    deterministic compaction of its transcript.
    """
    if not isinstance(agent, Agent):
        raise ToolDefinitionError(f"{agent!r} is not a dayflow Agent")
    handback = handback or agent.handback
    if handback not in HANDBACKS:
        raise ToolDefinitionError(f"subagent {agent.name}: handback must be one of {', '.join(HANDBACKS)}")
    tool_name = name or agent.name
    if not _NAME.match(tool_name):
        raise ToolDefinitionError(f"tool name {tool_name!r}: letters, digits, _ and - only, at most 64")
    first = next((line.strip() for line in agent.system.splitlines() if line.strip()), "")
    about = description or (f"Hand a task to the {agent.name} agent, which works on it on its own and answers "
                            f"with its result. {first}".strip())
    schema = {"type": "object", "properties": {"task": {
        "type": "string", "minLength": 1, "maxLength": 20000,
        "description": f"What the {agent.name} agent should do, with everything it needs to know."}},
        "required": ["task"], "additionalProperties": False}

    def hand_over(ctx: ToolContext, task: str) -> str:
        if ctx.hand_over is None:
            raise RuntimeError(f"the {agent.name} agent's call needs a run to hang its child run on")
        return ctx.hand_over(ctx, agent, task, handback)

    return Tool(tool_name, about[:1000], schema, hand_over, IDEMPOTENT, None, True, False, subagent=agent,
                handback=handback)


def _mcp_caller(server: Any, name: str) -> Callable[..., Any]:
    def call(**arguments: Any) -> Any:
        from . import mcp_servers

        payload, is_error = mcp_servers.call(server, name, arguments)
        if is_error:
            raise McpToolError(payload)
        return payload

    return call


class McpToolError(Exception):
    """The MCP tool answered ``isError``: its content is the tool's error message."""


def _digest(shape: dict) -> str:
    return hashlib.sha256(json.dumps(shape, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def approval_rule(needs_approval: bool | Callable[[dict], bool]) -> str | bool:
    """An approval rule as it is compared across a resume: a flag, or a predicate by its source.

    A predicate's source is the honest identity of the rule (its name can stay while its body changes);
    where the source cannot be read (built in the REPL, a C function) its qualified name stands in.
    """
    if not callable(needs_approval):
        return bool(needs_approval)
    try:
        source = inspect.getsource(needs_approval)
    except (OSError, TypeError):
        source = f"{getattr(needs_approval, '__module__', '?')}.{getattr(needs_approval, '__qualname__', '?')}"
    return "predicate:" + hashlib.sha256(inspect.cleandoc(source).encode()).hexdigest()[:16]
