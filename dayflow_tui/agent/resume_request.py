"""The request a resume would send, built before anything is paid, and handed to ``money.estimate`` to price.

``dayflow resume --dry-run`` prints the price and the dashboard shows it
under its Resume button. Nothing here buys a reply: the request is built
exactly as the loop would build it (the agent's job), its size is counted by
the API's free token-count endpoint when a key is set (estimated otherwise),
and ``money.estimate.price_resume`` prices it (money's job; it never imports
the agent).
"""

from __future__ import annotations

from typing import Any

from ..money.estimate import ResumeEstimate, price_resume
from ..redaction import redacted_line
from ..store import Store, step_blocks
from ..config.settings import OFFLINE_MODEL
from .request import build_request, make_client, prepare_messages
from .budget import previous_call
from .messages import messages_from


def count_tokens(client: Any, request: dict) -> int:
    """The API's count of ``request``'s input (``POST /v1/messages/count_tokens``): free, buys no reply."""
    fields = {key: request[key] for key in ("model", "messages", "system", "tools") if key in request}
    return int(client.messages.count_tokens(**fields).input_tokens)


def resume_estimate(store: Store, run_id: str, *, count: bool = True, client=None) -> ResumeEstimate:
    """The next call of ``run_id``, priced; ``count``: ask the API for the exact size when a key is set.

    Reads only; makes no model call and writes nothing.
    """
    from ..config import settings

    run = store.get_run(run_id)
    steps = store.replay_steps(run.id)
    history = messages_from(run, steps)
    previous = previous_call(store, run, history)
    pending = 0
    if steps and steps[-1].tool_results is None:
        last = step_blocks(steps[-1], "assistant") or []
        pending = sum(1 for b in last if b.get("type") == "tool_use")
        if pending:
            # The resume runs these tools first; the next call sends their turn and its results, whose size is
            # not known before they run: empty results stand in (the request stays one the API accepts).
            results = [{"type": "tool_result", "tool_use_id": b.get("id"), "content": ""}
                       for b in last if b.get("type") == "tool_use"]
            history = history + [{"role": "assistant", "content": last}, {"role": "user", "content": results}]
    prepared = prepare_messages(history, run.compact_at)
    request = build_request(run.model, prepared.messages)
    counted, error = None, None
    if count and run.model != OFFLINE_MODEL and (client is not None or settings.current().has_api_key):
        try:
            counted = count_tokens(client or make_client(run.model), request)
        except Exception as exc:  # the estimate stands; say why the count is missing
            error = redacted_line(exc, 200)
    largest = max((s.output_tokens for s in steps), default=0)
    return price_resume(store, run, request, previous, pending_tools=pending, largest_output=largest,
                        counted_tokens=counted, count_error=error)
