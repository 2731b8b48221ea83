"""OpenTelemetry traces of runs, planned: the spans a run's recorded steps become, as plain data.

One trace per run. Its root is an ``invoke_agent`` span (the run: created to
its last change, the run's token totals, a ``dayflow.run.resumed`` event
where each resume began); under it a ``chat`` span per model call (step) and
an ``execute_tool`` span per tool call. Every value comes from the database,
so a trace exported a year later is the trace sent live:

- ``chat``: ``gen_ai.request.model`` / ``gen_ai.response.model``, input and
  output tokens, cache read and cache creation tokens, the stop reason as
  ``gen_ai.response.finish_reasons``; it ends when the step was committed and
  starts ``duration_ms`` (the stored wall time of the API call) before.
- ``execute_tool``: the tool's name and call id, ``ok`` or the error code
  (``error.type``, status ERROR). Per-call times are not stored: a step's
  tools share the span from the step's commit (or the resume that ran them)
  to the commit of their results.
- Content (the messages sent, the reply, tool arguments and results) only
  when asked for (setting ``otel_content``, flag ``--content``).

Ids are derived from the run id (trace), and the run id and step (spans):
exporting again, from any database the run travelled to, sends the same ids,
which a backend that de-duplicates keeps once.

The ``plan_*`` functions are pure: a ``TraceSource`` (what the store recorded,
read once by ``read_source``) in, ``SpanPlan`` values out. The OpenTelemetry
SDK is ``export.py``'s; sending spans while a run is driven is ``live.py``'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..agent.brief import SYSTEM as SYSTEM_PROMPT
from ..agent.compaction import compact
from ..agent.events import MAX_TOKENS
from ..agent.messages import messages_from
from ..agent.replies import stored_raw
from ..agent.transcript import build_steps
from ..store import Store, effective_status, step_blocks
from ..store.status import RunStatus
from ..store.tables.resumes import run_resumes

if TYPE_CHECKING:
    from ..store.models import Run, RunResume, Step

PROVIDER = "anthropic"
AGENT_NAME = "dayflow"


# -- ids -----------------------------------------------------------------------


def _digest(text: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:size], "big")
    return value or 1  # all-zero ids are invalid in OpenTelemetry


def trace_id_of(run_id: str) -> int:
    """128-bit trace id of a run: the same in every database the run is imported into."""
    return _digest(f"dayflow/run/{run_id}", 16)


def span_id_of(run_id: str, *where: object) -> int:
    """64-bit span id of a part of a run (``"agent"``, ``(n, "chat")``, ``(n, "tool", call_id)``)."""
    return _digest("/".join(["dayflow/run", run_id, *map(str, where)]), 8)


# -- what the store recorded ---------------------------------------------------


@dataclass
class TraceSource:
    run: "Run"
    steps: list["Step"]
    resumes: list["RunResume"]
    status: str  # as users see it: "interrupted" for a running run whose owner is gone

    def step(self, n: int) -> "Step | None":
        return next((s for s in self.steps if s.n == n), None)


def read_source(store: Store, run_id: str) -> TraceSource:
    run = store.get_run(run_id)
    return TraceSource(run=run, steps=store.steps(run.id), resumes=run_resumes(store, run.id),
                       status=str(effective_status(run)))


# -- the mapping: plain data ---------------------------------------------------


@dataclass
class SpanPlan:
    """One span as the SDK will be asked to make it."""

    name: str
    span_id: int
    parent_id: int | None
    kind: str  # "internal" or "client"
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None  # set: status ERROR with this description


def ns_of(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def _common(run: "Run", operation: str) -> dict[str, Any]:
    return {"gen_ai.operation.name": operation, "gen_ai.provider.name": PROVIDER,
            # The older name of the same attribute; several backends still read only this one.
            "gen_ai.system": PROVIDER, "gen_ai.conversation.id": run.id}


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _result_text(content: Any) -> Any:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content


def _parts(content: Any) -> list[dict[str, Any]]:
    """Messages API content as the GenAI conventions' message parts."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "content": block.get("text", "")})
        elif kind == "tool_use":
            parts.append({"type": "tool_call", "id": block.get("id"), "name": block.get("name"),
                          "arguments": block.get("input")})
        elif kind == "tool_result":
            parts.append({"type": "tool_call_response", "id": block.get("tool_use_id"),
                          "response": _result_text(block.get("content"))})
        elif kind == "thinking":
            parts.append({"type": "reasoning", "content": block.get("thinking", "")})
        else:  # redacted thinking, server tools: their type, as sent
            parts.append({**block, "type": kind})
    return parts


