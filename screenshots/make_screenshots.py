"""Regenerate the README's screenshots by driving the real dashboard with Pilot.

    .venv/bin/python screenshots/make_screenshots.py            # writes the SVGs into this folder
    .venv/bin/python screenshots/make_screenshots.py --out DIR  # elsewhere (tests/test_screenshots_script.py)

Builds a realistic database with the real loop, then saves SVGs of the run list (120x36 and 80x24), a
transcript, its JSON view, the tasks screen, a search, a resume in progress and a reply arriving mid-stream.

The database: four days of runs from three agents, the built-in brief and the two in ``demo_agents.py`` (a
triage agent that titles its runs, a research agent whose model names each run with ``set_title`` and pays
for web searches), in every status (done, running, interrupted, failed, budget, queued with priorities,
waiting for approval, cancelled), with forks under their parents. Every run is priced as claude-sonnet-4-5:
the brief's runs by the offline model's usage estimate, the user agents' by usage made up here from a
hash of the task (the same on every machine). The clock is pinned (``NOW``), ids are fixed, step durations
are fixed (``SteadyTimer``), animations are off and every read has finished before a snap; only a few
pauses are timed, so the script needs a quiet machine (about 20 s).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

os.environ["TEXTUAL_ANIMATIONS"] = "none"
os.environ["DAYFLOW_OFFLINE_DELAY"] = "0"
for _name in ("DAYFLOW_MODEL", "DAYFLOW_PRICES", "DAYFLOW_CONFIG", "DAYFLOW_COMPACT_AT", "DAYFLOW_CALL_LOG",
              "DAYFLOW_OTEL_ENDPOINT"):
    os.environ.pop(_name, None)

from dayflow_tui.agent import driver, runs  # noqa: E402
from dayflow_tui.agent.registry import agent_columns  # noqa: E402
from dayflow_tui.agent.offline import OfflineClient, _streamed  # noqa: E402
from dayflow_tui.agent.offline_message import OfflineMessage  # noqa: E402
from dayflow_tui.config.errors import ModelCallFailed  # noqa: E402
from dayflow_tui.money.tokens import estimate_tokens  # noqa: E402
from dayflow_tui.store import StepRecord, open_store  # noqa: E402
from dayflow_tui.store.tables.forks import ForkPlan  # noqa: E402
from dayflow_tui.tui.demo_data import clock_at  # noqa: E402
from dayflow_tui.tui.app import DayflowApp  # noqa: E402
from dayflow_tui.tui.pilot_support import wait_until  # noqa: E402
from dayflow_tui.tui.screens.transcript import TranscriptScreen  # noqa: E402
from dayflow_tui.tui.widgets.run_table import RunTable  # noqa: E402

import demo_agents  # noqa: E402  (this folder, on the path as the script's own)

SIZE = (120, 36)
SMALL = (80, 24)
MODEL = "claude-sonnet-4-5"
NOW = datetime(2026, 12, 4, 16, 40)  # a Friday afternoon: the runs span Tuesday to Friday
AGENTS_FILE = str(HERE / "demo_agents.py")
SHOTS = ("run-list.svg", "run-list-80x24.svg", "search.svg", "transcript.svg", "json-view.svg", "tasks.svg",
         "resume.svg", "reply-streaming.svg", "claude-code.svg", "otel-collect.svg", "subagents.svg")
# Claude Code sessions are imported from here (a fixed path: an imported run's id is made from it).
CLAUDE_PROJECTS = Path(tempfile.gettempdir()) / "dayflow-screenshots-claude" / "projects"


class SteadyTimer:
    """Stands in for the driver's ``time`` module: every model call takes exactly 2.3 s."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def monotonic(self) -> float:
        return next(self._ticks) * 2.3


# -- a model for the user agents: scripted replies, usage made up from a hash ------------------------------

