"""The JSON view (``v`` in a transcript, and ``x``'s next request): pretty, highlighted, folded per payload
from the keyboard, copied to the clipboard, opened in the user's editor (the real dashboard in tmux)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time

import pytest
from textual.app import App, ComposeResult

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.widgets.json_view import FOLD_LINES, JsonView, Payload

from ..reliability_helpers import cli_env
from ..tui_helpers import SIZE, TUI_BIN, open_run, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _drawn(view: JsonView) -> list[str]:
    return [view.line_text(y) for y in range(view.line_count)]


async def _raw_view(pilot, run_id: str) -> JsonView:
    screen = await open_run(pilot, run_id)
    await pilot.press("v")
    view = screen.query_one("#raw", JsonView)
    await wait_for(pilot, lambda: view.payloads != [])
    return view


async def test_raw_json_is_the_stored_json_pretty_printed_block_by_block_and_highlighted(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    stored = store.steps("run-done-0001")[0]
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        view = await _raw_view(pilot, "run-done-0001")
        assert app.focused is view  # v hands the keys to the JSON
        blocks = json.loads(stored.assistant)
        results = json.loads(stored.tool_results)
        assert [p.value for p in view.payloads] == blocks + results  # every block, exactly as stored
        titles = [p.title for p in view.payloads]
        assert titles[1].startswith("assistant · tool_use read_inbox") and "tool_result for read_inbox" in titles[len(blocks)]
        lines = _drawn(view)
        assert '  "type": "tool_use",' in lines or '  "type": "tool_use"' in lines  # indented, one key a line
        # Keys, strings and numbers are drawn in different colours.
        key_line = next(y for y, text in enumerate(lines) if text.strip().startswith('"limit": '))
        await pilot.pause()
        view.scroll_to(y=key_line, animate=False)
        await pilot.pause()
        strip = view.render_line(0)
        colours = {segment.text.strip(): segment.style.color for segment in strip if segment.text.strip()}
        assert colours['"limit"'] != colours["20"] and colours['"limit"'] is not None
        await pilot.press("j")  # j moves to the next step while the JSON has the keys
        await wait_for(pilot, lambda: view.payloads and view.payloads[0].value == json.loads(
            store.steps("run-done-0001")[1].assistant)[0])
        await pilot.press("v")
        assert app.screen.query_one("#detail").display and not app.screen.query_one("#raw-pane").display


async def test_payloads_fold_from_the_keyboard_and_fold_all_carries_to_the_next_step(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        view = await _raw_view(pilot, "run-done-0001")
        full = view.line_count
        first_body = len(view.payloads[0].document().split("\n"))
        await pilot.press("enter")  # the cursor starts on the first payload's header
        assert view.folded == {0} and view.line_count == full - first_body
        assert _drawn(view)[0].startswith("▸ assistant · text") and "folded" in _drawn(view)[0]
        await pilot.press("space")
        assert view.folded == set() and view.line_count == full
        await pilot.press("right_square_bracket", "right_square_bracket")  # to the third payload
        assert view.payload_at_cursor() == 2
        await pilot.press("enter")
        assert view.folded == {2} and view.cursor == first_body + 1 + len(view.payloads[1].document().split("\n")) + 1
        await pilot.press("left_square_bracket")
        assert view.payload_at_cursor() == 1
        await pilot.press("z")
        assert view.line_count == len(view.payloads)  # headers only
        await pilot.press("j")
        await wait_for(pilot, lambda: view.payloads and view.payloads[0].title.startswith("assistant · text (54"))
        assert view.line_count == len(view.payloads)  # still everything folded on the next step
        await pilot.press("z")
        assert view.folded == set() and view.line_count > 3 * len(view.payloads)


async def test_copy_puts_the_payload_under_the_cursor_on_the_clipboard(store):
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    stored = store.steps("run-done-0001")[0]
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        view = await _raw_view(pilot, "run-done-0001")
        await pilot.press("right_square_bracket", "c")
        assert json.loads(app.clipboard) == json.loads(stored.assistant)[1]
        await pilot.press("C")
        copied = app.clipboard
        for block in json.loads(stored.assistant) + json.loads(stored.tool_results):
            assert json.dumps(block, indent=2, ensure_ascii=False) in copied


class _OneView(App):
    def __init__(self, payloads: list[Payload]) -> None:
        super().__init__()
        self.payloads = payloads

    def compose(self) -> ComposeResult:
        yield JsonView()

    def on_mount(self) -> None:
        self.query_one(JsonView).set_payloads(self.payloads, key="one")
        self.query_one(JsonView).focus()


async def test_a_big_payload_starts_folded_and_only_the_rows_on_screen_are_drawn():
    big = {"items": [{"n": i, "subject": f"mail {i}"} for i in range(3000)]}
    small = {"ok": True}
    app = _OneView([Payload("tool_result big", big), Payload("tool_result small", small)])
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(JsonView)
        assert view.folded == {0}  # longer than FOLD_LINES: folded, its size in the header
        assert len(view.payloads[0].document().split("\n")) > FOLD_LINES
        assert "folded" in view.line_text(0) and "lines" in view.line_text(0)
        await pilot.press("enter", "end")
        await pilot.pause()
        assert view.line_count > 10000 and view.cursor == view.line_count - 1
        assert view.scroll_offset.y >= view.line_count - 24  # the cursor is on screen
        assert len(view._cache) <= 3 * 24  # drawn lazily: rows on screen, not the document


async def test_the_end_of_a_long_header_and_of_a_wide_line_can_be_scrolled_to_at_80_columns():
    title = "user · tool_result for create_task (toolu_01XyZaBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789)"
    app = _OneView([Payload(title, {"subject": "会議の議事録を送ってください" * 3})])
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(JsonView)
        view.scroll_to(x=view.max_scroll_x, animate=False)
        await pilot.pause()
        header = "".join(segment.text for segment in view.render_line(0)).rstrip()
        assert header.endswith("0123456789)  (3 lines)"), header  # the id and the size, not cut
        wide = "".join(segment.text for segment in view.render_line(2)).rstrip()
        assert wide.endswith("ください\""), wide  # two columns a character: measured as drawn


async def test_text_that_is_not_json_is_shown_literally_never_as_markup_or_escapes():
    hostile = "[bold]not bold[/] [@click=app.quit]q[/] \x1b]0;title\x07 \x1b[31mred"
    app = _OneView([Payload.from_stored("damaged row", hostile)])
    async with app.run_test(size=(100, 10)) as pilot:
        view = app.query_one(JsonView)
        line = "".join(segment.text for segment in view.render_line(1))
        assert "[bold]not bold[/] [@click=app.quit]q[/]" in line
        assert "\x1b" not in line and "\x07" not in line and "\\x1b]0;title\\x07" in line
        await pilot.press("c")
        assert "\x1b" not in app.clipboard and "[bold]not bold[/]" in app.clipboard
        await pilot.click(JsonView, offset=(2, 1))
        assert app.is_running


async def test_open_in_editor_without_a_terminal_says_so_instead_of_failing(store, monkeypatch):
    monkeypatch.setenv("DAYFLOW_EDITOR", "true")
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    app = DayflowApp(store)
    async with app.run_test(size=SIZE) as pilot:
        await _raw_view(pilot, "run-done-0001")
        await pilot.press("o")
        await pilot.pause()
        messages = [str(n.message) for n in app._notifications]
        assert any("needs the terminal" in m for m in messages), messages
        assert app.is_running


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_o_opens_the_payload_in_the_users_editor_and_the_dashboard_comes_back(tmp_path):
    db = tmp_path / "editor.db"
    store = open_store(str(db))
    demo_data.done_run(store, "run-done-0001", demo_data.BASE_TIME)
    expected = json.loads(store.steps("run-done-0001")[0].assistant)[0]
    store.close()
    seen, mode, editor = tmp_path / "seen.json", tmp_path / "mode", tmp_path / "editor.sh"
    # The "editor": records the file it was given (and that it is read-only), then waits for a key.
    editor.write_text(f'#!/bin/sh\ntest "$1" = --flag-free || exit 3\nshift\ncp "$1" {shlex.quote(str(seen))}.part\n'
                      f'stat -c %a "$1" > {shlex.quote(str(mode))}\n'
                      f'mv {shlex.quote(str(seen))}.part {shlex.quote(str(seen))}\necho EDITOR-OPEN\nread line\n')
    editor.chmod(0o755)
    env = cli_env(DAYFLOW_EDITOR=f"{editor} --flag-free", XDG_STATE_HOME=str(tmp_path / "state"),
                  TERM="xterm-256color", HOME=str(tmp_path))
    env.pop("TMUX", None)
    socket = f"dayflow-editor-{os.getpid()}-{time.monotonic_ns()}"

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", *args], check=True,
                              capture_output=True, text=True, timeout=30).stdout

    def wait_screen(fragment: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            shown = tmux("capture-pane", "-p", "-t", "dash")
            if fragment in shown:
                return shown
            assert time.monotonic() < deadline, f"{fragment!r} never appeared:\n{shown}"
            time.sleep(0.1)

    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    tmux("new-session", "-d", "-s", "dash", "-x", "120", "-y", "36",
         f"exec env -i {assignments} {shlex.quote(str(TUI_BIN))} --db {shlex.quote(str(db))}")
    try:
        wait_screen("run-done-0001")
        tmux("send-keys", "-t", "dash", "Enter")
        wait_screen("Step 1")
        tmux("send-keys", "-t", "dash", "v")
        wait_screen("the JSON stored")
        tmux("send-keys", "-t", "dash", "o")
        wait_screen("EDITOR-OPEN")  # the editor has the terminal
        deadline = time.monotonic() + 30
        while not seen.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        given = seen.read_text()
        assert mode.read_text().strip() == "400"  # a read-only copy: nothing stored is edited from here
        assert json.loads(given) == expected
        tmux("send-keys", "-t", "dash", "Enter")
        wait_screen("the JSON stored")  # the dashboard is back, where it was
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=30)
