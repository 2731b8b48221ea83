"""What search sees in a run: its places (task, text, tool calls, tool results, final, error) and their words.

One tokenizer serves every side of search, so they agree by construction:
the words written into the index (SQLite FTS5 and PostgreSQL alike), the
words of a query, the check that a stored place really holds a hit, and the
spans highlighted in a snippet. A word is a run of letters and digits,
case-folded, with accents dropped (``Café`` and ``cafe`` are one word);
everything else separates words, so ``read_inbox`` is the two words
``read inbox`` and ``"mail-3"`` is found by the phrase ``mail 3``.

Nothing here interprets the text: it is cut and measured, never parsed as
markup. Showing it safely is the renderer's job (``safe_text``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable

# A place's text beyond this many characters is neither indexed nor searched
# (a tool that returns a whole web page): the index stays bounded per step.
MAX_PLACE_CHARS = 100_000
# Longer words (base64, blobs) are cut to this many characters on both sides of a match.
MAX_WORD_CHARS = 128

_WORD = re.compile(r"[^\W_]+")
_ASCII_WORD = re.compile(r"[a-z0-9]+")
# Terminal escape sequences (colour codes in a shell tool's output, cursor moves in a mail subject) separate
# words instead of gluing their final letter to the next word: "\x1b[31mERROR" holds the word "error". An
# OSC's text (a title, a link's address) stays searchable: only its introducer is blanked.
_ESCAPE = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def _unescaped(text: str) -> str:
    """``text`` with each escape sequence blanked out (same length: word positions stay where they are)."""
    if "\x1b" not in text and "\x9b" not in text:
        return text
    return _ESCAPE.sub(lambda match: " " * len(match.group()), text)

# Where a hit is: the column it is indexed under, and how it is shown.
TASK, TEXT, ARGS, RESULT, FAILURE, FINAL, ERROR = "task", "text", "args", "result", "failure", "final", "error"
COLUMNS = (TASK, TEXT, ARGS, RESULT, FAILURE, FINAL, ERROR)
LABELS = {TASK: "task", TEXT: "text", ARGS: "tool call", RESULT: "tool result", FAILURE: "tool error",
          FINAL: "final", ERROR: "error"}
# The words of ``in:``, and the columns each one means. A failed tool result is both a result and an error;
# the final text is the model's text too.
PLACES = {"text": (TEXT, FINAL), "args": (ARGS,), "result": (RESULT, FAILURE), "error": (FAILURE, ERROR),
          "final": (FINAL,), "task": (TASK,)}
# The word ``--json`` uses for each column's place (a failed tool result is an error with a tool name).
PLACE_OF = {TASK: "task", TEXT: "text", ARGS: "args", RESULT: "result", FAILURE: "error", FINAL: "final",
            ERROR: "error"}


def _fold(word: str) -> list[str]:
    """A non-ASCII word as index words: case-folded, compatibility-decomposed, accents dropped."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return [w[:MAX_WORD_CHARS] for w in _WORD.findall(stripped)]


def words(text: str) -> list[str]:
    """The index words of ``text``, in order."""
    text = _unescaped(text[:MAX_PLACE_CHARS])
    if text.isascii():
        return [w[:MAX_WORD_CHARS] for w in _ASCII_WORD.findall(text.lower())]
    found: list[str] = []
    for match in _WORD.finditer(text):
        token = match.group()
        found.extend([token.lower()[:MAX_WORD_CHARS]] if token.isascii() else _fold(token))
    return found


def words_at(text: str) -> list[tuple[str, int, int]]:
    """``(word, start, end)`` for each index word: where it sits in ``text`` (for highlighting)."""
    text = _unescaped(text[:MAX_PLACE_CHARS])
    found: list[tuple[str, int, int]] = []
    for match in _WORD.finditer(text):
        token = match.group()
        folded = [token.lower()[:MAX_WORD_CHARS]] if token.isascii() else _fold(token)
        found.extend((word, match.start(), match.end()) for word in folded)
    return found


# -- places -------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """One searchable piece of a run: a text block, a tool call, a tool result, the task, the brief, an error."""

    column: str  # one of COLUMNS
    text: str  # what is searched and shown (a tool call reads ``name {key: value, ...}``)
    tool: str | None = None

    @property
    def label(self) -> str:
        return LABELS[self.column]


