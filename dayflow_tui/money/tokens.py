"""Token estimates that need no model and no network: what a request will be billed by, before the API counts it.

The agent uses them to decide when to compact; ``money.estimate`` to price a call before it is made.
"""

from __future__ import annotations

import json
from typing import Any


# A cache breakpoint is an instruction to the API, not text the model reads: it is not billed as input.
_BREAKPOINTS = (',"cache_control":{"type":"ephemeral","ttl":"1h"}', ',"cache_control":{"type":"ephemeral","ttl":"5m"}',
                ',"cache_control":{"type":"ephemeral"}')


def estimate_tokens(obj: Any) -> int:
    """About four characters of JSON per token: cheap, deterministic, close enough for budgets.

    Cache breakpoints are left out, so a request counts the same with or without them (a JSON string
    holding those characters has its quotes escaped, so only real breakpoints match).
    """
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    size = len(text)
    if not isinstance(obj, str) and '"cache_control"' in text:
        size -= sum(len(mark) * text.count(mark) for mark in _BREAKPOINTS)
    return (size + 3) // 4