RESEARCH_ANSWERS = {
    "replication": ("Postgres replication, 2 TB",
                    "https://www.postgresql.org/docs/current/logical-replication.html",
                    "## Recommendation\npglogical 2.4 for the move, then native logical replication.\n\n"
                    "- **Native** (PG 16+): no extension, but initial copy of 2 TB takes ~9 h at 60 MB/s.\n"
                    "- **pglogical**: parallel table sync, row filters; maintenance only.\n"
                    "- **Debezium**: only if Kafka is already there.\n\nSources: postgresql.org, 2ndQuadrant."),
    "ai act": ("EU AI Act and our chatbot",
               "https://eur-lex.europa.eu/eli/reg/2024/1689/oj",
               "## In short\nHigh-risk obligations apply from 2 August 2026; nothing new starts in December.\n\n"
               "- GPAI providers: transparency duties since Aug 2025.\n- Our chatbot: disclose it is a bot.\n\n"
               "Sources: EUR-Lex, Commission Q&A (Nov 2026)."),
    "vector": ("Vector search under $200/mo",
               "https://www.postgresql.org/docs/current/logical-replication.html",
               "## Shortlist\npgvector on the existing Postgres first; Qdrant Cloud if recall drops.\n\n"
               "- pgvector HNSW: 5M vectors fit the current instance.\n- Qdrant 1 GB tier: $25/month."),
    "rate limit": ("API rate limits, nightly batch",
                   "https://www.postgresql.org/docs/current/logical-replication.html",
                   "## Answer\nTier 3 allows 2,000 requests/min; the nightly job peaks at 340.\n\n"
                   "- Use the Message Batches API: half price, 24 h window."),
}


def _topic(task: str) -> str:
    lower = task.lower()
    return next((key for key in RESEARCH_ANSWERS if key in lower), "replication")


def _texts(messages: list[dict]) -> str:
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(out)


def _triage_reply(task: str, step: int, history: str) -> tuple[list[dict], str]:
    queue = "billing" if "billing" in task.lower() else "acme"
    if step == 1:
        return ([{"type": "text", "text": f"Reading the {queue} queue."},
                 {"type": "tool_use", "id": "toolu_tri0101", "name": "list_tickets", "input": {"queue": queue}}],
                "tool_use")
    tickets = demo_agents.TICKETS[queue]
    labels = {"T-4812": "urgent", "T-4815": "billing", "T-4817": "how-to", "B-221": "billing", "B-224": "billing"}
    if step == 2:
        calls = [{"type": "tool_use", "id": f"toolu_tri02{i:02d}", "name": "label_ticket",
                  "input": {"ticket_id": t["id"], "label": labels[t["id"]]}} for i, t in enumerate(tickets)]
        if "close answered" in task.lower():
            calls.append({"type": "tool_use", "id": "toolu_tri0299", "name": "label_ticket",
                          "input": {"ticket_id": tickets[-1]["id"], "label": "close"}})
        return [{"type": "text", "text": f"Labelling {len(tickets)} tickets."}] + calls, "tool_use"
    if queue == "billing":
        answer = ("2 billing tickets labelled: B-221 needs the VAT number re-issued (20 h old), "
                  "B-224 wants the annual plan: send the quote today.")
    else:
        answer = ("3 tickets labelled. T-4812 urgent: webhook deliveries 5 h late, page on-call. "
                  "T-4815 billing: refund the double charge. T-4817 how-to: link the key-rotation guide.")
    return [{"type": "text", "text": answer}], "end_turn"


def _research_reply(task: str, step: int, history: str) -> tuple[list[dict], str]:
    title, url, answer = RESEARCH_ANSWERS[_topic(task)]
    if step == 1:
        return ([{"type": "text", "text": "Searching the web for current sources, then reading the primary one."},
                 {"type": "tool_use", "id": "toolu_res0100", "name": "set_title", "input": {"title": title}},
                 {"type": "tool_use", "id": "toolu_res0101", "name": "fetch_page", "input": {"url": url}}],
                "tool_use")
    if "open-source" in history:
        answer = answer.replace("## Recommendation", "## Recommendation (open-source only)")
    return [{"type": "text", "text": answer}], "end_turn"


