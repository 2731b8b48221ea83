"""The transcript shows a reply as it streams in (issue #26): text as it is written, thinking folded, a tool
call's arguments forming; drawn from messages the drive worker posts, and gone when the step is committed."""

from __future__ import annotations

import threading

import pytest

from dayflow_tui.agent.offline import OfflineClient
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.forming import FormingBlock, FormingReply

from ..tui_helpers import SIZE, open_run, wait_for

pytestmark = pytest.mark.anyio

HOSTILE = "[bold red]not markup[/] \x1b[31mred\x1b[0m"


@pytest.fixture
def anyio_backend():
    return "asyncio"


class SlowStreams:
    """The offline model streaming slowly; the test reads the screen while a reply is half-way."""

    def __init__(self) -> None:
        self._offline = OfflineClient(delay=6.0)  # half before the first event, half spread over the events
        self.calls = 0
        self.messages = self
        self.midway = threading.Event()

    def create(self, **request):
        self.calls += 1
        for number, event in enumerate(self._offline.messages.create(**request)):
            if number == 8:
                self.midway.set()
            yield event


async def test_the_live_line_shows_the_reply_arriving_then_the_committed_step_replaces_it(store):
    demo_data.interrupted_run(store, "run-crash-001", demo_data.BASE_TIME, after_step=1)
    client = SlowStreams()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_run(pilot, "run-crash-001")
        await pilot.press("r")
        await wait_for(pilot, lambda: "arriving" in str(screen.query_one("#live").render()), timeout=30)
        shown = str(screen.query_one("#live").render())
        assert "step 2 arriving" in shown
        forming = app.forming["run-crash-001"]
        assert forming.n == 2 and forming.blocks  # what the worker posted, drawn from the message
        await wait_for(pilot, lambda: not app.is_driving, timeout=60)
        # The drive's last messages (its final commit, RunFinished) may still be in the queue when the worker
        # has ended: the live entry is gone once they are handled, and a late piece never brings it back.
        await wait_for(pilot, lambda: "run-crash-001" not in app.forming and app.driving is None, timeout=10)
        assert store.get_run("run-crash-001").status == "done"
        live = screen.query_one("#live")
        await wait_for(pilot, lambda: not live.display or "arriving" not in str(live.render()))


def test_forming_lines_are_plain_text_the_newest_end_shown_and_thinking_folded():
    reply = FormingReply("r", 3, (FormingBlock("thinking", "", "secret chain of thought", 23),
                                  FormingBlock("text", "", "first line\n" + HOSTILE, 40),
                                  FormingBlock("tool_use", "create_task", '{"idempotency_key": "mail-1", "title": "Reply to D', 50)))
    lines = reply.lines(width=40, most=4)
    assert lines[0] == "thinking… (23 characters, folded)"
    assert "secret" not in " ".join(lines)
    assert "\x1b" not in " ".join(lines) and "\\x1b" in lines[2]  # controls shown as escapes
    assert lines[-1].startswith("⚙ create_task …") and lines[-1].endswith("Reply to D")  # name kept, newest end
    assert all(len(line) <= 40 for line in lines)
