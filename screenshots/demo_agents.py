"""Two user agents for the README's screenshots (``make_screenshots.py``): a support-queue triage agent whose
runs are titled by the agent (``title="Queue {task}"``), and a research agent with web search whose model
names each run through ``set_title``. Their tools answer from fixed data, so the screenshots are the same on
every machine; the runs are recorded with this file as their agent reference so the dashboard can resume them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from dayflow_tui.agent.define import Agent, Param, tool
from dayflow_tui.agent.titles import set_title
from dayflow_tui.agent.tools import ToolContext

TICKETS = {
    "acme": [
        {"id": "T-4812", "from": "ops@acme.example", "subject": "Webhook deliveries delayed since 02:00 UTC",
         "age_h": 5},
        {"id": "T-4815", "from": "finance@acme.example", "subject": "Invoice 2026-11 charged twice", "age_h": 3},
        {"id": "T-4817", "from": "dev@acme.example", "subject": "How do I rotate an API key without downtime?",
         "age_h": 1},
    ],
    "billing": [
        {"id": "B-221", "from": "ap@globex.example", "subject": "VAT number missing on invoice", "age_h": 20},
        {"id": "B-224", "from": "cfo@initech.example", "subject": "Switch to annual plan, please", "age_h": 6},
    ],
}


@tool(read_only=True)
def list_tickets(ctx: ToolContext, queue: Literal["acme", "billing"] = "acme") -> dict:
    """List the open tickets of a support queue, oldest first."""
    found = TICKETS[queue]
    return {"ok": True, "queue": queue, "count": len(found), "tickets": found}


@tool(idempotent="ticket_id", needs_approval=lambda args: args.get("label") == "close")
def label_ticket(ctx: ToolContext, ticket_id: Annotated[str, Param(min_length=1, max_length=20)],
                 label: Literal["urgent", "billing", "how-to", "close"]) -> dict:
    """Label a ticket (closing one waits for a person's approval)."""
    return {"ok": True, "ticket_id": ticket_id, "label": label}


PAGES = {
    "https://www.postgresql.org/docs/current/logical-replication.html":
        "Logical replication is a method of replicating data objects and their changes, based upon their "
        "replication identity (usually a primary key)...",
    "https://eur-lex.europa.eu/eli/reg/2024/1689/oj":
        "Article 113: This Regulation shall apply from 2 August 2026. Chapter III Section 4 shall apply from "
        "2 August 2025...",
}


@tool(read_only=True)
def fetch_page(ctx: ToolContext, url: Annotated[str, Param("The page's address.", min_length=8, max_length=500)]
               ) -> dict:
    """Fetch a web page's text (the first 4,000 characters)."""
    text = PAGES.get(url, "(a page of release notes and changelog entries)")
    return {"ok": True, "url": url, "text": text[:4000]}


TRIAGE = Agent(
    name="triage",
    system="You triage a support queue: label each open ticket, close the ones already answered, and say "
           "what needs a person today.",
    tools=(list_tickets, label_ticket),
    title="Queue {task}",
    max_steps=6,
)

RESEARCH = Agent(
    name="research",
    system="You research a question on the web and answer with sources. Name the run with set_title first.",
    tools=(fetch_page, set_title),
    server_tools=({"type": "web_search_20250305", "name": "web_search", "max_uses": 5},),
    max_steps=8,
)


# A writer that hands research to two subagents side by side (issue #27): each call is a child run.
RESEARCHER = Agent(
    name="researcher",
    system="Find the facts with fetch_page and answer with where each comes from.",
    tools=(fetch_page,),
    max_steps=4,
)

CRITIC = Agent(
    name="critic",
    system="Look for what limits or contradicts an easy answer (fetch_page); list the caveats.",
    tools=(fetch_page,),
    max_steps=4,
    handback="summary",
)

WRITER = Agent(
    name="writer",
    system="Ask researcher and critic at once (both calls in one reply), then write a short answer.",
    subagents=[RESEARCHER, CRITIC],
    max_steps=6,
)