class ScriptedClient:
    """Quacks like ``anthropic.Anthropic`` for the user agents: a scripted reply per step, usage from a hash of
    the task and step (so a run costs what a real one would, and the same every time)."""

    def __init__(self) -> None:
        self.messages = self
        self.calls = 0

    def create(self, *, model: str, messages: list[dict], tools: list[dict] | None = None, stream: bool = False,
               **_: object):
        self.calls += 1
        names = {t.get("name") for t in tools or []}
        step = sum(1 for m in messages if m.get("role") == "assistant") + 1
        task = _texts(messages[:1])
        history = _texts(messages)
        research = "fetch_page" in names
        content, stop = (_research_reply if research else _triage_reply)(task, step, history)
        seed = int(hashlib.sha256(f"{task}|{step}".encode()).hexdigest()[:8], 16)
        prompt = estimate_tokens({"tools": tools, "messages": messages})
        # A research step reads search results: tens of thousands of tokens, mostly from the cache.
        scale = 9 if research else 2
        written = (2400 + seed % 900) * scale if step == 1 else 600 + seed % 400
        read = 0 if step == 1 else (2400 + seed % 900) * scale + prompt
        usage = {"input_tokens": prompt + seed % 700, "cache_creation_input_tokens": written,
                 "cache_read_input_tokens": read, "output_tokens": 180 + seed % 600 + (500 if stop == "end_turn" else 0)}
        if research and step == 1:
            usage["server_tool_use"] = {"web_search_requests": 3 + seed % 4}
        message = OfflineMessage.model_validate({
            "id": f"msg_shot_{seed:08x}{step:02d}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage})
        return _streamed(message.to_dict(mode="json"), 0) if stream else message


class TeamModel(ScriptedClient):
    """The scripted model for the writer and its two subagents (a child is told by the tools it is offered)."""

    def create(self, *, model: str, messages: list[dict], tools: list[dict] | None = None, stream: bool = False,
               **_: object):
        self.calls += 1
        names = {t.get("name") for t in tools or []}
        step = sum(1 for m in messages if m.get("role") == "assistant") + 1
        task = _texts(messages[:1])
        if "researcher" in names:  # the writer
            content, stop = ([{"type": "text", "text": "Asking the researcher and the critic at once."},
                              {"type": "tool_use", "id": "toolu_team01", "name": "researcher",
                               "input": {"task": "What do the top 3 CDNs charge for 40 TB/month of egress?"}},
                              {"type": "tool_use", "id": "toolu_team02", "name": "critic",
                               "input": {"task": "What makes a CDN's list price misleading at 40 TB/month?"}}],
                             "tool_use") if step == 1 else (
                [{"type": "text", "text": "At 40 TB/month: Cloudflare's flat plans win on list price; Fastly and "
                  "CloudFront land near $2,800-3,400 before committed-use discounts, which the critic says "
                  "cut 20-40% on a one-year term."}], "end_turn")
        elif step == 1:
            content, stop = ([{"type": "text", "text": "Reading the price pages."},
                              {"type": "tool_use", "id": f"toolu_page{len(task) % 97:02d}", "name": "fetch_page",
                               "input": {"url": "https://www.cloudflare.com/plans/"}}], "tool_use")
        else:
            words = ("Cloudflare: flat plans, no metered egress; CloudFront: $0.085/GB first 10 TB, then "
                     "$0.080; Fastly: $0.12/GB list." if "charge" in task else
                     "List prices ignore committed-use discounts (20-40%), request fees and origin shield costs.")
            content, stop = [{"type": "text", "text": words}], "end_turn"
        seed = int(hashlib.sha256(f"{task}|{step}".encode()).hexdigest()[:8], 16)
        usage = {"input_tokens": estimate_tokens({"tools": tools, "messages": messages}) + seed % 500,
                 "cache_creation_input_tokens": 1800 + seed % 600 if step == 1 else 0,
                 "cache_read_input_tokens": 0 if step == 1 else 1800 + seed % 600,
                 "output_tokens": 120 + seed % 300}
        message = OfflineMessage.model_validate({
            "id": f"msg_team_{seed:08x}{step:02d}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage})
        return _streamed(message.to_dict(mode="json"), 0) if stream else message


class FailingScripted(ScriptedClient):
    """The scripted model whose call number ``fail_on`` fails like an overloaded API."""

    def __init__(self, fail_on: int) -> None:
        super().__init__()
        self.fail_on = fail_on

    def create(self, **request):
        if self.calls + 1 == self.fail_on:
            self.calls += 1
            raise RuntimeError("529 overloaded_error: the API is overloaded, try again later")
        return super().create(**request)


class BriefModel:
    """The offline model for the built-in brief, its usage scaled to what the real API reports for a brief (the
    offline estimate counts a few hundred tokens a call; a real brief reads a few thousand)."""

    def __init__(self, delay: float = 0.0) -> None:
        self._offline = OfflineClient(delay=delay)
        self.messages = self
        self.calls = 0

    def create(self, **request):
        self.calls += 1
        reply = self._offline.messages.create(**{**request, "stream": False}).to_dict(mode="json")
        usage = reply["usage"]
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            usage[name] = (usage.get(name) or 0) * 6
        usage["output_tokens"] = (usage.get("output_tokens") or 0) * 3
        return _streamed(reply, 0) if request.get("stream") else OfflineMessage.model_validate(reply)


class FailingBrief(BriefModel):
    """The brief's model whose call number ``fail_on`` fails like an overloaded API."""

    def __init__(self, fail_on: int) -> None:
        super().__init__()
        self.fail_on = fail_on

    def create(self, **request):
        if self.calls + 1 == self.fail_on:
            self.calls += 1
            raise RuntimeError("529 overloaded_error: the API is overloaded, try again later")
        return super().create(**request)


class HeldMidStream:
    """The brief's model; its first reply streams ``held_at`` events and then holds until the app stops."""

    held_at = 14

    def __init__(self) -> None:
        self._model = BriefModel()
        self.messages = self
        self.waiting = threading.Event()
        self.app = None

    def create(self, **request):
        events = self._model.create(**request)

        def held():
            for number, event in enumerate(events):
                if number == self.held_at:
                    self.waiting.set()
                    deadline = time.monotonic() + 60
                    while self.app is not None and self.app.is_running and time.monotonic() < deadline:
                        time.sleep(0.02)
                yield event

        return held()


# -- the database --------------------------------------------------------------------------------------------

def day(n: int, hour: int, minute: int = 0) -> datetime:
    """Tuesday 1 December is day 1."""
    return datetime(2026, 11, 30, hour, minute) + timedelta(days=n)


def brief(store, run_id: str, at: datetime, task: str | None = None, **options) -> None:
    with clock_at(at):
        try:
            runs.run_brief(store, run_id=run_id, user_msg=task, model=MODEL,
                           client=options.pop("client", None) or BriefModel(), **options)
        except (SystemExit, ModelCallFailed):
            pass  # an interrupted (crash_after_step) or failed run: recorded as such


def user_run(store, agent, run_id: str, at: datetime, task: str, **options) -> None:
    name = "TRIAGE" if agent is demo_agents.TRIAGE else "RESEARCH"
    with clock_at(at):
        try:
            runs.run_brief(store, run_id=run_id, user_msg=task, model=MODEL, agent=agent,
                           agent_ref=f"{AGENTS_FILE}:{name}",
                           client=options.pop("client", None) or ScriptedClient(), **options)
        except (SystemExit, ModelCallFailed):
            pass


def queue(store, agent, run_id: str, at: datetime, task: str, priority: int = 0) -> None:
    name = "TRIAGE" if agent is demo_agents.TRIAGE else "RESEARCH"
    columns = agent_columns(agent, f"{AGENTS_FILE}:{name}")
    columns["title"] = agent.title_for(task)
    with clock_at(at):  # as ``dayflow run --queue`` records it, with a fixed id
        store.create_run(task, model=MODEL, run_id=run_id, status="queued", agent=columns, priority=priority)


def fork(store, parent: str, run_id: str, at: datetime, step: int, note: str, client) -> None:
    with clock_at(at):
        store.fork_run(parent, ForkPlan(at=step, note=note), run_id=run_id)
        runs.resume(run_id, store=store, client=client)


def build(store):
    """The demo database; returns the lease of the run this process is driving (release it at the end)."""
    T, R = demo_agents.TRIAGE, demo_agents.RESEARCH
    # Tuesday
    brief(store, "brf-1201-0730", day(1, 7, 30))
    user_run(store, T, "tri-1201-0900", day(1, 9), "ACME")
    user_run(store, R, "res-1201-1410", day(1, 14, 10),
             "Compare Postgres logical replication tools for moving a 2 TB cluster")
    fork(store, "res-1201-1410", "res-1201-f1", day(1, 15, 2), 1,
         "Only open-source tools, please.", ScriptedClient())
    user_run(store, T, "tri-1201-1600", day(1, 16), "billing")
    brief(store, "brf-1201-1745", day(1, 17, 45), "What did I promise people today?")
    # Wednesday
    brief(store, "brf-1202-0730", day(2, 7, 30), "Brief for Wednesday")
    fork(store, "brf-1202-0730", "brf-1202-f1", day(2, 8, 5), 1,
         "Leave the newsletters out of the brief.", BriefModel())
    fork(store, "brf-1202-0730", "brf-1202-f2", day(2, 8, 20), 2,
         "Put the budget review first.", BriefModel())
    user_run(store, T, "tri-1202-0900", day(2, 9), "ACME")
    user_run(store, R, "res-1202-1130", day(2, 11, 30), "What do the EU AI Act obligations mean for our chatbot?")
    brief(store, "brf-1202-1815", day(2, 18, 15), "Catch me up on everything since Monday", max_steps=1)
    user_run(store, R, "res-1202-1640", day(2, 16, 40), "Vector search options under $200/month for 5M embeddings")
    # Thursday
    brief(store, "brf-1203-0730", day(3, 7, 30), "Brief for Thursday, ask before adding tasks",
          approval_tools=("create_task",))
    user_run(store, T, "tri-1203-0900", day(3, 9), "ACME")
    user_run(store, R, "res-1203-1020", day(3, 10, 20), "Vector search under $200/mo", max_steps=1)
    brief(store, "brf-1203-1240", day(3, 12, 40), "What's due before the offsite?", client=FailingBrief(fail_on=2))
    user_run(store, R, "res-1203-1500", day(3, 15), "Anthropic rate limits for the nightly batch job")
    queue(store, T, "tri-1203-1700", day(3, 17), "billing")
    store.cancel_run("tri-1203-1700", by="priya", reason="asked twice")
    # Friday
    brief(store, "brf-1204-0730", day(4, 7, 30), "Brief for Friday", crash_after_step=1)
    user_run(store, T, "tri-1204-0900", day(4, 9), "ACME; close answered tickets")
    user_run(store, T, "tri-1204-1130", day(4, 11, 30), "billing", client=FailingScripted(fail_on=2))
    brief(store, "brf-1204-1200", day(4, 12), "Plan my afternoon around the 3pm incident review",
          crash_after_step=2)
    user_run(store, R, "res-1204-1345", day(4, 13, 45), "Compare Postgres logical replication tools for a 40 TB cluster")
    brief(store, "brf-1204-1500", day(4, 15), "Weekly review: what slipped, what is due",
          crash_after_step=1)
    queue(store, R, "res-1204-1610", day(4, 16, 10), "What changed in the EU AI Act guidance this week?", priority=0)
    queue(store, T, "tri-1204-1620", day(4, 16, 20), "ACME", priority=5)
    queue(store, R, "res-1204-1625", day(4, 16, 25), "Vector search options for 50M embeddings", priority=2)
    # A research run this process is driving: its first step in, the second being written.
    with clock_at(day(4, 16, 32)):
        columns = agent_columns(R, f"{AGENTS_FILE}:RESEARCH")
        run, lease = store.create_claimed_run("Which CDN has the best price for 40 TB/month egress?", model=MODEL,
                                              run_id="res-1204-1632", agent=columns)
        store.set_title(run.id, "CDN egress at 40 TB/month")
        store.append_step(run.id, StepRecord(
            n=1, stop_reason="tool_use", model=MODEL, duration_ms=4100, input_tokens=21840, output_tokens=412,
            cache_creation_input_tokens=18200, web_search_requests=4,
            assistant=[{"type": "text", "text": "Searching current price pages of four CDNs."},
                       {"type": "tool_use", "id": "toolu_cdn01", "name": "fetch_page",
                        "input": {"url": "https://www.cloudflare.com/plans/"}}]), lease=lease)
        store.set_tool_results(run.id, 1, [{"type": "tool_result", "tool_use_id": "toolu_cdn01",
                                            "content": json.dumps({"ok": True, "text": "Plans and pricing..."})}])
    return lease


# -- the snaps -----------------------------------------------------------------------------------------------

async def until(pilot, condition, timeout: float = 60.0) -> None:
    try:
        await wait_until(pilot, condition, timeout=timeout)
    except TimeoutError:
        raise SystemExit("the dashboard did not get there in time") from None


def list_ready(app) -> bool:
    table = app.screen.query(RunTable)
    spend = app.screen.query("#spend")
    return bool(table) and table.first().loaded_once and (not spend or "…" not in str(spend.first().render()))


async def open_run(pilot, run_id: str) -> TranscriptScreen:
    table = pilot.app.screen.query_one(RunTable)
    await until(pilot, lambda: any(run.id == run_id for run in table.rows))
    table.select_run(run_id)
    await pilot.pause(0.1)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, TranscriptScreen) and pilot.app.screen.views)
    await pilot.pause(0.4)
    return pilot.app.screen


class Saver:
    def __init__(self, out: Path) -> None:
        self.out = out

    def __call__(self, app, name: str) -> None:
        app.save_screenshot(filename=name, path=str(self.out))
        print(f"wrote {self.out / name}")


async def snap(store, save: Saver) -> None:
    os.environ["DAYFLOW_FAKE_NOW"] = NOW.isoformat()
    # Slow enough that the resumed steps visibly arrive one by one.
    app = DayflowApp(store, client_factory=lambda model: BriefModel(delay=1.5))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: list_ready(app))
        app.screen.query_one(RunTable).select_run("res-1204-1345")
        await pilot.pause(0.6)
        save(app, "run-list.svg")

        await pilot.press("slash", *"replication")
        await until(pilot, lambda: "hits in" in str(app.screen.query_one("#search-status").content))
        await pilot.pause(0.4)
        save(app, "search.svg")
        await pilot.press("escape")
        await pilot.pause(0.2)

        await open_run(pilot, "res-1201-1410")  # step 1: the title set, a page fetched, web searches paid
        await pilot.pause(0.4)
        save(app, "transcript.svg")
        await pilot.press("v", "right_square_bracket", "enter")
        await pilot.pause(0.4)
        save(app, "json-view.svg")
        await pilot.press("v", "escape")
        await pilot.pause(0.2)

        await pilot.press("t")
        await until(pilot, lambda: getattr(app.screen, "loaded", False))
        await pilot.pause(0.4)
        save(app, "tasks.svg")
        await pilot.press("escape")
        await pilot.pause(0.2)

        screen = await open_run(pilot, "brf-1204-0730")
        await pilot.press("r")
        await until(pilot, lambda: len(screen.views) == 2 and screen.steps[-1][1])
        await pilot.pause(0.4)
        save(app, "resume.svg")
        await until(pilot, lambda: not app.is_driving)
        await pilot.press("q")

    # A reply half-way in: the live line shows its words and the tool call forming.
    held = HeldMidStream()
    app = DayflowApp(store, client_factory=lambda model: held)
    held.app = app
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: list_ready(app))
        screen = await open_run(pilot, "brf-1204-1500")
        await pilot.press("r")
        live = screen.query_one("#live")
        await until(pilot, lambda: held.waiting.is_set() and "arriving" in str(live.render()))
        await pilot.pause(0.4)
        save(app, "reply-streaming.svg")
        await pilot.press("q")

    # The same database on an 80x24 terminal: the title or error of the highlighted run below the list.
    app = DayflowApp(store)
    async with app.run_test(size=SMALL) as pilot:
        await until(pilot, lambda: list_ready(app))
        app.screen.query_one(RunTable).select_run("tri-1204-1130")
        await pilot.pause(0.5)
        save(app, "run-list-80x24.svg")
        await pilot.press("q")


