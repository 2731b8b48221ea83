"""The calls a waiting run holds for a person, one row each, as the transcript lists them to decide.

Read on the dashboard's reader thread with the transcript (``views.transcript``): the tool,
what kind of side effect it has (``agent.define``: read only, idempotent with its key, or
plain, which never runs twice), a short preview of the arguments, and the argument hash a
decision is bound to (``store.decide(..., expect_hash=...)``, as ``dayflow approve --hash``).
Every piece is untrusted text (the model wrote the arguments): made printable here, and
drawn as text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..safe_text import one_line

PREVIEW = 100  # characters of the argument preview
# Arguments that say most about a call, shown first (then the model's order; an idempotency key last).
TELLING = ("title", "name", "subject", "to", "path", "url", "query", "command")


@dataclass(frozen=True)
class PendingCall:
    run_id: str
    n: int  # the step whose tool_use this is
    tool_use_id: str
    tool: str
    kind: str  # "read only", "idempotent", "plain" or "unknown" (its agent cannot be loaded here)
    key: str | None  # an idempotent tool's key argument
    arguments: str  # the arguments as JSON text, as the model sent them
    input_hash: str

    @property
    def values(self) -> dict:
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def preview(self, width: int = PREVIEW, *, without_key: bool = False) -> str:
        """``name=value`` pairs in the model's order, the idempotency key last (it says least), on one
        printable line."""
        values = self.values
        names = sorted(values, key=lambda name: (name == self.key, name not in TELLING))
        if without_key:
            names = [name for name in names if name != self.key]
        pairs = ", ".join(f"{name}={json.dumps(values[name], ensure_ascii=False)}" for name in names)
        return one_line(pairs or ("" if without_key else self.arguments), width)

    def side_effect(self, width: int = 66) -> str:
        """What approving it lets happen, for a confirm: the tool, its kind with its key, and its arguments."""
        return one_line(f"{self.tool} ({self.kind}): {self.preview(width, without_key=True)}", width)

    def pretty_arguments(self) -> str:
        values = self.values
        return json.dumps(values, indent=2, ensure_ascii=False) if values else self.arguments


@lru_cache(maxsize=64)
def _kind(agent_ref: str | None, fingerprint: str | None, name: str) -> tuple[str, str | None]:
    """A tool's kind and key (cached per agent version: the transcript asks on every live tick)."""
    from ..agent.approvals import tool_of_run
    from ..agent.define import IDEMPOTENT, PLAIN, READ_ONLY

    tool: Any = tool_of_run(agent_ref, name)
    if tool is None:
        return "unknown", None
    words = {READ_ONLY: "read only", IDEMPOTENT: "idempotent", PLAIN: "plain"}
    return words.get(tool.kind, str(tool.kind)), tool.key


def pending_calls(run, approvals) -> tuple[PendingCall, ...]:
    """The run's calls that wait for a decision (``approvals``: the run's journal rows), oldest first."""
    from ..store.tables.approvals import PENDING

    calls = []
    for row in sorted((r for r in approvals if r.state == PENDING), key=lambda r: (r.n, r.id)):
        kind, key = _kind(getattr(run, "agent_ref", None), getattr(run, "agent_fingerprint", None), row.tool_name)
        calls.append(PendingCall(run.id, row.n, row.tool_use_id, row.tool_name, kind, key, row.input,
                                 row.input_hash))
    return tuple(calls)
