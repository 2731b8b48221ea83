"""Two runs compared step by step: where they diverge, and how.

Steps are aligned by number (a fork's step n is its parent's step n up to
the fork point, so two runs that share a parent line up from the start).
A step is ``same`` when its assistant turn and its tool results are the same
JSON, ``shared`` when it is the same stored copy (inside both runs' common
fork point), ``results_differ`` when the model did the same but its tools
answered differently (an edited result, a note: the divergence shows in the
next step), ``differs`` when the model's turn differs, or ``only_a`` /
``only_b`` past the shorter run. The first divergence is the first step where
the model did something else. For a step that differs the diff names the changed tool calls
(name and arguments), the changed results, a word diff of the model's text,
and the stop reasons and tokens of each side.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..store import Run, Step, step_blocks


@dataclass
class CallChange:
    index: int  # the call's position in the step
    a: dict | None  # {"name", "input"} or None: no such call on that side
    b: dict | None


@dataclass
class ResultChange:
    index: int
    a: str | None  # the result content as sent, or None
    b: str | None
    a_error: bool = False
    b_error: bool = False


@dataclass
class StepDiff:
    n: int
    state: str  # shared | same | results_differ | differs | only_a | only_b
    stop_reason: tuple[str | None, str | None] = (None, None)
    tokens: tuple[tuple[int, int] | None, tuple[int, int] | None] = (None, None)
    text_diff: list[str] = field(default_factory=list)  # word diff lines: "  word", "- word", "+ word"
    calls: list[CallChange] = field(default_factory=list)
    results: list[ResultChange] = field(default_factory=list)


@dataclass
class RunDiff:
    a: str
    b: str
    common_fork: int  # steps 1..common_fork are the same stored copies (0: none)
    steps: list[StepDiff]
    first_divergence: int | None
    tokens: tuple[tuple[int, int], tuple[int, int]]
    calls: tuple[int, int]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _text(blocks: list[dict]) -> str:
    return "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")


def _calls(blocks: list[dict]) -> list[dict]:
    return [{"name": b.get("name"), "input": b.get("input")} for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_use"]


def _results(blocks: list[dict] | None) -> list[tuple[str, bool]]:
    out = []
    for block in blocks or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            content = block.get("content")
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            out.append((text, bool(block.get("is_error"))))
        elif block.get("type") == "text":
            out.append((str(block.get("text", "")), False))  # a person's note after the step
    return out


def word_diff(a: str, b: str) -> list[str]:
    """A unified word diff: one line per run of words kept ("  "), removed ("- ") or added ("+ ")."""
    old, new = a.split(), b.split()
    lines = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            kept = old[i1:i2]
            lines.append("  " + (" ".join(kept) if len(kept) <= 12 else " ".join(kept[:5] + ["…"] + kept[-5:])))
            continue
        if tag in ("replace", "delete"):
            lines.append("- " + " ".join(old[i1:i2]))
        if tag in ("replace", "insert"):
            lines.append("+ " + " ".join(new[j1:j2]))
    return lines


def _common_fork(a: Run, b: Run) -> int:
    """How many leading steps the two runs share as copies of one history."""
    if a.id == b.id:
        return a.step_count
    if b.parent_id == a.id:
        return b.forked_at or 0
    if a.parent_id == b.id:
        return a.forked_at or 0
    if a.parent_id and a.parent_id == b.parent_id:
        return min(a.forked_at or 0, b.forked_at or 0)
    return 0


def diff_runs(a: Run, a_steps: list[Step], b: Run, b_steps: list[Step]) -> RunDiff:
    common = _common_fork(a, b)
    by_a, by_b = {s.n: s for s in a_steps}, {s.n: s for s in b_steps}
    steps: list[StepDiff] = []
    first = None
    for n in range(1, max(len(a_steps), len(b_steps)) + 1):
        sa, sb = by_a.get(n), by_b.get(n)
        if sa is None or sb is None:
            present = sa or sb
            diff = StepDiff(n, "only_a" if sb is None else "only_b",
                            stop_reason=(sa.stop_reason if sa else None, sb.stop_reason if sb else None),
                            tokens=((sa.input_tokens, sa.output_tokens) if sa else None,
                                    (sb.input_tokens, sb.output_tokens) if sb else None))
            assert present is not None
        else:
            same = sa.assistant == sb.assistant and sa.tool_results == sb.tool_results
            if same:
                state = "shared" if n <= common else "same"
            else:
                state = "results_differ" if sa.assistant == sb.assistant else "differs"
            diff = StepDiff(n, state, stop_reason=(sa.stop_reason, sb.stop_reason),
                            tokens=((sa.input_tokens, sa.output_tokens), (sb.input_tokens, sb.output_tokens)))
            if not same:
                blocks_a = step_blocks(sa, "assistant") or []
                blocks_b = step_blocks(sb, "assistant") or []
                text_a, text_b = _text(blocks_a), _text(blocks_b)
                if text_a != text_b:
                    diff.text_diff = word_diff(text_a, text_b)
                calls_a, calls_b = _calls(blocks_a), _calls(blocks_b)
                for i in range(max(len(calls_a), len(calls_b))):
                    ca = calls_a[i] if i < len(calls_a) else None
                    cb = calls_b[i] if i < len(calls_b) else None
                    if ca != cb:
                        diff.calls.append(CallChange(i, ca, cb))
                res_a = _results(step_blocks(sa, "tool_results"))
                res_b = _results(step_blocks(sb, "tool_results"))
                for i in range(max(len(res_a), len(res_b))):
                    ra = res_a[i] if i < len(res_a) else None
                    rb = res_b[i] if i < len(res_b) else None
                    if ra != rb:
                        diff.results.append(ResultChange(i, ra[0] if ra else None, rb[0] if rb else None,
                                                         bool(ra and ra[1]), bool(rb and rb[1])))
        if first is None and diff.state in ("differs", "only_a", "only_b"):
            first = n
        steps.append(diff)
    tokens = ((sum(s.input_tokens for s in a_steps), sum(s.output_tokens for s in a_steps)),
              (sum(s.input_tokens for s in b_steps), sum(s.output_tokens for s in b_steps)))
    return RunDiff(a.id, b.id, common, steps, first, tokens, (len(a_steps), len(b_steps)))