def claude_code_session(root: Path) -> None:
    """One Claude Code session file as Claude Code writes it (the record shapes tests/cli/claude_code_fixtures.py
    cites): a prompt, a reply with a Bash call, its result, the answer; one record per content block."""
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    folder = root / "-home-dana-shop"
    folder.mkdir(parents=True)
    base = {"isSidechain": False, "userType": "external", "cwd": "/home/dana/shop", "version": "2.0.14",
            "sessionId": "5b9e0c4e-7d1a-4f5e-9a55-3c2f0e8b7a10", "gitBranch": "fix/cart-total"}
    usage = {"input_tokens": 12, "cache_creation_input_tokens": 4210, "cache_read_input_tokens": 18340,
             "output_tokens": 310, "service_tier": "standard"}

    def assistant(uuid, parent, ts, message_id, block, stop):
        return {**base, "parentUuid": parent, "type": "assistant", "uuid": uuid, "timestamp": ts,
                "requestId": "req_" + message_id[-6:],
                "message": {"id": message_id, "type": "message", "role": "assistant", "model": MODEL + "-20250929",
                            "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage}}

    records = [
        {**base, "parentUuid": None, "type": "user", "uuid": "u1", "timestamp": "2026-12-04T10:02:11.000Z",
         "message": {"role": "user", "content": "The cart total is off by one cent on discounted items. Fix it."}},
        assistant("a1", "u1", "2026-12-04T10:02:15.000Z", "msg_01cc", {"type": "text", "text":
                  "Let me find where the discount is rounded."}, None),
        assistant("a2", "a1", "2026-12-04T10:02:16.000Z", "msg_01cc", {"type": "tool_use", "id": "toolu_01cc",
                  "name": "Bash", "input": {"command": "grep -rn 'round(' src/cart/"}}, "tool_use"),
        {**base, "parentUuid": "a2", "type": "user", "uuid": "u2", "timestamp": "2026-12-04T10:02:17.000Z",
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01cc",
                     "content": "src/cart/total.py:41:    line = round(price * (1 - discount), 2)"}]}},
        assistant("a3", "u2", "2026-12-04T10:02:25.000Z", "msg_02cc", {"type": "text", "text":
                  "Each line is rounded before the sum, so three discounted lines can lose a cent. I changed "
                  "total.py to sum in Decimal and round once at the end; the cart tests pass."}, "end_turn"),
    ]
    with open(folder / (base["sessionId"] + ".jsonl"), "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(record) + "\n" for record in records)


def collected_trace(store) -> None:
    """An OpenAI Agents SDK run as ``dayflow collect`` receives it: GenAI spans (invoke_agent, chat, execute_tool
    with the semantic conventions' attributes and captured content), written by the receiver's own code."""
    from dayflow_tui.otel.collect import Collector
    from dayflow_tui.otel.receive import Span

    start = int(day(4, 11, 20).timestamp() * 1e9)
    second = 10**9
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    text = lambda role, words: json.dumps([{"role": role, "parts": [{"type": "text", "content": words}]}])  # noqa: E731
    root = Span(trace, "00f067aa0ba902b7", None, "invoke_agent Refund desk", start, start + 9 * second,
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Refund desk",
                 "gen_ai.system": "openai"}, service="support-bot")
    chat1 = Span(trace, "00f067aa0ba902b8", root.span_id, "chat gpt-4.1", start + second, start + 3 * second,
                 {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4.1",
                  "gen_ai.response.model": "gpt-4.1-2025-04-14", "gen_ai.usage.input_tokens": 1840,
                  "gen_ai.usage.output_tokens": 96, "gen_ai.response.finish_reasons": ["tool_calls"],
                  "gen_ai.input.messages": text("user", "Order 8841 arrived broken. Can I get a refund?"),
                  "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                      {"type": "tool_call", "id": "call_7Qd", "name": "lookup_order",
                       "arguments": {"order_id": "8841"}}]}])}, service="support-bot")
    tool = Span(trace, "00f067aa0ba902b9", root.span_id, "execute_tool lookup_order", start + 3 * second,
                start + 4 * second, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order",
                                     "gen_ai.tool.call.id": "call_7Qd"}, service="support-bot")
    chat2 = Span(trace, "00f067aa0ba902ba", root.span_id, "chat gpt-4.1", start + 4 * second, start + 8 * second,
                 {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4.1",
                  "gen_ai.usage.input_tokens": 2210, "gen_ai.usage.output_tokens": 142,
                  "gen_ai.response.finish_reasons": ["stop"],
                  "gen_ai.output.messages": text("assistant", "Order 8841 is within the 30-day window: I have "
                                                 "started a full refund of $64.20; you will see it in 3-5 days.")},
                 service="support-bot")
    Collector(store, hold_s=60).take([chat1, tool, chat2, root])


