"""The search query language: words, "exact phrases", -exclusions, prefix*, and field:value filters.

    budget review                 both words, in one place of a step (or the task, the brief, an error)
    "quarterly budget"            the words next to each other, in this order
    -draft                        places holding "draft" do not count
    calend*                       a word starting with "calend"
    status:failed tool:read_inbox run:3bd67b in:result

``in:`` takes text, args (tool calls), result (tool results), error, final
or task, and several (``in:result,error``) widen it; ``status:`` takes any
run status (``interrupted`` included); ``run:`` an id or its beginning.
Matching ignores case and accents. A ``name:value`` whose name is not a
field is searched as text (``12:30``, ``https://...``). A query that cannot
be used is one ``UsageError`` line (exit 64) that says what to change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..config import values
from ..config.errors import QueryError
from .text import PLACES, Term, words

if TYPE_CHECKING:
    from ..store.status import RunStatus

FIELDS = ("status", "tool", "run", "in")
MAX_TERMS = 32
# Search as you type treats the word being typed as a prefix once it is this long (one letter would
# match half the index).
MIN_TYPED_PREFIX = 3


@dataclass(frozen=True)
class Query:
    """A parsed query: terms to match, and filters on where and in which runs."""

    terms: tuple[Term, ...] = ()
    statuses: tuple[RunStatus, ...] = ()
    tools: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()  # run ids or their beginnings
    places: tuple[str, ...] = ()  # words of ``in:``; empty means everywhere
    source: str = ""

    @property
    def positive(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if not t.negated)

    @property
    def negative(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.negated)

    @property
    def columns(self) -> tuple[str, ...] | None:
        """The index columns ``in:`` allows, None for all."""
        if not self.places:
            return None
        chosen: list[str] = []
        for place in self.places:
            chosen.extend(c for c in PLACES[place] if c not in chosen)
        return tuple(chosen)

    @property
    def listing(self) -> bool:
        """Only ``status:`` (and perhaps -words): it lists the runs in those statuses, one hit each (their task)."""
        return bool(self.statuses) and not (self.positive or self.tools or self.runs or self.places)

    def searched(self) -> "Query":
        """What the store is asked: a listing looks in every run's task, which each run has exactly once."""
        return replace(self, places=("task",)) if self.listing else self

    def with_filters(self, *, statuses: tuple[RunStatus, ...] = (), tools: tuple[str, ...] = (),
                     runs: tuple[str, ...] = ()) -> "Query":
        """This query narrowed by command-line filters (added to the ones written in the query)."""
        return replace(self, statuses=tuple(dict.fromkeys(self.statuses + statuses)),
                       tools=tuple(dict.fromkeys(self.tools + tools)), runs=tuple(dict.fromkeys(self.runs + runs)))


def _split(source: str) -> list[tuple[str, bool]]:
    """Whitespace-separated pieces; a double-quoted stretch stays one piece. ``(piece, had_quotes)``."""
    pieces: list[tuple[str, bool]] = []
    current: list[str] = []
    quoted = in_quotes = False
    for ch in source:
        if ch == '"':
            in_quotes = not in_quotes
            quoted = True
            current.append(ch)
        elif ch.isspace() and not in_quotes:
            if current:
                pieces.append(("".join(current), quoted))
            current, quoted = [], False
        else:
            current.append(ch)
    if in_quotes:
        raise QueryError(f'unclosed quote in {source.strip()!r}: close the phrase with a second "')
    if current:
        pieces.append(("".join(current), quoted))
    return pieces


def _field_values(name: str, raw: str) -> list[str]:
    value = raw.replace('"', "")
    values = [v.strip() for v in value.split(",") if v.strip()]
    if not values:
        raise QueryError(f"{name}: needs a value (e.g. {_EXAMPLES[name]})")
    return values


_EXAMPLES = {"status": "status:failed", "tool": "tool:read_inbox", "run": "run:3bd67bee", "in": "in:result"}


def parse(source: str, *, prefix_last: bool = False) -> Query:
    """Parse ``source``; ``prefix_last`` treats a last bare word as a prefix (search as you type)."""
    terms: list[Term] = []
    statuses: list[RunStatus] = []
    tools: list[str] = []
    runs: list[str] = []
    places: list[str] = []
    from ..store.status import RunStatus  # here, not at import: the store imports this module

    pieces = _split(source)
    for index, (piece, quoted) in enumerate(pieces):
        name, colon, value = piece.partition(":")
        if colon and name.lower() in FIELDS and not name.startswith('"'):
            field_name = name.lower()
            for item in _field_values(field_name, value):
                if field_name == "status":
                    try:
                        statuses.append(RunStatus.parse(item))
                    except ValueError as exc:
                        raise QueryError(str(exc)) from None
                elif field_name == "in":
                    if item.lower() not in PLACES:
                        raise QueryError(f"in:{item}: unknown place (choose from {', '.join(PLACES)})")
                    places.append(item.lower())
                elif field_name == "tool":
                    tools.append(item)
                else:
                    runs.append(item)
            continue
        negated = piece.startswith("-") and len(piece) > 1
        body = piece[1:] if negated else piece
        prefix = body.endswith("*")  # after a closing quote too: "quarterly budg"*
        found = tuple(words(body.rstrip("*").replace('"', " ")))
        if not found:
            continue  # punctuation only: nothing a word index can look for
        if (prefix_last and index == len(pieces) - 1 and not quoted and not negated and not source.endswith(" ")
                and len(found[-1]) >= MIN_TYPED_PREFIX):
            prefix = True
        terms.append(Term(found, prefix=prefix, negated=negated, shown=piece))
    if len(terms) > MAX_TERMS:
        raise QueryError(f"too many words ({len(terms)}); a query takes at most {MAX_TERMS}")
    return Query(tuple(terms), tuple(dict.fromkeys(statuses)), tuple(dict.fromkeys(tools)),
                 tuple(dict.fromkeys(runs)), tuple(dict.fromkeys(places)), source)


def check_searchable(query: Query) -> None:
    """Refuse a query that names nothing to look for (exclusions alone would match everything); ``status:``
    alone lists the runs in that status."""
    if query.positive or query.tools or query.runs or query.places or query.statuses:
        return
    if query.negative:
        raise QueryError('nothing to look for: -word only excludes; add a word, a "phrase", in:, tool:, run: '
                         'or status:')
    raise QueryError('nothing to look for: give a word, a "phrase", in:PLACE, tool:NAME, run:ID or status:S')


def parse_statuses(text: str) -> tuple["RunStatus", ...]:
    """``done,failed`` as statuses; an unknown word is a ``QueryError``."""
    from ..store.status import RunStatus

    try:
        return tuple(RunStatus.parse(word) for word in text.split(",") if word.strip())
    except ValueError as exc:
        raise QueryError(f"--status: {exc}") from None


def parse_since(text: str) -> str:
    """``--since``: an age (``90s``, ``12h``, ``7d``) or a date, read as every command reads one (``config.values``)."""
    try:
        return values.since(text)
    except values.BadValue as why:
        raise QueryError(f"--since {values.shown(text)} {why}") from None
