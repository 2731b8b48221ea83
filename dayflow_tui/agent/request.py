"""What a call sends, and the call itself: the client, the request body, the message list, one paid call.

The driver (``driver.py``) asks this module for a request and sends it with
``call_model``; the dashboard's request pane (``next_request_preview``),
``dayflow export --anthropic`` (``replay_request``) and a resume's price
(``resume_request``) build theirs here too, so every one of them is the
request the run would really send.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..config import settings
from ..config.errors import DayflowError, ModelCallFailed, RateLimited
from ..config.settings import OFFLINE_MODEL
from ..money.tokens import estimate_tokens
from ..redaction import redact_and_cut
from ..store import Store
from . import backpressure, brief, cache_points, sdk_client
from .compaction import compact
from .define import Agent
from .history_size import HistorySizes
from .messages import rebuild_messages
from .model_limits import limits_for
from .registry import load_agent
from .replies import body_text, mend_surrogates
from .streaming import MessageFolder, StreamBroken, sse_events, sse_lines


@dataclass
class RequestPreview:
    """The messages the next call sends, with their estimated size before and after compaction."""

    messages: list[dict]
    est_before: int
    est_after: int

    @property
    def compacted(self) -> bool:
        return self.est_after != self.est_before


def prepare_messages(history: list[dict], compact_at: int | None, sizes: HistorySizes | None = None) -> RequestPreview:
    """What goes over the wire for ``history``: the full history, or a compacted view of it.

    The database always keeps every step in full; compaction (when
    ``compact_at`` is set) only shapes the request. ``sizes``: the driver's running estimate of its
    growing history (the same number, without encoding the whole history for every step).
    """
    before = estimate_tokens(history) if sizes is None else sizes.tokens(history)
    if not compact_at:
        return RequestPreview(history, before, before)
    messages = compact(history, threshold_tokens=compact_at, size=before)
    return RequestPreview(messages, before, before if messages is history else estimate_tokens(messages))


def next_request_preview(store: Store, run_id: str) -> RequestPreview:
    """Exactly the message list the run's next call would send (for the dashboard)."""
    run = store.get_run(run_id)
    return prepare_messages(rebuild_messages(store, run.id), run.compact_at)


def replay_request(store: Store, run_id: str) -> dict:
    """The run's whole message list as a Messages API request body (``dayflow export --anthropic``).

    Every committed turn as stored, uncompacted, with the system prompt and
    tools Dayflow sends: POST it to /v1/messages to replay the run anywhere.
    """
    run = store.get_run(run_id)
    return build_request(run.model, rebuild_messages(store, run.id), load_agent(run.agent_ref))


def build_request(model: str, messages: list[dict], agent: Agent | None = None) -> dict:
    """The Messages API request for ``messages``, with ``agent``'s system prompt, tools and options
    (default: the brief).

    ``max_tokens`` is the agent's, else the model's longest reply, within what the SDK sends without
    streaming (``model_limits``). Cache breakpoints (``cache_points``) go after the system prompt and on
    the last message: the history is re-sent byte for byte as stored, so each step (and a resume within
    the cache lifetime) re-reads it at the cache price.
    """
    agent = agent or brief.AGENT
    ttl = agent.cache_ttl
    system = cache_points.system_with_breakpoint(agent.system, ttl)
    tools = agent.schemas if system else cache_points.tools_with_breakpoint(agent.schemas, ttl)
    body = {"model": model, "max_tokens": limits_for(model).sendable(agent.max_tokens), "system": system,
            "tools": tools, "messages": cache_points.messages_with_breakpoint(messages, ttl)}
    body.update(agent.request_options())
    body["stream"] = True  # every call streams (``call_model``)
    return body


def make_client(model: str) -> Any:
    """The client for ``model``. Imports ``anthropic`` only here: commands that call no model stay fast."""
    if model == OFFLINE_MODEL:
        from .offline import OfflineClient  # the offline model's code: loaded only by runs that use it

        return OfflineClient()
    if not settings.current().has_api_key:
        raise DayflowError(f"model {model[:80]!r} needs ANTHROPIC_API_KEY in the environment (export it and "
                           f"run the command again, or start an offline run: dayflow brief --model {OFFLINE_MODEL})")
    # The key is read from the environment by the SDK and never stored by us;
    # ANTHROPIC_BASE_URL is honoured by the SDK too.
    return sdk_client.build(_sdk_options())


def start_client_in_background(model: str) -> None:
    """A real model's client, imported and built in a thread while the caller reads the history.

    Anything wrong (no key, a bad option) is left for ``make_client`` to report where it always has.
    """
    if model == OFFLINE_MODEL or not settings.current().has_api_key:
        return
    try:
        sdk_client.start(_sdk_options())
    except DayflowError:
        pass


def _sdk_options() -> dict:
    """The SDK's own retries and timeout (settings ``api_max_retries``, ``api_timeout_s``; checked when read)."""
    current = settings.current()
    options: dict[str, Any] = {}
    if current.api_max_retries is not None:
        options["max_retries"] = current.api_max_retries
    if current.api_timeout_s is not None:
        options["timeout"] = current.api_timeout_s
    return options