async def snap_imported(store, save: Saver, source: str, name: str, *keys: str) -> None:
    """The one run of ``source`` (claude-code, otel) opened beside Dayflow's own: its transcript, read-only,
    after ``keys``."""
    os.environ["DAYFLOW_FAKE_NOW"] = NOW.isoformat()
    (imported,) = store.list_runs(source=source)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: list_ready(app))
        app.screen.query_one(RunTable).select_run(imported.id)
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: bool(app.screen.query("#steps")) and getattr(app.screen, "run", None) is not None)
        if keys:
            await pilot.press(*keys)
        await pilot.pause(0.6)
        save(app, name)
        await pilot.press("q")


def team_run(store) -> str:
    """The writer's run with its two children, each child on the team's scripted model (a child's driver makes
    its own client: ``request.make_client`` is pointed at the script's model while it runs)."""
    from dayflow_tui.agent import request

    made = request.make_client
    request.make_client = lambda model: TeamModel()
    try:
        with clock_at(day(4, 16, 5)):
            runs.run_brief(store, run_id="team-1204-1605", user_msg="Which CDN is cheapest for 40 TB/month of "
                           "egress, and what is the catch?", model=MODEL, agent=demo_agents.WRITER,
                           agent_ref=f"{AGENTS_FILE}:WRITER", client=TeamModel())
    finally:
        request.make_client = made
    return "team-1204-1605"


