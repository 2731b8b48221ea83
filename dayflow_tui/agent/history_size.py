"""The size estimate of a history the driver keeps growing, without encoding steps 1..N again for step N+1.

``money.tokens.estimate_tokens`` of a message list is about a quarter of the length of its compact JSON. The
JSON of a list is ``[`` + its items joined by ``,`` + ``]``, so the length is the sum of the items' lengths
plus the commas and brackets: each message is measured once, when it joins. A message is known by identity
(the driver appends turns and, after a ``pause_turn``, replaces the last one); the first message that is
not the one held, and everything after it, is measured again, and the last is always measured again (a
turn extended in place). The estimate is the same number ``estimate_tokens`` gives, by construction.

A resume seeds the lengths from the stored JSON text (``messages.messages_and_lengths``): a step's blocks
are stored with the same encoding, so the text's length is the encoded length, with no encoding at all.
"""

from __future__ import annotations

import json


def encoded_length(message: dict) -> int:
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":")))


class HistorySizes:
    """``tokens(messages)`` == ``estimate_tokens(messages)``, paying only for messages it has not seen."""

    def __init__(self, messages: list[dict] | None = None, lengths: list[int | None] | None = None):
        self._held: list[tuple[dict, int]] = []
        self._total = 0
        for message, length in zip(messages or [], lengths or []):
            if length is None:
                length = encoded_length(message)
            self._held.append((message, length))
            self._total += length

    def tokens(self, messages: list[dict]) -> int:
        held = self._held
        same = 0
        for (message, _), current in zip(held, messages[:len(held) - 1]):
            if message is not current:
                break
            same += 1
        for _, length in held[same:]:
            self._total -= length
        del held[same:]
        for message in messages[same:]:
            length = encoded_length(message)
            held.append((message, length))
            self._total += length
        chars = 2 + self._total + max(len(held) - 1, 0)
        return (chars + 3) // 4
