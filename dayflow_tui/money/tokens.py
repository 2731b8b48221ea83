"""Token estimates that need no model and no network: what a request will be billed by, before the API counts it.

The agent uses them to decide when to compact; ``money.estimate`` to price a call before it is made.
"""

from __future__ import annotations

import json
from typing import Any


def estimate_tokens(obj: Any) -> int:
    """About four characters of JSON per token: cheap, deterministic, close enough for budgets."""
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return (len(text) + 3) // 4
