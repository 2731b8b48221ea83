"""The offline model's replies: shaped like ``anthropic.types.Message``, without importing ``anthropic``.

Importing the SDK (even ``anthropic.types`` alone) costs about two seconds
here, most of a short command's life. The offline model makes no HTTP call,
so its replies are plain data behind this small typed layer, which offers
what the loop and the tests read from an SDK reply: ``.content`` blocks with
``.type``/``.text``/``.id``/``.name``/``.input`` and ``to_dict(mode="json")``,
``.stop_reason``, ``.stop_sequence``, ``.usage.*``, ``.model``, ``.id``, and
the message's own ``to_dict``/``to_json``.

``to_dict`` is the SDK's serialisation byte for byte: only the fields that
were given (the SDK's ``exclude_unset``), in the order the SDK declares them.
``tests/agent/test_offline_message.py`` compares whole offline runs against
``anthropic.types.Message`` and checks these field orders against the SDK's
models, so an SDK upgrade that moves a field fails a test instead of
changing what is stored.
"""

from __future__ import annotations

import copy
import json
from typing import Any

# Field declaration order of the SDK models the offline model produces (anthropic 2.x).
MESSAGE_FIELDS = ("id", "container", "content", "diagnostics", "model", "role", "stop_details", "stop_reason",
                  "stop_sequence", "type", "usage")
USAGE_FIELDS = ("cache_creation", "cache_creation_input_tokens", "cache_read_input_tokens", "inference_geo",
                "input_tokens", "output_tokens", "output_tokens_details", "server_tool_use", "service_tier", "speed")
BLOCK_FIELDS = {
    "text": ("citations", "text", "type"),
    "tool_use": ("id", "caller", "input", "name", "type", "toolset_name"),
}


def _in_sdk_order(data: dict, fields: tuple[str, ...]) -> dict:
    """``data`` with its keys in the SDK's declared order; keys the SDK does not declare follow, as given."""
    ordered = {name: copy.deepcopy(data[name]) for name in fields if name in data}
    ordered.update((key, copy.deepcopy(value)) for key, value in data.items() if key not in ordered)
    return ordered


class _Fields:
    """Attribute access to the given fields; a field the SDK declares but nobody set reads as None."""

    _declared: tuple[str, ...] = ()

    def __init__(self, data: dict):
        self._data = data

    def __getattr__(self, name: str) -> Any:
        data = self.__dict__.get("_data", {})
        if name in data:
            return data[name]
        if name in self._declared:
            return None
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    def to_dict(self, *, mode: str = "python", **_options: Any) -> dict:
        """The fields that were set, in the SDK's order (``mode`` and the SDK's options change nothing here)."""
        return _in_sdk_order(self._data, self._declared)

    def to_json(self, *, indent: int | None = 2, **_options: Any) -> str:
        return json.dumps(self.to_dict(mode="json"), indent=indent, ensure_ascii=False)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"


class OfflineUsage(_Fields):
    _declared = USAGE_FIELDS


class OfflineBlock(_Fields):
    """A content block (``text`` or ``tool_use`` from the offline model)."""

    @property
    def _declared(self) -> tuple[str, ...]:  # type: ignore[override]
        return BLOCK_FIELDS.get(self._data.get("type"), ())


class OfflineMessage(_Fields):
    """An assistant message as the SDK's ``Message`` presents it."""

    _declared = MESSAGE_FIELDS

    def __init__(self, data: dict):
        super().__init__(data)
        self.content = [OfflineBlock(block) for block in data.get("content", [])]
        self.usage = OfflineUsage(data.get("usage", {}))

    @classmethod
    def model_validate(cls, data: dict) -> "OfflineMessage":
        """Build from the JSON a server would send (the SDK's constructor name, for drop-in use)."""
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            raise ValueError("a message needs a list of content blocks")
        if not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in data["content"]):
            raise ValueError("every content block needs a type")
        return cls(copy.deepcopy(data))

    def to_dict(self, *, mode: str = "python", **_options: Any) -> dict:
        data = {**self._data, "content": [block.to_dict() for block in self.content],
                "usage": self.usage.to_dict()}
        return _in_sdk_order(data, MESSAGE_FIELDS)