def _messages(messages: list[dict]) -> list[dict[str, Any]]:
    return [{"role": m.get("role"), "parts": _parts(m.get("content"))} for m in messages]


def _history_before(source: TraceSource, n: int) -> list[dict]:
    """The message list as it stood when step ``n`` was called (rebuilt from the rows, as a resume does)."""
    return messages_from(source.run, [s for s in source.steps if s.n < n])


def _agent_name(run) -> str:
    """The run's own agent (the built-in brief is ``brief``); ``AGENT_NAME`` for a row that records none."""
    return str(getattr(run, "agent", None) or AGENT_NAME)[:64]


def _response_id(step: "Step") -> str | None:
    """The reply's ``id`` (``msg_...``) from the body as the API sent it, when the step kept it."""
    raw = stored_raw(getattr(step, "raw", None), getattr(step, "assistant", None))
    if not raw:
        return None
    try:
        found = json.loads(raw).get("id")
    except (ValueError, AttributeError):
        return None
    return found[:200] if isinstance(found, str) and found else None


def plan_chat(source: TraceSource, step: "Step", *, content: bool) -> SpanPlan:
    run = source.run
    end = ns_of(step.created_at) or 0
    start = end - (step.duration_ms or 0) * 1_000_000
    attributes = {
        **_common(run, "chat"),
        "gen_ai.request.model": run.model,
        # What the call asked for; steps stored before Dayflow recorded it were all sent MAX_TOKENS.
        "gen_ai.request.max_tokens": getattr(step, "max_tokens", None) or MAX_TOKENS,
        "gen_ai.response.model": step.model or run.model,
        "gen_ai.response.finish_reasons": [step.stop_reason or "unknown"],
        # input_tokens is the whole input, as the conventions ask: uncached + cache writes + cache reads.
        "gen_ai.usage.input_tokens": step.input_tokens,
        "gen_ai.usage.output_tokens": step.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": step.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": step.cache_creation_input_tokens,
        "dayflow.run.id": run.id,
        "dayflow.step": step.n,
    }
    response_id = _response_id(step)
    if response_id is not None:
        attributes["gen_ai.response.id"] = response_id
    if getattr(step, "web_search_requests", 0):
        attributes["dayflow.usage.web_search_requests"] = step.web_search_requests
    if step.duration_ms is not None:
        attributes["dayflow.call.duration_ms"] = step.duration_ms
    if step.request_est_tokens is not None:
        attributes["dayflow.request.estimated_tokens"] = step.request_est_tokens
    if step.compacted_est_tokens is not None:
        attributes["dayflow.request.compacted_tokens"] = step.compacted_est_tokens
    if content:
        with contextlib.suppress(Exception):  # a damaged row loses its content, not the span
            history = _history_before(source, step.n)
            if step.compacted_est_tokens is not None:
                # The call was sent a compacted view; compaction is deterministic code, so this is that view.
                history = compact(history, threshold_tokens=0)
            attributes["gen_ai.system_instructions"] = as_json([{"type": "text", "content": SYSTEM_PROMPT}])
            attributes["gen_ai.input.messages"] = as_json(_messages(history))
            output = {"role": "assistant", "parts": _parts(step_blocks(step, "assistant")),
                      "finish_reason": step.stop_reason}
            attributes["gen_ai.output.messages"] = as_json([output])
    return SpanPlan(name=f"chat {run.model}", span_id=span_id_of(run.id, step.n, "chat"),
                    parent_id=span_id_of(run.id, "agent"), kind="client", start_ns=start, end_ns=end,
                    attributes=attributes)