async def snap_subagents(tmp: Path, save: Saver) -> None:
    """The writer's transcript at the step whose two calls started its subagents' runs."""
    os.environ["DAYFLOW_FAKE_NOW"] = NOW.isoformat()
    with clock_at(day(4, 16)):
        store = open_store(tmp / "team.db")
    try:
        run_id = team_run(store)
        app = DayflowApp(store)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: list_ready(app))
            screen = await open_run(pilot, run_id)
            await until(pilot, lambda: bool(getattr(screen, "subagents", None)))
            await pilot.pause(0.6)
            save(app, "subagents.svg")
            await pilot.press("q")
    finally:
        store.close()


async def main(out: Path) -> None:
    driver.time = SteadyTimer()
    with tempfile.TemporaryDirectory(prefix="dayflow-shots-") as tmp:
        os.environ["DAYFLOW_STATE_DIR"] = str(Path(tmp) / "state")  # no remembered sort, theme or columns
        with clock_at(day(1, 6)):  # the sample tasks a new database starts with, created then
            store = open_store(Path(tmp) / "dayflow.db")
        lease = build(store)
        from dayflow_tui.claude_code.importer import import_claude_code

        claude_code_session(CLAUDE_PROJECTS)
        import_claude_code(store, CLAUDE_PROJECTS, say=lambda _line: None)
        collected_trace(store)
        try:
            await snap(store, Saver(out))
            # The Claude Code session at step 2 (the reply with its Bash call and the call's result).
            await snap_imported(store, Saver(out), "claude-code", "claude-code.svg", "j")
            await snap_imported(store, Saver(out), "otel", "otel-collect.svg")
            await snap_subagents(Path(tmp), Saver(out))
        finally:
            store.release(lease)
            store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="the folder the SVGs go to (default: this one)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(args.out))
