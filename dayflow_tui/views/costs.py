"""What runs cost, as lines: spend over time, the dashboard's spend panel, and the next call's price.

The sums are ``money``'s; this module reads them and words them once for
both front ends (``dayflow spend`` and the dashboard's spend panel give the
same figures).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..money.cost import budget_text, cache_text, format_usd, usd_number

# The words for money that both front ends use: from here, never worded twice.
__all__ = ["budget_text", "cache_text", "cost_text", "format_usd", "usd_number", "SpendTable", "read_spend",
           "spend_cost_text", "spend_cache_text", "spend_json", "spend_summary", "PricedResume", "price_resume"]


def cost_text(total) -> str:
    """A run's or a step's dollars, ``unknown`` when some call has no price."""
    return format_usd(total, unknown="unknown")


@dataclass(frozen=True)
class SpendTable:
    """Spend per agent, model or day since a moment (None: all time), and the total."""

    since: str | None
    by: str
    rows: tuple
    total: object  # a money.cost.SpendRow

    def label(self) -> str:
        from ..money.cost import since_label

        return since_label(self.since)


def read_spend(store, *, since: str | None = None, by: str = "model") -> SpendTable:
    from ..money.cost import spend

    rows, total = spend(store, since=since, by=by)
    return SpendTable(since, by, tuple(rows), total)


def spend_cost_text(row) -> str:
    """A spend row's dollars; with calls of unpriced models, how many and what the priced ones cost."""
    if row.cost is not None:
        return format_usd(row.cost.total)
    return f"price unknown ({row.unpriced_calls} call(s))" + (
        f"; the priced calls: {format_usd(row.priced.total)}" if row.priced.total else "")


def spend_cache_text(row) -> str:
    return f"{row.cache_read_tokens / row.input_tokens:.0%}" if row.input_tokens else "—"


def spend_json(row, key_name: str) -> dict:
    return {key_name: row.key, "runs": row.runs, "calls": row.calls,
            "input_tokens": row.input_tokens, "output_tokens": row.output_tokens,
            "cache_read_tokens": row.cache_read_tokens,
            "cost_usd": usd_number(row.cost.total) if row.cost is not None else None,
            "priced_usd": usd_number(row.priced.total), "unpriced_calls": row.unpriced_calls}


def spend_summary(store) -> str:
    """The dashboard's spend panel: today, the last 7 and 30 days, and the model most of the 30 days went to."""
    from .. import clock
    from ..config.values import parse_since
    from ..safe_text import printable

    parts = []
    top = None
    for label, span in (("today", None), ("7 days", "7d"), ("30 days", "30d")):
        since = parse_since(span) if span else clock.iso(clock.now().replace(hour=0, minute=0, second=0,
                                                                              microsecond=0))
        table = read_spend(store, since=since, by="model")
        total = table.total
        parts.append(f"{label} {format_usd(total.cost.total) if total.cost is not None else 'price unknown'}")
        if span == "30d" and table.rows:
            top = table.rows[0]
    text = "spend: " + " · ".join(parts)
    if top is not None and top.priced.total:
        text += f" · most: {printable(top.key)} {format_usd(top.priced.total)}"
    return text


@dataclass(frozen=True)
class PricedResume:
    """A run as read now, and what its next call will likely cost (a ``money.estimate.ResumeEstimate``),
    or why it cannot be priced (``error``, one line): priced or not, a resume reports what is wrong itself."""

    run: object
    estimate: object | None
    error: str | None = None


def price_resume(store, run_id: str) -> PricedResume:
    """Reads only; makes no model call (with an API key, the API's free token count) and writes nothing.

    A run that cannot be read raises; a next call that cannot be priced is said in ``error``.
    """
    from ..agent.resume_request import resume_estimate
    from ..redaction import redacted_line

    run = store.get_run(run_id)
    try:
        return PricedResume(run, resume_estimate(store, run.id))
    except Exception as exc:  # noqa: BLE001 - the line under Resume says why; the screen goes on
        return PricedResume(run, None, redacted_line(exc, 200))
