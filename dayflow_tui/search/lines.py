"""Hits as ``dayflow search`` prints them: one line each, styled for a terminal, marked for a pipe, or JSON.

Every piece of a hit came from a model, a tool or a person: it goes through
``safe_text.printable`` (control characters shown as escapes) and into
``rich.text.Text`` as plain strings, never parsed as markup.
"""

from __future__ import annotations

from rich.text import Text

from ..safe_text import one_line, printable
from ..store.search import Hit
from .text import PLACE_OF

MATCH_STYLE = "bold black on yellow"
# Where a pipe or a file gets the match: between these, as the scripts expect.
MARK_OPEN, MARK_CLOSE = ">>", "<<"


def safe_segments(hit: Hit) -> list[tuple[str, bool]]:
    """The snippet's segments made printable (each on its own, so an escape never splits a match)."""
    return [(printable(text), match) for text, match in hit.snippet.segments]


def _head(hit: Hit) -> list[tuple[str, str]]:
    step = f"step {hit.step}" if hit.step else "-"
    tool = one_line(hit.tool, 24) if hit.tool else "-"
    return [(hit.run_id, "cyan"), ("  ", ""), (f"{step:<8}", ""), ("  ", ""), (f"{hit.label:<11}", "dim"),
            ("  ", ""), (f"{tool:<14}", "bold"), ("  ", "")]


def hit_text(hit: Hit) -> Text:
    """A terminal line: the match highlighted with a style."""
    line = Text(no_wrap=True, overflow="ellipsis", end="")
    for text, style in _head(hit):
        line.append(printable(text), style)
    for text, match in safe_segments(hit):
        line.append(text, MATCH_STYLE if match else "")
    return line


def hit_plain(hit: Hit) -> str:
    """A line for a pipe or a file: the match between ``>>`` and ``<<``."""
    head = "".join(printable(text) for text, _style in _head(hit))
    body = "".join(f"{MARK_OPEN}{text}{MARK_CLOSE}" if match else text for text, match in safe_segments(hit))
    return head + body


def hit_json(hit: Hit) -> dict:
    """One hit for ``--json`` (print with ``printable_json``): the snippet plus the spans of its matches."""
    snippet, spans = "", []
    for text, match in hit.snippet.segments:  # raw: printable_json escapes what a terminal would act on
        if match:
            spans.append([len(snippet), len(snippet) + len(text)])
        snippet += text
    return {"run_id": hit.run_id, "step": hit.step, "where": PLACE_OF[hit.column], "label": hit.label,
            "tool": hit.tool, "snippet": snippet, "highlights": spans, "status": hit.status, "at": hit.at,
            "also": [{"where": PLACE_OF[column], "tool": tool} for column, tool in hit.others]}