def plan_tools(source: TraceSource, step: "Step", *, content: bool) -> list[SpanPlan]:
    """The step's tool calls; none until their results were committed."""
    if step.tools_done_at is None:
        return []
    [view] = build_steps([step])
    if view.problem:
        return []
    run = source.run
    start = ns_of(step.created_at) or 0
    end = ns_of(step.tools_done_at) or start
    for resume in source.resumes:  # the tools of a step committed just before a crash ran in the resume
        at = ns_of(resume.at)
        if at is not None and start < at <= end:
            start = at
    plans = []
    for call in view.calls:
        attributes = {**_common(run, "execute_tool"), "gen_ai.tool.name": call.name,
                      "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function",
                      "dayflow.run.id": run.id, "dayflow.step": step.n, "dayflow.tool.outcome": call.outcome}
        if call.item_count is not None:
            attributes["dayflow.tool.item_count"] = call.item_count
        if call.is_error:
            attributes["error.type"] = call.error_code or "error"
        if content:
            attributes["gen_ai.tool.call.arguments"] = as_json(call.input)
            if call.result is not None:
                attributes["gen_ai.tool.call.result"] = call.result
        plans.append(SpanPlan(name=f"execute_tool {call.name}", span_id=span_id_of(run.id, step.n, "tool", call.id),
                              parent_id=span_id_of(run.id, "agent"), kind="internal", start_ns=start, end_ns=end,
                              attributes=attributes, error=call.outcome if call.is_error else None))
    return plans


def plan_agent(source: TraceSource, *, content: bool) -> SpanPlan:
    run = source.run
    start = ns_of(run.created_at) or 0
    end = max(ns_of(run.updated_at) or start, start)
    attributes = {
        **_common(run, "invoke_agent"),
        "gen_ai.agent.name": _agent_name(run),
        "gen_ai.request.model": run.model,
        "gen_ai.usage.input_tokens": run.input_tokens,
        "gen_ai.usage.output_tokens": run.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": run.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": run.cache_creation_tokens,
        "dayflow.run.id": run.id,
        "dayflow.run.status": source.status,
        "dayflow.run.steps": run.step_count,
        "dayflow.run.resumes": len(source.resumes),
    }
    if run.error and run.status != RunStatus.DONE.value:
        attributes["dayflow.run.error"] = run.error
    if content:
        attributes["gen_ai.input.messages"] = as_json(_messages([{"role": "user", "content": run.user_msg}]))
        if run.final_text:
            attributes["gen_ai.output.messages"] = as_json(
                [{"role": "assistant", "parts": _parts(run.final_text), "finish_reason": "end_turn"}])
    events = [("dayflow.run.resumed", ns_of(r.at) or start,
               {"dayflow.resume.after_step": r.after_step, "dayflow.resume.previous_status": r.previous_status,
                "host.name": r.owner_host, "process.pid": r.owner_pid}) for r in source.resumes]
    error = None
    if run.status == RunStatus.FAILED.value:
        attributes["error.type"] = "run_failed"
        error = run.error or "failed"
    return SpanPlan(name=f"invoke_agent {_agent_name(run)}", span_id=span_id_of(run.id, "agent"), parent_id=None,
                    kind="internal", start_ns=start, end_ns=end, attributes=attributes, events=events, error=error)


def plan_run(source: TraceSource, *, content: bool) -> list[SpanPlan]:
    """Every span of the run: the agent span first, then each step's chat and tool spans."""
    plans = [plan_agent(source, content=content)]
    for step in source.steps:
        plans.append(plan_chat(source, step, content=content))
        plans.extend(plan_tools(source, step, content=content))
    return plans