def flatten(value: Any, depth: int = 0) -> str:
    """A JSON value as words a person reads: ``{title: Reply to Ana, due: 2026-12-03}``.

    Keys are kept (they are searchable too); strings are shown as they are,
    not JSON-escaped, so a newline in a value does not glue two words together.
    """
    if depth > 64:
        raise ValueError("nested too deeply")
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {flatten(item, depth + 1)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flatten(item, depth + 1) for item in value) + "]"
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return str(value)


def _readable(value: Any) -> str:
    try:
        return flatten(value)
    except (ValueError, RecursionError):
        return json.dumps(value, ensure_ascii=False, default=str)[:MAX_PLACE_CHARS]


def _result_text(block: dict) -> str:
    """A tool result's content as text: JSON payloads flattened, plain text as it is."""
    content = block.get("content")
    if isinstance(content, list):
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = "" if content is None else str(content)
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            return flatten(json.loads(text))
        except (ValueError, RecursionError):
            return text
    return text


def turn_places(assistant: Iterable[Any], *, final: bool = False) -> list[Place]:
    """The places of one model turn: its text blocks (the run's final text when ``final``) and tool calls."""
    places: list[Place] = []
    for block in assistant:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            places.append(Place(FINAL if final else TEXT, str(block.get("text", ""))))
        elif kind == "tool_use":
            name = str(block.get("name", ""))
            places.append(Place(ARGS, f"{name} {_readable(block.get('input'))}", tool=name))
    return places


def tool_names(assistant: Iterable[Any]) -> dict[str, str]:
    """tool_use id -> tool name, for naming the results that answer them."""
    return {str(b.get("id")): str(b.get("name", "")) for b in assistant
            if isinstance(b, dict) and b.get("type") == "tool_use"}


def result_places(results: Iterable[Any], names: dict[str, str]) -> list[Place]:
    """The places of a step's tool results: one per result, an error result under ``failure``."""
    places: list[Place] = []
    for block in results:
        if not isinstance(block, dict):
            continue
        name = names.get(str(block.get("tool_use_id")))
        places.append(Place(FAILURE if block.get("is_error") else RESULT, _result_text(block), tool=name))
    return places


def text_of_turn(assistant: Iterable[Any]) -> str:
    return "\n".join(str(b.get("text", "")) for b in assistant if isinstance(b, dict) and b.get("type") == "text")


def is_final_turn(assistant: list, final_text: str | None) -> bool:
    """Is ``final_text`` exactly this turn's text (so it is indexed once, as the final text)?"""
    return final_text is not None and words(final_text) == words(text_of_turn(assistant)) \
        and any(isinstance(b, dict) and b.get("type") == "text" for b in assistant)


# -- matching -----------------------------------------------------------------

Spans = list[tuple[int, int]]  # (start, end) character offsets in a place's text


@dataclass(frozen=True)
class Term:
    """A word or a phrase of a query, in index words; ``prefix``: the last word may continue."""

    words: tuple[str, ...]
    prefix: bool = False
    negated: bool = False
    shown: str = ""  # as the user typed it, for messages


@dataclass
class PlaceWords:
    """A place with its words measured once (matching and highlighting read the same list)."""

    place: Place
    located: list[tuple[str, int, int]] = field(default_factory=list)
    _found: dict[Term, list[tuple[int, int]]] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, place: Place) -> "PlaceWords":
        return cls(place, words_at(place.text))

    def spans(self, term: Term) -> list[tuple[int, int]]:
        """Where ``term`` occurs: character spans in the place's text (asked often: kept)."""
        found = self._found.get(term)
        if found is None:
            found = self._found[term] = self._find(term)
        return found

    def _find(self, term: Term) -> list[tuple[int, int]]:
        located, size = self.located, len(term.words)
        if not size:
            return []
        last = term.words[-1]
        if size == 1:
            if term.prefix:
                return [(start, end) for word, start, end in located if word.startswith(last)]
            return [(start, end) for word, start, end in located if word == last]
        first, middle = term.words[0], term.words[1:-1]
        found: list[tuple[int, int]] = []
        for i in range(len(located) - size + 1):
            if located[i][0] != first:
                continue
            if any(located[i + 1 + k][0] != word for k, word in enumerate(middle)):
                continue
            word = located[i + size - 1][0]
            if word == last or (term.prefix and word.startswith(last)):
                found.append((located[i][1], located[i + size - 1][2]))
        return found


