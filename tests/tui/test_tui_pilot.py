"""The dashboard driven through Textual's Pilot, against real databases and real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from textual.widgets import OptionList

from dayflow_tui.tui.widgets.json_view import JsonView
from ..tui_helpers import SIZE, TUI_BIN, GateClient, footer_ready, open_run, screen_text, select_loaded, settle, wait_for

from ..conftest import CountingClient, dayflow_cmd
from dayflow_tui.agent.messages import rebuild_messages
from dayflow_tui.agent import request
from dayflow_tui.agent import runs
from dayflow_tui.store import effective_status, open_store, owner_alive
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.search import SearchScreen
from dayflow_tui.tui.screens.transcript import TranscriptScreen
from dayflow_tui.tui.widgets.run_table import RunTable

OFFLINE_STEPS = 3  # the offline model: read, create tasks, write the brief

# Async tests run on anyio's pytest plugin (anyio comes with httpx, the anthropic SDK's transport).
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _table(app) -> RunTable:
    return app.screen.query_one(RunTable)


def _shown_ids(app) -> list[str]:
    table = _table(app)
    return [run.id for run in table.rows]


async def _open(pilot, run_id: str) -> TranscriptScreen:
    return await open_run(pilot, run_id)


async def test_r_resumes_an_interrupted_run_with_exactly_the_remaining_calls(store):
    demo_data.interrupted_run(store, "run-crash-001", demo_data.BASE_TIME, after_step=1)
    assert effective_status(store.get_run("run-crash-001")) == "interrupted"
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(pilot, "run-crash-001")
        assert len(screen.views) == 1
        await pilot.press("r")
        await wait_for(pilot, lambda: not app.is_driving and store.get_run("run-crash-001").status == "done")
        await wait_for(pilot, lambda: len(screen.views) == OFFLINE_STEPS)
        await pilot.pause()
        steps = screen.query_one("#steps", OptionList)
        assert steps.option_count == OFFLINE_STEPS + 1  # and the brief
        assert steps.highlighted == OFFLINE_STEPS  # followed the run to its brief
        text = screen_text(app)
        assert "✔ done" in text and "## Today" not in text  # the brief renders as Markdown
        assert "Daily brief" in text and "Today" in text
    assert client.calls == OFFLINE_STEPS - 1
    run = store.get_run("run-crash-001")
    assert run.step_count == OFFLINE_STEPS and run.owner_pid is None


async def test_r_on_the_run_list_resumes_the_highlighted_run(store):
    demo_data.failed_run(store, "run-failed-01", demo_data.BASE_TIME)
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert _table(app).current.id == "run-failed-01"
        await pilot.press("r")
        await wait_for(pilot, lambda: not app.is_driving and _table(app).current.status == "done")
        assert "✔ done" in screen_text(app)
    assert client.calls == OFFLINE_STEPS - 1  # step 1 was committed before the failure


async def test_r_on_a_budget_stopped_run_grants_the_same_allowance_again(store):
    demo_data.budget_run(store, "run-budget-01", demo_data.BASE_TIME)  # stopped by --max-steps 1
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await wait_for(pilot, lambda: not app.is_driving and store.get_run("run-budget-01").step_count == 2)
        await wait_for(pilot, lambda: any(n.title == "Budget" for n in app._notifications))
    run = store.get_run("run-budget-01")
    # One more step allowed: step 2 is paid, then the step limit stops it again, resumable.
    assert client.calls == 1 and run.step_count == 2 and run.status == "budget" and run.max_steps == 2


async def test_the_mouse_selects_and_opens_runs_and_presses_resume(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    demo_data.interrupted_run(store, "run-crash-001", demo_data.BASE_TIME.replace(hour=9))
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = _table(app)
        assert table.current.id == "run-crash-001"
        await pilot.click(RunTable, offset=(5, 1))
        assert table.current.id == "run-done-0001"
        await pilot.click(RunTable, offset=(5, 0))
        await pilot.click(RunTable, offset=(5, 0), times=2)
        await wait_for(pilot, lambda: isinstance(app.screen, TranscriptScreen) and app.screen.run)
        assert app.screen.run_id == "run-crash-001"
        await pilot.click("#resume-button")
        await wait_for(pilot, lambda: not app.is_driving and store.get_run("run-crash-001").status == "done")
    assert client.calls == OFFLINE_STEPS - 1


async def test_done_run_has_nothing_to_resume(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(pilot, "run-done-0001")
        assert screen.query_one("#resume-button").disabled
        assert screen.check_action("resume", ()) is False  # not offered: the footer leaves it out
        await pilot.press("r")
        await pilot.pause(0.2)
        assert not app.is_driving
        # Pressed anyway, the key says why nothing happens, in the transcript and in the list alike.
        await wait_for(pilot, lambda: any("done: nothing to resume" in str(n.message) for n in app._notifications))
        app.clear_notifications()
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen.query(RunTable))
        await settle(pilot)
        await pilot.press("r")
        await wait_for(pilot, lambda: any("run-done-0001 cannot be resumed: done" in str(n.message)
                                          for n in app._notifications))
    assert client.calls == 0


async def test_model_error_is_a_notification_and_the_run_stays_resumable(store):
    demo_data.interrupted_run(store, "run-crash-001", demo_data.BASE_TIME, after_step=1)
    failing = CountingClient(fail_on={1: ConnectionError("connection reset by peer")})
    app = DayflowApp(store, client_factory=lambda model: failing)
    async with app.run_test(size=SIZE) as pilot:
        await _open(pilot, "run-crash-001")
        await pilot.press("r")
        await wait_for(pilot, lambda: not app.is_driving and store.get_run("run-crash-001").status == "failed")
        await wait_for(pilot, lambda: any("Run failed" == n.title for n in app._notifications))
        await wait_for(pilot, lambda: not app.screen.query_one("#resume-button").disabled)
        # Resume again: the next call succeeds, and the committed step 1 is not paid again.
        await pilot.press("r")
        await wait_for(pilot, lambda: not app.is_driving and store.get_run("run-crash-001").status == "done")
    assert failing.calls == 1 + (OFFLINE_STEPS - 1)


async def test_new_run_with_n_arrives_step_by_step(store):
    client = CountingClient()
    app = DayflowApp(store, client_factory=lambda model: client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "press n" in screen_text(app).lower() or "Press n" in screen_text(app)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, TranscriptScreen))
        screen = app.screen
        await wait_for(pilot, lambda: not app.is_driving and len(screen.views) == OFFLINE_STEPS)
        await wait_for(pilot, lambda: screen.run.status == "done")
    assert client.calls == OFFLINE_STEPS
    assert [r.status for r in store.list_runs()] == ["done"]


async def test_quitting_while_a_run_is_driven_leaves_it_resumable(store):
    demo_data.interrupted_run(store, "run-crash-001", demo_data.BASE_TIME, after_step=1)
    gate = GateClient(free=0)  # step 2's model call is in flight when q is pressed
    app = DayflowApp(store, client_factory=lambda model: gate)
    gate.app = app
    async with app.run_test(size=SIZE) as pilot:
        await _open(pilot, "run-crash-001")
        await pilot.press("r")
        await wait_for(pilot, lambda: gate.waiting.is_set())
        await pilot.press("q")
    # The call in flight returns, step 2 commits with its tool results, the loop sees the
    # cancel before paying for step 3 and releases the lease.
    _wait_db(lambda: store.get_run("run-crash-001").owner_pid is None)
    run = store.get_run("run-crash-001")
    assert gate.calls == 1 and run.step_count == 2
    assert run.status == "running" and effective_status(run) == "interrupted"
    rebuild_messages(store, run.id)  # consistent: every tool_use has its results
    counting = CountingClient()
    result = runs.resume(run.id, store=store, client=counting)
    assert result.status == "done" and counting.calls == OFFLINE_STEPS - 2


def _wait_db(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


async def test_run_from_another_process_shows_up_without_input(db_target, store):
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert _table(app).total == 0
        env = dict(os.environ, DAYFLOW_OFFLINE_DELAY="0.4")
        proc = subprocess.Popen(dayflow_cmd("brief", "--db", str(db_target)), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            await wait_for(pilot, lambda: _table(app).total == 1)
            run_id = _table(app).row(0).id
            # Counts move while it runs, then it ends: all without a key pressed.
            await wait_for(pilot, lambda: 0 < _table(app).row(0).step_count)
            await wait_for(pilot, lambda: _table(app).row(0).status == "done", timeout=60)
            assert _table(app).row(0).step_count == OFFLINE_STEPS
            assert run_id in screen_text(app) and "✔ done" in screen_text(app)
        finally:
            proc.wait(timeout=60)
        assert proc.returncode == 0


async def test_an_old_run_changed_elsewhere_is_not_counted_as_new(db_target, store):
    demo_data.interrupted_run(store, "run-old-0001", demo_data.BASE_TIME.replace(year=2025))
    demo_data.many_runs(store, 450)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = _table(app)
        assert table.total == 451 and "run-old-0001" not in [r.id for r in table.rows]  # beyond the window
        done = subprocess.run(dayflow_cmd("resume", "run-old-0001", "--db", str(db_target)),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        await wait_for(pilot, lambda: table.window.marker == store.change_marker())  # the tick has seen it
        assert table.total == 451
        await pilot.press("end")
        await wait_for(pilot, lambda: table.current is not None)  # its page is read off the UI thread
        assert table.current.id == "run-old-0001" and table.current.status == "done"


async def test_run_held_by_another_process_cannot_be_resumed_until_it_dies(db_target, store):
    env = dict(os.environ, DAYFLOW_OFFLINE_DELAY="4")  # slow enough to look at it while it is held
    proc = subprocess.Popen(dayflow_cmd("brief", "--db", str(db_target)), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_db(lambda: store.list_runs() and store.list_runs()[0].step_count >= 1)
        run_id = store.list_runs()[0].id
        client = CountingClient()
        app = DayflowApp(store, client_factory=lambda model: client)
        async with app.run_test(size=SIZE) as pilot:
            screen = await _open(pilot, run_id)
            button = screen.query_one("#resume-button")
            assert button.disabled
            assert f"pid {proc.pid}" in str(button.tooltip)
            assert f"pid {proc.pid}" in screen_text(app)
            await pilot.press("r")
            await pilot.pause(0.2)
            assert not app.is_driving and client.calls == 0
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            # No commit happens when a process is killed: the dashboard notices the dead owner by itself.
            await wait_for(pilot, lambda: not button.disabled, timeout=90)  # generous: loaded CI machines
            committed = store.get_run(run_id).step_count
            await pilot.press("r")
            await wait_for(pilot, lambda: not app.is_driving and store.get_run(run_id).status == "done",
                           timeout=90)
        assert client.calls == OFFLINE_STEPS - committed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_markup_and_escape_codes_render_literally(store):
    demo_data.hostile_run(store, "run-hostile-1", demo_data.BASE_TIME)
    app = DayflowApp(store)
    async with app.run_test(size=(250, 50)) as pilot:  # wide: the task column beside the preview pane
        await settle(pilot)
        listed = screen_text(app)
        # The run's title, made from its task and its answer, both as text (views.titles).
        assert "Summarise: [bold]not bo… → Today: [bold]not bold[/] [link=https://evil.example]" in listed
        screen = await _open(pilot, "run-hostile-1")
        await pilot.press("e")
        await pilot.pause(0.3)
        shown = screen_text(app)
        assert "Summarise: [bold]not bold[/] [link=https://evil.example]click[/link] \\x1b[31mred?" in shown
        assert "Reading mail titled [bold]not bold[/] [link=https://evil.example]click[/link]" in shown
        assert "\\x1b]8;;https://evil.example\\x07osc link" in shown
        assert "\\x1b]0;retitled\\x07 [/] [@click=app.quit]q[/]" in shown
        assert '"from": "[link=x]boss[/link] <boss@example.com>"' in shown
        assert "error invalid_input" in shown
        assert "\x1b" not in shown and "\x07" not in shown
        await pilot.press("G")
        await pilot.pause(0.3)
        brief = screen_text(app)
        assert "Check the [bold] mail." in brief
        await pilot.press("g", "v")
        await pilot.pause(0.2)
        raw = screen.query_one("#raw", JsonView)
        stored = store.steps("run-hostile-1")[0]
        shown = [payload.value for payload in raw.payloads if payload.title.startswith("assistant")]
        assert shown == json.loads(stored.assistant)  # the stored JSON, block by block
        drawn = "\n".join(raw.line_text(y) for y in range(raw.line_count))
        assert "\x1b" not in drawn and "\\u001b" in drawn  # ESC stays an escape, as json.dumps wrote it
        assert app.is_running  # [@click=app.quit] did nothing


async def test_next_request_shows_exactly_what_the_loop_would_send(store):
    demo_data.interrupted_run(store, "run-crash-001", demo_data.BASE_TIME, after_step=2)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(pilot, "run-crash-001")
        await pilot.press("x")
        await pilot.pause(0.2)
        preview = request.next_request_preview(store, "run-crash-001")
        assert [payload.value for payload in screen.query_one("#request", JsonView).payloads] == preview.messages
        title = str(screen.query_one("#request-title").render())
        assert f"{len(preview.messages)} messages" in title and f"~{preview.est_before:,} tokens" in title
        await pilot.press("x")
        assert screen.query_one("#detail").display


async def test_step_navigation(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open(pilot, "run-done-0001")
        steps = screen.query_one("#steps", OptionList)
        assert steps.highlighted == 0
        await pilot.press("j", "j")
        assert steps.highlighted == 2
        await pilot.press("k")
        assert steps.highlighted == 1
        await pilot.press("G")
        assert steps.highlighted == OFFLINE_STEPS  # the brief
        await pilot.press("g")
        assert steps.highlighted == 0
        assert "Step 1" in screen_text(app)
        assert list(screen.query_one("#token-chart").data) == [v.input_tokens + v.output_tokens
                                                               for v in screen.views]
        await pilot.press("escape")
        assert not isinstance(app.screen, TranscriptScreen)


async def test_run_list_pages_by_keyset_and_filters(store):
    demo_data.many_runs(store, 450)
    demo_data.failed_run(store, "run-failed-01", demo_data.BASE_TIME.replace(year=2027))
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = _table(app)
        assert table.total == 451
        assert len(table.rows) < table.total  # only a window is loaded
        await pilot.press("end")
        assert table.cursor == 450 and len(table.rows) == 451
        ids = [run.id for run in table.rows]
        assert len(set(ids)) == 451 and ids[0] == "run-failed-01" and ids[-1] == "bulk-0000000"
        await pilot.press("f", "f", "f", "f")  # all -> done -> running -> interrupted -> failed
        assert table.filter.status == "failed" and table.total == 1
        await pilot.press("escape")
        assert table.total == 451
        await pilot.press("slash")  # the search (tests/tui/test_search_tui.py): words, not a substring
        await pilot.press(*"bulk run 44")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen) and app.screen.results)
        assert [run.run_id for run in app.screen.results] == ["bulk-0000044"]
        await pilot.press("escape")
        assert _table(app) is table and table.total == 451


def test_bad_database_is_one_line_and_nonzero_exit(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    done = subprocess.run([str(TUI_BIN), "--db", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dayflow-tui: error: ") and "Traceback" not in done.stderr
    assert "not a readable Dayflow database" in lines[0]
    assert bad.read_bytes() == b"this is not sqlite" * 100


@pytest.mark.postgres
async def test_a_dropped_postgres_session_heals_without_a_toast_and_the_view_catches_up(pg_url):
    import psycopg

    from ..conftest import PG_URL
    from ..faults.test_faults import _cut_sessions, _pg_url_with_app

    def _sessions(name: str) -> int:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                 (name,)).fetchone()[0]

    url, app_name = _pg_url_with_app(pg_url)
    dash_store = open_store(url)
    app = DayflowApp(dash_store)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: _table(app).total == 0 or True)
            await pilot.pause(0.6)  # at least one poll on the first session
            for _ in range(3):  # cut the dashboard's session three times; each time it must come back
                await wait_for(pilot, lambda: _sessions(app_name) >= 1)
                assert _cut_sessions(app_name) >= 1
            # Another process queues a run after the cuts: the view must catch up with it.
            queued = subprocess.run(dayflow_cmd("brief", "--queue", "--db", pg_url), capture_output=True,
                                    text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert queued.returncode == 0, queued.stderr
            new_id = queued.stdout.strip().split()[-1]
            await wait_for(pilot, lambda: new_id in _shown_ids(app))
            assert not app._notifications, [n.message for n in app._notifications]
            assert "reconnecting" not in app.sub_title
    finally:
        dash_store.close()


async def test_the_palette_has_one_help_and_a_screenshot_that_says_where_it_went(tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "shots.db"))
    demo_data.every_status(store)
    monkeypatch.chdir(tmp_path)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "Keys" not in titles  # ? Help lists every key; two help commands confused people
        assert titles.count("Screenshot") == 1
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: app.screen.query("CommandInput"))
        for ch in "screenshot":
            await pilot.press(ch)
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: list(tmp_path.glob("dayflow_*.svg")))
        [saved] = tmp_path.glob("dayflow_*.svg")
        svg = saved.read_text(encoding="utf-8")
        assert svg.startswith("<svg") and "run-done-0001" in svg.replace("&#160;", " ")
        await wait_for(pilot, lambda: any(str(saved) in str(n.message) for n in app._notifications))


async def test_a_screenshot_that_cannot_be_written_is_one_notification(tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "shots.db"))
    demo_data.every_status(store)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()  # the working directory no longer exists (even root cannot write there)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.action_save_screenshot()
            await pilot.pause()
            messages = [str(n.message) for n in app._notifications]
            assert any(m.startswith("The screenshot could not be saved") for m in messages), messages
            assert app.is_running
    finally:
        store.close()


async def test_at_80x24_the_reason_a_run_stopped_and_every_footer_fit(tmp_path):
    """The preview pane folds below 100 columns: the stopped run's whole error shows under the list instead,
    and each screen's footer fits its line (no key cut in half), the transcript's included."""
    from dayflow_tui.tui.widgets.fitting_footer import FittingFooter, key_width

    store = open_store(str(tmp_path / "small.db"))
    demo_data.every_status(store)
    failed = store.get_run("run-failed-01")
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await select_loaded(pilot, "run-failed-01")
            await wait_for(pilot, lambda: "try again later" in screen_text(app))
            text = screen_text(app)
            joined = " ".join(line.strip() for line in text.splitlines())
            assert failed.error[:60] in joined  # far more than the 16-column task cell holds
            assert "overloaded" in text

            def footer_fits() -> bool:
                footer = app.screen.query_one(FittingFooter)
                keys = list(footer.query("FooterKey"))
                drawn = sum(key_width(k, footer.compact) for k in keys)
                return bool(keys) and drawn <= 80

            await wait_for(pilot, footer_fits)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, TranscriptScreen) and app.screen.run)
            await wait_for(pilot, lambda: footer_ready(app) and footer_fits())
            last = screen_text(app).rstrip("\n").splitlines()[-1]
            assert "Resume" in last and "^p palette" in last  # the screen's own keys stay, whole
            await pilot.resize_terminal(160, 50)
            await wait_for(pilot, lambda: "New run" in screen_text(app).splitlines()[-1])
    finally:
        store.close()


async def test_e_unfolds_payloads_without_moving_what_is_being_read(tmp_path):
    from dayflow_tui.tui.widgets.step_detail import StepDetail, ToolCallView

    store = open_store(str(tmp_path / "fold.db"))
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(100, 18)) as pilot:  # short: even folded, the step is taller than the view
            await settle(pilot)
            screen = await open_run(pilot, "run-done-0001")
            await wait_for(pilot, lambda: len(screen.query(ToolCallView)) >= 3)
            await settle(pilot)
            detail = screen.query_one(StepDetail)

            def third_call_y() -> int:  # the call being read (queried afresh: a redraw may rebuild the step)
                return list(screen.query(ToolCallView))[2].virtual_region.y

            await pilot.press("e")  # unfold: the two payloads above the third call are long
            await wait_for(pilot, lambda: third_call_y() > 100)
            await pilot.pause(0.2)
            target = third_call_y() - 1
            detail.scroll_to(y=target, animate=False)
            await wait_for(pilot, lambda: detail.scroll_y == target)
            before = third_call_y() - detail.scroll_y
            for _ in range(2):  # fold (what is above shrinks by a hundred lines), then unfold again
                await pilot.press("e")
                await pilot.pause(0.2)
                await wait_for(pilot, lambda: third_call_y() - detail.scroll_y == before, timeout=10)
            assert detail.scroll_y > 0
    finally:
        store.close()
