"""What each model allows: its longest reply, its context window, and which features it has.

The figures are Anthropic's, from each model's page under
https://platform.claude.com/docs/en/models/overview (the "Context window", "Max output" and
"Thinking" lines; for example https://platform.claude.com/docs/en/models/sonnet-4-5/overview.md:
"Context window: 200K tokens · Max output: 64K tokens") and the prompt caching page
(https://platform.claude.com/docs/en/build-with-claude/prompt-caching: the 1-hour lifetime on every
current model). A model id is matched exactly, else by the longest known id it starts with
(``claude-sonnet-4-5-20250929`` is ``claude-sonnet-4-5``); an id the table does not know gets
``FALLBACK`` (4,096 tokens of reply, which every Claude model accepts, and nothing assumed). The
settings file adds or corrects models: ``[models."ID"] max_output = 64000`` (``config.settings``).

Every call streams (``request.call_model``), so the SDK's refusal of a long request without streaming
("Streaming is required...": ``max_tokens`` above 21,333, or 8,192 for Claude Opus 4) never applies:
``sendable`` holds a request only to what the model itself allows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import settings
from ..config.settings import OFFLINE_MODEL

@dataclass(frozen=True)
class ModelLimits:
    """One model's limits; ``known`` is False for the fallback of an id the table does not hold."""

    max_output: int
    context_window: int = 200_000
    thinking: str | None = None  # "extended" (budget_tokens), "adaptive" (both), None: no thinking
    cache_1h: bool = True
    context_1m: bool = False  # a 1M-token window (on the model, or with the context-1m beta)
    known: bool = True

    def sendable(self, wanted: int | None = None) -> int:
        """The ``max_tokens`` a call sends: ``wanted`` (default: the model's most), never more than the model
        allows. Calls stream, so the SDK's cap on calls without streaming does not apply."""
        return max(1, min(wanted if wanted is not None else self.max_output, self.max_output))

    def describe(self) -> str:
        if not self.known:
            return f"unknown model: {self.max_output:,} max output assumed"
        window = "1M" if self.context_window >= 1_000_000 else f"{self.context_window // 1000}K"
        return (f"{self.max_output:,} max output, {window} context"
                + (f", thinking {self.thinking}" if self.thinking else ""))


_K = 1000
# id: limits. Pages: https://platform.claude.com/docs/en/models/<family>/overview.md
BUILTIN: dict[str, ModelLimits] = {
    # Current and legacy models with 1M windows and 128K replies (opus-5-5, sonnet-5-5, haiku-5-5, opus-5,
    # sonnet-5, opus-4-8, opus-4-6, sonnet-4-6 pages: "Context window: 1M tokens · Max output: 128K tokens").
    "claude-fable-5-1": ModelLimits(128 * _K, 1_000_000, "adaptive", context_1m=True),
    "claude-opus-5-5": ModelLimits(128 * _K, 1_000_000, "adaptive", context_1m=True),
    "claude-sonnet-5-5": ModelLimits(128 * _K, 1_000_000, "adaptive", context_1m=True),
    "claude-haiku-5-5": ModelLimits(128 * _K, 1_000_000, "adaptive", context_1m=True),
    "claude-opus-5": ModelLimits(128 * _K, 1_000_000, "adaptive", context_1m=True),
    "claude-sonnet-5": ModelLimits(128 * _K, 1_000_000, "adaptive", context_1m=True),
    "claude-opus-4-8": ModelLimits(128 * _K, 1_000_000, "adaptive", context_1m=True),
    "claude-opus-4-6": ModelLimits(128 * _K, 1_000_000, "adaptive", context_1m=True),
    "claude-sonnet-4-6": ModelLimits(128 * _K, 1_000_000, "adaptive", context_1m=True),
    # opus-4-5, sonnet-4-5, haiku-4-5 pages: "Context window: 200K tokens · Max output: 64K tokens", thinking
    # "Extended"; Sonnet 4.5 and Sonnet 4 take the 1M window with the context-1m beta (context windows page).
    "claude-opus-4-5": ModelLimits(64 * _K, 200_000, "extended"),
    "claude-sonnet-4-5": ModelLimits(64 * _K, 200_000, "extended", context_1m=True),
    "claude-haiku-4-5": ModelLimits(64 * _K, 200_000, "extended"),
    "claude-sonnet-4-0": ModelLimits(64 * _K, 200_000, "extended", context_1m=True),
    "claude-sonnet-4-20250514": ModelLimits(64 * _K, 200_000, "extended", context_1m=True),
    # Claude Opus 4 and 4.1 (the overview's legacy table: 32K max output).
    "claude-opus-4-1": ModelLimits(32 * _K, 200_000, "extended"),
    "claude-opus-4-0": ModelLimits(32 * _K, 200_000, "extended"),
    "claude-opus-4-20250514": ModelLimits(32 * _K, 200_000, "extended"),
    "claude-4-opus-20250514": ModelLimits(32 * _K, 200_000, "extended"),
    # The same models under Bedrock's and Vertex's ids.
    "claude-opus-4@20250514": ModelLimits(32 * _K, 200_000, "extended"),
    "claude-opus-4-1@20250805": ModelLimits(32 * _K, 200_000, "extended"),
    "anthropic.claude-opus-4-20250514-v1:0": ModelLimits(32 * _K, 200_000, "extended"),
    "anthropic.claude-opus-4-1-20250805-v1:0": ModelLimits(32 * _K, 200_000, "extended"),
    # Claude 3 models (the overview's legacy table): Sonnet 3.7 64K with thinking, Haiku 3.5 8K, Haiku 3 4K;
    # no 1-hour cache was offered for the retired Claude 3 Opus/Sonnet, so none is assumed for Claude 3.
    "claude-3-7-sonnet": ModelLimits(64 * _K, 200_000, "extended", cache_1h=False),
    "claude-3-5-haiku": ModelLimits(8192, 200_000, None, cache_1h=False),
    "claude-3-haiku": ModelLimits(4096, 200_000, None, cache_1h=False),
    # The built-in offline model: its replies are short; 4,096 keeps its requests as they always were.
    OFFLINE_MODEL: ModelLimits(4096, 200_000, "extended"),
}

FALLBACK = ModelLimits(4096, 200_000, None, cache_1h=False, known=False)

SETTING_FIELDS = ("max_output", "context_window", "thinking", "cache_1h", "context_1m")


def limits_for(model: str | None) -> ModelLimits:
    """``model``'s limits: the settings file's ``[models."ID"]`` over the table, else the fallback."""
    name = (model or "").strip()
    found = _match(BUILTIN, name)
    override = _match(settings.current().models, name)
    if override is None:
        return found or FALLBACK
    return replace(found or replace(FALLBACK, known=True), **override)


def _match(table: dict, name: str):
    if name in table:
        return table[name]
    prefixes = [key for key in table if name.startswith(key + "-") or name.startswith(key + "@")]
    return table[max(prefixes, key=len)] if prefixes else None