def wire_blocks(response: Any) -> list[dict]:
    """The response's content blocks as plain JSON, exactly the fields the API sent.

    ``to_dict`` leaves out fields the API did not set (``model_dump`` would
    add ``caller: null`` and friends, which the API rejects when re-sent);
    thinking and redacted_thinking blocks keep their signatures and data.
    """
    blocks = [block.to_dict(mode="json") if hasattr(block, "to_dict") else dict(block)
              for block in (getattr(response, "content", None) or [])]
    return mend_surrogates(blocks)


def call_model(client: Any, request: dict, *, betas: tuple[str, ...] = (),
               on_piece: Callable[[int, str, str], None] | None = None) -> str:
    """One paid call, streamed; returns the reply's body: the message its events make (``streaming``), or
    the body as received when the server answered with a whole message or with events that make none.

    ``betas`` (the agent's) go in the ``anthropic-beta`` header, as the SDK's ``betas=`` sends them.
    ``on_piece(block index, kind, text)`` is told each piece as it arrives (the dashboard draws the reply
    forming); it runs on this thread and must not fail or wait. A stream that breaks after it began is
    ``StreamBroken`` (a failed attempt); what fails before any reply came is raised as it always was.
    """
    if betas:
        request = {**request, "extra_headers": {"anthropic-beta": ",".join(betas)}}
    try:
        request = _fit_to_sdk(client, {**request, "stream": True})  # a body from elsewhere streams too
        streamed = getattr(client.messages, "with_streaming_response", None)
        if streamed is not None:
            with streamed.create(**request) as response:
                text = _read_stream(response, on_piece)
        else:
            text = _fold(client.messages.create(**request), on_piece)
    except StreamBroken:
        raise
    except Exception as exc:
        status = getattr(exc, "status_code", None)
        if backpressure.is_back_pressure(status):
            # 429 / 529 after the SDK's retries: the run waits and goes on, it has not failed.
            raise RateLimited(_describe_api_error(exc), status=status,
                              wait_s=backpressure.next_wait(backpressure.retry_after_s(exc))) from exc
        raise ModelCallFailed(_describe_api_error(exc)) from exc
    backpressure.call_went_through()
    return text


def _read_stream(response: Any, on_piece: Callable[[int, str, str], None] | None) -> str:
    """The reply off an SDK response opened with ``stream=True`` (its status is a 2xx: errors were raised)."""
    if "text/event-stream" not in (response.headers.get("content-type") or ""):
        return response.read().decode("utf-8", "replace")  # a whole body, taken as the non-streaming API sends it
    folder = MessageFolder(on_piece)
    try:
        for name, data in sse_events(sse_lines(response.iter_bytes())):
            folder.feed_sse(name, data)
    except StreamBroken:
        raise
    except Exception as exc:  # the connection dropped or timed out mid-reply
        raise StreamBroken(_describe_api_error(exc, "the reply's stream broke")) from exc
    return _folded(folder)


def _fold(reply: Any, on_piece: Callable[[int, str, str], None] | None) -> str:
    """The body of what a client without HTTP responses returned: its events (the offline model's stream),
    or a whole message (a client that does not stream)."""
    if hasattr(reply, "to_dict") or hasattr(reply, "http_response") or isinstance(reply, (str, bytes, dict)):
        return body_text(reply)
    folder = MessageFolder(on_piece)
    for event in reply:
        folder.feed(event)
    return _folded(folder)


def _folded(folder: MessageFolder) -> str:
    if folder.message is not None and not folder.stopped and folder.problem is None:
        raise StreamBroken("the reply's stream ended before message_stop")
    if folder.message is None and folder.problem is None:
        raise StreamBroken("the reply's stream ended before message_start")
    return folder.body()


def _fit_to_sdk(client: Any, request: dict) -> dict:
    """``request`` for this client's ``messages.create``: body fields it has no argument for (``temperature``
    and ``top_p`` in SDKs that dropped them) go in ``extra_body``, so every field is sent as the agent gave it."""
    import inspect

    try:
        parameters = inspect.signature(client.messages.create).parameters.values()
    except (TypeError, ValueError):
        return request
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return request  # takes anything (the offline model)
    names = {p.name for p in parameters}
    extra = {key: value for key, value in request.items() if key not in names}
    if not extra:
        return request
    fitted = {key: value for key, value in request.items() if key in names}
    fitted["extra_body"] = extra
    return fitted


def _describe_api_error(exc: BaseException, prefix: str | None = None) -> str:
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    detail = ""
    if isinstance(body, dict):
        err = body.get("error") if isinstance(body.get("error"), dict) else body
        detail = str(err.get("message") or "")
    detail = detail or str(exc)
    if prefix is not None:
        prefix = f"{prefix} ({name})"
    else:
        prefix = f"model API error {status} ({name})" if status else f"model API error ({name})"
    # Redacted before it is cut: a key straddling the cut must not survive in part.
    return redact_and_cut(f"{prefix}: {' '.join(detail.split())}", 300 + len(prefix) + 2)
