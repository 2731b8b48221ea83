"""A run's transcript as plain data: what the CLI's ``show`` and the dashboard render.

Pairs every tool call with its result and summarises each result (ok or
error code, item count) without interpreting any of the content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from ..money.cost import Cost, step_cost
from ..store import step_blocks


@dataclass(slots=True)  # no __dict__: one object fewer per call for the garbage collector to walk
class ToolCall:
    id: str
    name: str
    input: object
    result: str | None = None  # the tool_result content as sent (JSON text for our tools)
    is_error: bool = False
    error_code: str | None = None
    item_count: int | None = None
    # A person's part in this call (approvals): "waiting ...", "approved by ...", "denied by ...: reason".
    decision: str | None = None
    # An MCP tool's server and what its recorded annotations made of it (``views.transcript.attach_mcp``).
    server: str | None = None
    hints: str | None = None

    @property
    def outcome(self) -> str:
        if self.result is None:
            return "waiting for a decision" if self.decision and self.decision.startswith("waiting") else "pending"
        if self.is_error:
            return f"error {self.error_code or ''}".strip()
        return "ok"

    def pretty_input(self) -> str:
        return json.dumps(self.input, indent=2, ensure_ascii=False)

    def compact_input(self) -> str:
        return json.dumps(self.input, ensure_ascii=False)

    def pretty_result(self) -> str:
        if self.result is None:
            return ""
        try:
            return json.dumps(json.loads(self.result), indent=2, ensure_ascii=False)
        except ValueError:
            return self.result


@dataclass(slots=True)  # a live view holds thousands; see ToolCall
class StepView:
    n: int
    stop_reason: str | None
    texts: list[str]
    calls: list[ToolCall]
    other_blocks: list[dict]  # thinking, server tools...: shown by type only
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cum_input: int
    cum_output: int
    created_at: str
    seconds_since_previous: float | None
    duration_ms: int | None
    request_est_tokens: int | None
    compacted_est_tokens: int | None
    raw_assistant: str
    raw_tool_results: str | None
    problem: str | None = None  # a stored row that could not be read
    model: str | None = None  # the model that answered (the reply's own name)
    cost: "Cost | None" = None  # this call's dollars (None: no price for its model)
    cum_cost: "Cost | None" = None  # the run's dollars up to and including this step


def _parse_time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None


def _summarise(call: ToolCall) -> None:
    try:
        payload = json.loads(call.result) if call.result is not None else None
    except ValueError:
        return
    if not isinstance(payload, dict):
        return
    error = payload.get("error")
    if isinstance(error, dict):
        call.error_code = str(error.get("code") or "error")
    elif call.is_error:
        call.error_code = "error"
    count = payload.get("count")
    if isinstance(count, int) and not isinstance(count, bool):
        call.item_count = count
    elif isinstance(payload.get("task"), dict):
        call.item_count = 1


def _result_text(block: dict) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return " ".join(_part_text(part) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _part_text(part: dict) -> str:
    """A content block as a line: its text, or what an image or document is (never its data)."""
    if part.get("type") in ("image", "document"):
        source = part.get("source") if isinstance(part.get("source"), dict) else {}
        data = source.get("data")
        size = f" {_size(data)}" if isinstance(data, str) and not data.startswith("dayflow-blob:") else ""
        return f"[{part['type']} {source.get('media_type', '?')}{size}]"
    return str(part.get("text", ""))


def _size(base64_text: str) -> str:
    size = len(base64_text) * 3 // 4
    return f"{size / 1024 / 1024:.1f} MB" if size >= 1024 * 1024 else f"{max(size // 1024, 1)} KB"


def build_steps(steps: list, model: str | None = None, *, spent: Cost | None = None,
                after: StepView | None = None) -> list[StepView]:
    """Turn ``steps`` rows into views, pairing tool calls with their results by id.

    ``model`` (the run's) prices steps that recorded none; ``spent`` is what
    the steps before these cost; ``after`` is the view of the step just before
    these (a live view decoding only new steps goes on from its totals).
    """
    views: list[StepView] = []
    prices: dict = {}  # per model, for this call
    cum_in = cum_out = 0
    cum_cost: Cost | None = Cost() if spent is None else spent
    previous: datetime | None = None
    if after is not None:
        cum_in, cum_out, cum_cost = after.cum_input, after.cum_output, after.cum_cost
        previous = _parse_time(after.created_at)
    for step in steps:
        cum_in += step.input_tokens
        cum_out += step.output_tokens
        created = _parse_time(step.created_at)
        gap = (created - previous).total_seconds() if created and previous else None
        previous = created or previous
        view = StepView(n=step.n, stop_reason=step.stop_reason, texts=[], calls=[], other_blocks=[],
                        input_tokens=step.input_tokens, output_tokens=step.output_tokens,
                        cache_read_tokens=step.cache_read_input_tokens,
                        cache_write_tokens=step.cache_creation_input_tokens, cum_input=cum_in,
                        cum_output=cum_out, created_at=step.created_at, seconds_since_previous=gap,
                        duration_ms=step.duration_ms, request_est_tokens=step.request_est_tokens,
                        compacted_est_tokens=step.compacted_est_tokens, raw_assistant=step.assistant,
                        raw_tool_results=step.tool_results, model=step.model)
        view.cost = step_cost(step, model, prices)
        cum_cost = None if cum_cost is None or view.cost is None else cum_cost + view.cost
        view.cum_cost = cum_cost
        try:
            assistant = step_blocks(step, "assistant") or []
            results = step_blocks(step, "tool_results") or []
        except Exception as exc:  # a malformed row is shown as such, never fatal to the viewer
            view.problem = str(exc)
            views.append(view)
            continue
        by_id = {}
        for block in assistant:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                view.texts.append(str(block.get("text", "")))
            elif kind == "tool_use":
                call = ToolCall(id=str(block.get("id")), name=str(block.get("name")), input=block.get("input"))
                view.calls.append(call)
                by_id[call.id] = call
            else:
                view.other_blocks.append(block)
        for block in results:
            call = by_id.get(str(block.get("tool_use_id"))) if isinstance(block, dict) else None
            if call is None:
                continue
            call.result = _result_text(block)
            call.is_error = bool(block.get("is_error"))
            _summarise(call)
        views.append(view)
    return views


def describe_decision(row) -> str | None:
    """One line for an ``approvals`` row: who decided what, when; None for a call that needed nobody."""
    if row.state == "auto":
        return None
    if row.state == "pending":
        return f"waiting for approval since {row.requested_at[:19].replace('T', ' ')} (arguments {row.input_hash[:12]})"
    when = (row.decided_at or "?")[:19].replace("T", " ")
    edited = " with edited arguments" if row.edited_input else ""
    text = f"{row.state}{edited} by {row.decided_by or '?'} on {row.decided_host or '?'} at {when}"
    if row.state == "denied" and row.reason:
        text += f": {row.reason}"
    return text


def attach_decisions(views: list[StepView], approvals: list) -> None:
    """Mark each call a person decided (or must decide) with that decision."""
    by_call = {(row.n, row.tool_use_id): row for row in approvals}
    for view in views:
        for call in view.calls:
            row = by_call.get((view.n, call.id))
            if row is not None:
                call.decision = describe_decision(row)
