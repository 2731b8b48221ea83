"""Deciding a waiting run's calls one by one from its transcript (issue #30): space marks, ``a`` approves the
marked (or the one under the cursor), ``A`` approves all after a confirm naming each side effect, ``d``
denies with a reason. Every decision is made once: a double press, or two dashboards pressing at once,
decide a call once (the second is refused), and the run goes on once nothing waits."""

from __future__ import annotations

import asyncio

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.decide import ApproveAllDialog, DenyDialog
from dayflow_tui.tui.widgets.pending_calls import PendingCalls

from ..tui_helpers import open_run, screen_text, settle, wait_for

pytestmark = pytest.mark.anyio
RUN = "run-wait-0001"


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def waiting_db(tmp_path):
    path = str(tmp_path / "wait.db")
    store = open_store(path)
    demo_data.waiting_run(store, RUN, demo_data.BASE_TIME)
    store.close()
    return path


def states(path) -> dict[str, str]:
    store = open_store(path)
    try:
        return {row.tool_use_id: row.state for row in store.approvals(RUN) if row.state != "auto"}
    finally:
        store.close()


def decided_rows(path) -> list:
    store = open_store(path)
    try:
        return [row for row in store.approvals(RUN) if row.decided_at is not None]
    finally:
        store.close()


async def pending_shown(pilot) -> PendingCalls:
    app = pilot.app
    await wait_for(pilot, lambda: bool(app.screen.query(PendingCalls))
                   and len(app.screen.query_one(PendingCalls).calls) == 6)
    return app.screen.query_one(PendingCalls)


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_space_marks_and_a_approves_the_marked_calls_only(waiting_db, size):
    store = open_store(waiting_db)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            await open_run(pilot, RUN)
            calls = await pending_shown(pilot)
            assert calls.has_focus  # the waiting calls are what the reader came for
            ids = [call.tool_use_id for call in calls.calls]
            text = screen_text(app)
            assert "Waiting for your decision: 6 calls" in text and "create_task  idempotent" in text
            await pilot.press("j", "space", "down", "j", "space")  # marks the 2nd and the 4th (j as down, here)
            await pilot.press("a")
            await wait_for(pilot, lambda: list(states(waiting_db).values()).count("approved") == 2)
            await wait_for(pilot, lambda: len(app.screen.query_one(PendingCalls).calls) == 4)
            assert {k for k, v in states(waiting_db).items() if v == "approved"} == {ids[1], ids[3]}
            assert "2 call(s) decided; 4 still wait." in toasts(app)
            # Nothing marked now: a acts on the call under the cursor, one only.
            await pilot.press("a")
            await wait_for(pilot, lambda: list(states(waiting_db).values()).count("approved") == 3)
            await pilot.pause(0.3)
            assert list(states(waiting_db).values()).count("pending") == 3
    finally:
        store.close()


async def test_a_double_press_decides_the_call_once(waiting_db, monkeypatch):
    monkeypatch.setenv("DAYFLOW_TEST_PAUSE_IN", "decide:0.4")  # the decision takes a while: the second press lands
    store = open_store(waiting_db)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot)
            await open_run(pilot, RUN)
            await pending_shown(pilot)
            await pilot.press("a", "a")
            await wait_for(pilot, lambda: "1 call(s) decided; 5 still wait." in toasts(app))
            await wait_for(pilot, lambda: len(app.screen.query_one(PendingCalls).calls) == 5)
            await pilot.pause(0.6)
            assert len(decided_rows(waiting_db)) == 1
            assert list(states(waiting_db).values()).count("pending") == 5
    finally:
        store.close()


async def test_two_dashboards_approving_the_same_call_at_once_decide_it_once(waiting_db, monkeypatch):
    monkeypatch.setenv("DAYFLOW_TEST_PAUSE_IN", "decide:0.5")  # each holds its decision open: they overlap
    first_store, second_store = open_store(waiting_db), open_store(waiting_db)
    first, second = DayflowApp(first_store), DayflowApp(second_store)
    try:
        async with first.run_test(size=(120, 36)) as one, second.run_test(size=(120, 36)) as two:
            for pilot in (one, two):
                await settle(pilot)
                await open_run(pilot, RUN)
                await pending_shown(pilot)
            await asyncio.gather(one.press("a"), two.press("a"))

            def both_answered() -> bool:
                said = toasts(first) + toasts(second)
                return any("decided" in t for t in said) and any("already" in t for t in said)

            await wait_for(one, both_answered)
            rows = decided_rows(waiting_db)
            assert len(rows) == 1 and rows[0].state == "approved"
            assert list(states(waiting_db).values()).count("pending") == 5
    finally:
        first_store.close()
        second_store.close()


async def test_A_names_each_side_effect_and_approves_all_only_when_confirmed(waiting_db):
    store = open_store(waiting_db)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await open_run(pilot, RUN)
            await pending_shown(pilot)
            await pilot.press("A")
            await wait_for(pilot, lambda: isinstance(app.screen, ApproveAllDialog))
            text = screen_text(app)
            assert "Approve all 6 waiting call(s) of run run-wait-0001?" in text
            assert text.count("• create_task (idempotent): title=\"Follow up:") == 6, text
            await pilot.press("enter")  # the focus starts on Cancel: Enter at once approves nothing
            await wait_for(pilot, lambda: not isinstance(app.screen, ApproveAllDialog))
            await pilot.pause(0.3)
            assert set(states(waiting_db).values()) == {"pending"}
            await pilot.press("A")
            await wait_for(pilot, lambda: isinstance(app.screen, ApproveAllDialog))
            await pilot.click("#approve-all-confirm")
            await wait_for(pilot, lambda: set(states(waiting_db).values()) == {"approved"})
            # Nothing waits: the run goes on here and finishes, each task made once.
            await wait_for(pilot, lambda: app.screen.run is not None and app.screen.run.status == "done")
            assert len(decided_rows(waiting_db)) == 6
    finally:
        store.close()
    check = open_store(waiting_db)
    try:
        titles = [task.title for task in check.list_tasks(include_done=True, run_id=RUN)]
        assert len(titles) == 6 == len(set(titles))
    finally:
        check.close()


async def test_d_denies_the_call_under_the_cursor_with_a_reason(waiting_db):
    store = open_store(waiting_db)
    app = DayflowApp(store)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot)
            await open_run(pilot, RUN)
            calls = await pending_shown(pilot)
            last = calls.calls[-1].tool_use_id
            await pilot.press("end", "d")
            await wait_for(pilot, lambda: isinstance(app.screen, DenyDialog))
            await pilot.press(*"done already", "enter")
            await wait_for(pilot, lambda: states(waiting_db)[last] == "denied")
            assert list(states(waiting_db).values()).count("pending") == 5
            [row] = decided_rows(waiting_db)
            assert row.reason == "done already"
    finally:
        store.close()