def place_matches(places: list[PlaceWords], terms: Iterable[Term]) -> bool:
    """Every positive term is in one of ``places`` and no negated term is in any of them."""
    for term in terms:
        present = any(pw.spans(term) for pw in places)
        if present == term.negated:
            return False
    return True


def best_place(places: list[PlaceWords], terms: Iterable[Term]) -> tuple[PlaceWords, list[Spans]] | None:
    """The place holding the most positive terms (the first on a tie), with each term's spans in it."""
    positive = [t for t in terms if not t.negated]
    best: tuple[int, PlaceWords, list[list[tuple[int, int]]]] | None = None
    for pw in places:
        found = [pw.spans(term) for term in positive]
        held = sum(1 for spans in found if spans)
        if held and (best is None or held > best[0]):
            best = (held, pw, [spans for spans in found if spans])
    return None if best is None else (best[1], best[2])


# -- snippets -----------------------------------------------------------------


@dataclass(frozen=True)
class Snippet:
    """A one-line cut of a place around its first match: ``(text, is_match)`` segments, raw (not yet safe)."""

    segments: tuple[tuple[str, bool], ...]

    @property
    def plain(self) -> str:
        return "".join(text for text, _match in self.segments)


_SPACE = re.compile(r"\s+")


def _one_line(text: str) -> str:
    return _SPACE.sub(" ", text)


def _anchor(groups: list[Spans], reach: int) -> tuple[int, int]:
    """The span to centre a snippet on: the one with the most other terms within ``reach`` after it."""
    best: tuple[int, tuple[int, int]] | None = None
    for span in sorted(span for group in groups for span in group[:50]):
        end = span[0] + reach
        covered = sum(1 for group in groups if any(span[0] <= s and e <= end for s, e in group))
        if best is None or covered > best[0]:
            best = (covered, span)
    assert best is not None
    return best[1]


def snippet(text: str, groups: list[Spans], width: int = 100) -> Snippet:
    """About ``width`` characters of ``text`` around its matches, every match in the window marked.

    ``groups`` holds each term's spans; the window goes where most terms are
    close together. Whitespace (newlines included) becomes single spaces; an
    ellipsis marks a cut.
    """
    spans = sorted({span for group in groups for span in group})
    if not spans:
        cut = _one_line(text.strip())
        return Snippet(((cut[:width] + ("…" if len(cut) > width else ""), False),))
    first_start, first_end = _anchor(groups, width * 2 // 3)
    lead = max(width // 3, 10)
    start = max(0, first_start - lead)
    end = max(first_end, min(len(text), start + width))
    if start > 0:  # do not start inside a word
        space = text.rfind(" ", max(start - 15, 0), start)
        start = space + 1 if space != -1 else start
    segments: list[tuple[str, bool]] = []
    if start > 0:
        segments.append(("…", False))
    at = start
    for span_start, span_end in spans:
        span_start = max(span_start, at)
        if span_start >= end or span_end <= span_start:
            continue
        span_end = min(span_end, end)
        if span_start > at:
            segments.append((_one_line(text[at:span_start]), False))
        segments.append((_one_line(text[span_start:span_end]), True))
        at = span_end
    if at < end:
        segments.append((_one_line(text[at:end]), False))
    if end < len(text):
        segments.append(("…", False))
    if len(segments) > 1 and segments[0][0] == "…" and not segments[1][1]:
        segments[1] = (segments[1][0].lstrip(), False)
    elif segments and not segments[0][1]:
        segments[0] = (segments[0][0].lstrip(), False)
    return Snippet(tuple((piece, match) for piece, match in segments if piece))


def highlight_spans(text: str, terms: Iterable[Term]) -> list[tuple[int, int]]:
    """Where the positive ``terms`` occur in any shown text (a widget's, a line's), merged and in order."""
    located = PlaceWords.of(Place(TEXT, text))
    spans = sorted({span for term in terms if not term.negated for span in located.spans(term)})
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
