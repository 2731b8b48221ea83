"""JSON you can read: payloads pretty-printed and highlighted, each one folding from the keyboard.

A line-API ``ScrollView`` (Toolong's pattern): the document is a list of lines, only the rows on
screen are drawn, and drawn rows are kept in an LRU cache, so a tool result of a megabyte scrolls
like a short one. Nothing shown is parsed as markup: every line becomes plain ``Segment`` text
after ``safe_text`` (JSON escapes control characters; text that is not JSON goes through
``printable``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...safe_text import printable
from ...views.json_rows import Payload  # noqa: F401 - what a JsonView shows (tests name it here too)
from .. import bindings

# A payload this long starts folded: its header says how long it is, and enter opens it.
FOLD_LINES = 400
_TOKEN = re.compile(
    r'(?P<string>"(?:[^"\\]|\\.)*")(?P<colon>\s*:)?'
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
    r"|(?P<literal>\btrue\b|\bfalse\b|\bnull\b)"
    r"|(?P<punct>[{}\[\],])"
)


def _cells(text: str) -> int:
    """Columns ``text`` takes: ``len`` for ASCII (30x faster than measuring each character of 100,000 lines)."""
    return len(text) if text.isascii() else cell_len(text)


@dataclass(frozen=True)
class _Line:
    payload: int
    header: bool
    text: str


class JsonView(ScrollView, can_focus=True):
    """Payloads as pretty, highlighted JSON; enter folds the one under the cursor."""

    BINDINGS = bindings.JSON_VIEW

    COMPONENT_CLASSES = {
        "json-view--header", "json-view--key", "json-view--string", "json-view--number",
        "json-view--literal", "json-view--punct", "json-view--cursor", "json-view--fold",
    }

    DEFAULT_CSS = """
    JsonView { background: $surface; }
    JsonView > .json-view--header { text-style: bold; color: $text; background: $boost; }
    JsonView > .json-view--fold { color: $text-muted; background: $boost; }
    JsonView > .json-view--key { color: $text-primary; }
    JsonView > .json-view--string { color: $text-success; }
    JsonView > .json-view--number { color: $text-warning; }
    JsonView > .json-view--literal { color: $text-accent; }
    JsonView > .json-view--punct { color: $text-muted; }
    JsonView > .json-view--cursor { background: $block-cursor-blurred-background; }
    JsonView:focus > .json-view--cursor { background: $block-cursor-background 45%; }
    """

    class OpenRequested(Message):
        """Asks the screen to open a document in the editor (the screen owns suspending the app)."""

        def __init__(self, name: str, document: str) -> None:
            super().__init__()
            self.name = name
            self.document = document

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.payloads: list[Payload] = []
        self.folded: set[int] = set()
        self.cursor = 0
        self._bodies: list[list[str]] = []
        self._lines: list[_Line] = []
        self._key: object = None
        self._fold_all = False
        self._cache: LRUCache[tuple, Strip] = LRUCache(1024)

    # -- content -------------------------------------------------------------

    def set_payloads(self, payloads: list[Payload], *, key: object = None) -> None:
        """Show ``payloads``. The same ``key`` again (a live run redrawn) keeps folds, cursor and scroll."""
        same = key is not None and key == self._key and [p.title for p in payloads] == [p.title for p in self.payloads]
        self._key = key
        self.payloads = list(payloads)
        self._bodies = [p.document().split("\n") for p in self.payloads]
        if not same:
            big = {i for i, body in enumerate(self._bodies) if len(body) > FOLD_LINES}
            self.folded = set(range(len(self.payloads))) if self._fold_all else big
            self.cursor = 0
            self.scroll_to(0, 0, animate=False)
        self._relayout()

    def _relayout(self) -> None:
        lines: list[_Line] = []
        for index, (payload, body) in enumerate(zip(self.payloads, self._bodies)):
            lines.append(_Line(index, True, payload.title))
            if index not in self.folded:
                lines.extend(_Line(index, False, text) for text in body)
        self._lines = lines
        self._cache.clear()
        # Headers are drawn with their fold mark and size, and text may hold wide characters: measure what is
        # drawn, or the end of a long header (a tool-use id at 80 columns) cannot be scrolled to.
        width = max((_cells(self._header_text(line) if line.header else line.text) for line in lines), default=0) + 4
        self.virtual_size = Size(width, len(lines))
        self.cursor = min(self.cursor, max(len(lines) - 1, 0))
        self.refresh()

    @property
    def line_count(self) -> int:
        return len(self._lines)

    def line_text(self, y: int) -> str:
        """The plain text of document line ``y`` as drawn (headers with their fold mark)."""
        return self._header_text(self._lines[y]) if self._lines[y].header else self._lines[y].text

    def _header_text(self, line: _Line) -> str:
        body = self._bodies[line.payload]
        folded = line.payload in self.folded
        size = f"{len(body):,} line{'s' if len(body) != 1 else ''}"
        return f"{'▸' if folded else '▾'} {printable(line.text)}  ({size}{', folded' if folded else ''})"

    def payload_at_cursor(self) -> int | None:
        return self._lines[self.cursor].payload if self._lines else None

    # -- drawing -------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        if index >= len(self._lines):
            return Strip.blank(width, base)
        at_cursor = index == self.cursor
        key = (index, at_cursor, self.has_focus, scroll_x, width)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        line = self._lines[index]
        if line.header:
            style = base + self.get_component_rich_style(
                "json-view--fold" if line.payload in self.folded else "json-view--header")
            segments = [Segment(self._header_text(line), style)]
        elif self.payloads[line.payload].text is not None:
            segments = [Segment(line.text, base)]
        else:
            segments = self._highlight(line.text, base)
        strip = Strip(segments)
        if line.header:  # a header is a band across the view, folded or not
            strip = strip.extend_cell_length(scroll_x + width, segments[0].style)
        strip = strip.crop_extend(scroll_x, scroll_x + width, base)
        if at_cursor:  # over the line's own colours: only the background changes, the highlighting stays
            cursor = Style(bgcolor=self.get_component_rich_style("json-view--cursor").bgcolor)
            strip = Strip(Segment.apply_style(strip, post_style=cursor), strip.cell_length)
        self._cache[key] = strip
        return strip

    def _highlight(self, text: str, base: Style) -> list[Segment]:
        styles = {name: base + self.get_component_rich_style(f"json-view--{name}")
                  for name in ("key", "string", "number", "literal", "punct")}
        segments: list[Segment] = []
        position = 0
        for match in _TOKEN.finditer(text):
            if match.start() > position:
                segments.append(Segment(text[position:match.start()], base))
            kind = match.lastgroup
            if match.group("string") is not None:
                if match.group("colon") is not None:
                    segments.append(Segment(match.group("string"), styles["key"]))
                    segments.append(Segment(match.group("colon"), styles["punct"]))
                else:
                    segments.append(Segment(match.group("string"), styles["string"]))
            else:
                segments.append(Segment(match.group(), styles[kind or "punct"]))
            position = match.end()
        if position < len(text):
            segments.append(Segment(text[position:], base))
        return segments

    # -- moving --------------------------------------------------------------

    def _move_to(self, line: int) -> None:
        if not self._lines:
            return
        self.cursor = max(0, min(line, len(self._lines) - 1))
        top, height = self.scroll_offset.y, max(self.size.height, 1)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False)
        self.refresh()

    def action_cursor(self, delta: int) -> None:
        self._move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(self.size.height - 1, 1))

    def action_edge(self, direction: int) -> None:
        self._move_to(0 if direction < 0 else len(self._lines) - 1)

    def action_pan(self, delta: int) -> None:
        self.scroll_to(x=max(self.scroll_offset.x + delta, 0), animate=False)

    def action_payload(self, direction: int) -> None:
        headers = [y for y, line in enumerate(self._lines) if line.header]
        later = [y for y in headers if (y > self.cursor if direction > 0 else y < self.cursor)]
        if later:
            self._move_to(later[0] if direction > 0 else later[-1])

    # -- folding -------------------------------------------------------------

    def fold(self, payload: int, folded: bool) -> None:
        (self.folded.add if folded else self.folded.discard)(payload)
        header = next(y for y, line in enumerate(self._lines) if line.header and line.payload == payload)
        top = self.scroll_offset.y
        self._relayout()
        # The header stays where it was on screen; the cursor goes to it.
        new_header = next(y for y, line in enumerate(self._lines) if line.header and line.payload == payload)
        self.scroll_to(y=max(top + new_header - header, 0), animate=False)
        self._move_to(new_header)

    def action_toggle(self) -> None:
        payload = self.payload_at_cursor()
        if payload is not None:
            self.fold(payload, payload not in self.folded)

    def action_toggle_all(self) -> None:
        everything = set(range(len(self.payloads)))
        self._fold_all = self.folded != everything
        payload = self.payload_at_cursor()
        self.folded = everything if self._fold_all else set()
        self._relayout()
        if payload is not None:
            self._move_to(next(y for y, line in enumerate(self._lines) if line.header and line.payload == payload))

    def on_click(self, event: events.Click) -> None:
        index = self.scroll_offset.y + event.y
        if 0 <= index < len(self._lines):
            self._move_to(index)
            if self._lines[index].header:
                self.action_toggle()

    # -- copy and open -------------------------------------------------------

    def _chosen(self, everything: bool) -> tuple[str, str] | None:
        if not self.payloads:
            return None
        if everything:
            return "everything shown", "\n".join(p.document() for p in self.payloads)
        payload = self.payloads[self.payload_at_cursor() or 0]
        return payload.title, payload.document()

    def action_copy(self, everything: bool) -> None:
        chosen = self._chosen(everything)
        if chosen is None:
            self.notify("Nothing to copy.", severity="warning")
            return
        title, document = chosen
        self.app.copy_to_clipboard(document)
        self.notify(f"Copied {printable(title)} ({len(document):,} characters) to the clipboard.", markup=False)

    def action_open_editor(self) -> None:
        chosen = self._chosen(False)
        if chosen is None:
            self.notify("Nothing to open.", severity="warning")
            return
        self.post_message(self.OpenRequested(*chosen))
