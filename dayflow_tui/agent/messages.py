"""The messages a run's next call sends, rebuilt from its stored steps, and the check that they can be sent.

The history *is* the state: the task, then each step's assistant turn and
the tool results that answered it, exactly as stored. ``messages_from``
refuses a history the Messages API would refuse (or that would make the
driver pay for a step number already taken) before anything is written or
bought: a gap in the step numbers, a row whose JSON is not a list of
blocks, a tool call without its result, results that answer nothing.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterable

from ..config.errors import HistoryError, StoreError
from ..store import step_blocks

if TYPE_CHECKING:
    from ..store import Run, Step, Store


def _refuse(run_id: str, n: int, what: str) -> HistoryError:
    return HistoryError(f"run {run_id} step {n}: {what}; the run was left as it is "
                        "(see it with: dayflow show --raw " + run_id + ")")


_raw_decode = json.JSONDecoder().raw_decode


def _blocks(run_id: str, step: "Step", column: str) -> list[dict] | None:
    raw = getattr(step, column)
    if raw is None:
        return None
    try:
        # The stored text as the store wrote it (no space around it): decoded without json.loads' wrapper.
        blocks, end = _raw_decode(raw)
        if end != len(raw) or not isinstance(blocks, list):
            raise ValueError
    except (TypeError, ValueError):
        try:  # anything else: the store's own reading, and its words for what is wrong
            blocks = step_blocks(step, column)
        except StoreError as exc:
            raise _refuse(run_id, step.n, str(exc).split(": ", 1)[-1]) from None
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _refuse(run_id, step.n, f"stored {column} holds a block that is not an object with a type")
    return blocks


def _tool_use_ids(run_id: str, step: "Step", assistant: list[dict]) -> list[str]:
    ids = []
    for block in assistant:
        if block["type"] != "tool_use":
            continue
        if not isinstance(block.get("id"), str) or not block["id"] or not isinstance(block.get("name"), str):
            raise _refuse(run_id, step.n, "a tool call has no id or name")
        ids.append(block["id"])
    if len(set(ids)) != len(ids):
        raise _refuse(run_id, step.n, "two tool calls share one id")
    return ids


def _check_results(run_id: str, step: "Step", ids: list[str], results: list[dict]) -> None:
    answered = []
    seen_other = False
    for block in results:
        if block["type"] == "tool_result":
            if seen_other:
                raise _refuse(run_id, step.n, "a tool result comes after other content in its turn")
            answered.append(block.get("tool_use_id"))
        else:
            seen_other = True
    if sorted(answered, key=str) != sorted(ids):
        raise _refuse(run_id, step.n, "the stored tool results do not answer the step's tool calls one for one")


def sendable(blocks: list[dict]) -> list[dict]:
    """An assistant turn as it is sent back: empty text blocks (stored as received) left out.

    The API refuses an empty text block in a request even though it can send one.
    """
    kept = [b for b in blocks if not (b.get("type") == "text" and not str(b.get("text", "")).strip())]
    return kept or blocks


def add_assistant_turn(messages: list[dict], blocks: list[dict]) -> None:
    """Append an assistant turn; after a ``pause_turn`` (the previous turn is the assistant's, unanswered)
    the continuation joins the paused turn, so roles keep alternating."""
    blocks = sendable(blocks)
    if messages and messages[-1]["role"] == "assistant":
        messages[-1] = {"role": "assistant", "content": list(messages[-1]["content"]) + blocks}
    else:
        messages.append({"role": "assistant", "content": blocks})


def messages_from(run: "Run", steps: Iterable["Step"]) -> list[dict]:
    """The messages list the next API call receives, checked against the API's rules (see ``messages_and_lengths``)."""
    return messages_and_lengths(run, steps)[0]


class _Named:
    __slots__ = ("id",)

    def __init__(self, run_id: str):
        self.id = run_id


# A message's compact JSON around its content: '{"role":"assistant","content":' + blocks + '}'.
_WRAPPED = {role: len(f'{{"role":"{role}","content":}}') for role in ("assistant", "user")}


def messages_and_lengths(run: "Run", steps: Iterable["Step"]) -> tuple[list[dict], list[int | None]]:
    """The messages list the next API call receives, checked against the API's rules, and each message's
    encoded length where the stored text gives it (``history_size``; None where a turn was changed).

    A trailing step whose tools have not run yet is left out (the driver runs
    them first): no tool_use is ever emitted without its results. A step with
    no content (a reply that could not be used, kept for the record) adds no
    turn.
    """
    messages: list[dict] = [{"role": "user", "content": run.user_msg}]
    lengths: list[int | None] = [None]
    steps = list(steps)
    run = _Named(run.id)  # the model's field descriptors, read 40,000 times for 10,000 steps, read once
    for i, step in enumerate(steps):
        if step.n != i + 1:
            raise _refuse(run.id, i + 1, f"is missing (the next stored step is {step.n})")
        assistant = _blocks(run.id, step, "assistant")
        results = _blocks(run.id, step, "tool_results")
        ids = _tool_use_ids(run.id, step, assistant)
        if not assistant:
            if results is not None:
                raise _refuse(run.id, step.n, "tool results answer a turn with no content")
            continue
        if ids and results is None:
            if i == len(steps) - 1:
                break
            raise _refuse(run.id, step.n, "a tool call has no stored result")
        if results is not None:
            if not ids and any(block["type"] == "tool_result" for block in results):
                raise _refuse(run.id, step.n, "tool results answer a turn with no tool call")
            if not ids and not results:
                raise _refuse(run.id, step.n, "an empty turn follows it")
            # (no call and only text: a note a person added after this step, in a fork)
            _check_results(run.id, step, ids, results)
        before = len(messages)
        add_assistant_turn(messages, assistant)
        # The stored text is the blocks' encoding (store.dumps) when the turn went in whole and on its own.
        whole = len(messages) > before and len(messages[-1]["content"]) == len(assistant)
        lengths.append(_WRAPPED["assistant"] + len(step.assistant) if whole else None)
        if len(messages) == before:
            lengths[-2:] = [None]  # merged into the turn before: that one is measured again
        if results is not None:
            messages.append({"role": "user", "content": results})
            lengths.append(_WRAPPED["user"] + len(step.tool_results))
    return messages, lengths


def rebuild_messages(store: "Store", run_id: str, steps: list["Step"] | None = None) -> list[dict]:
    """``messages_from`` for a run in ``store`` (its steps read unless given)."""
    run = store.get_run(run_id)
    return messages_from(run, store.replay_steps(run.id) if steps is None else steps)
