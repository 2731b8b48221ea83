"""Colour that reads in every built-in theme, measured on what is drawn; and the theme and filter remembered.

The contrast test renders the real dashboard (run list and transcript) in
each of Textual's built-in themes and computes the WCAG contrast of every
drawn glyph against the background it is drawn on, so a widget that
hard-codes a colour, or resolves a theme colour against the wrong
background, fails here. Bounds (WCAG 2.1): normal text 4.5:1; muted text,
status colours and the header 3:1 (the "large or non-text" bound, which is
what muted means); muted strictly below normal, so muted stays muted.
Exempt: box and block drawing glyphs (rules, scrollbars, sparklines) and
disabled footer keys (WCAG exempts inactive controls).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from textual.theme import BUILTIN_THEMES

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data, ui_state
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.transcript import TranscriptScreen
from dayflow_tui.tui.widgets.run_table import RunTable

from ..tui_helpers import TUI_BIN, screen_text, select_loaded, settle, wait_for

pytestmark = pytest.mark.anyio

# ANSI themes draw with the terminal's own palette (no colour values to measure).
MEASURED_THEMES = sorted(name for name in DayflowApp.known_themes() if not name.startswith("ansi"))
NORMAL, MUTED = 4.5, 3.0


@pytest.fixture
def anyio_backend():
    return "asyncio"


def luminance(rgb) -> float:
    def channel(value: int) -> float:
        v = value / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = rgb
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(fg, bg) -> float:
    light, dark = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def drawn(app) -> list[tuple[int, str, float]]:
    """(row, text, contrast) of every drawn run of glyphs on the screen, as the terminal gets them."""
    found = []
    for y, strip in enumerate(app.screen._compositor.render_strips()):
        for segment in strip:
            text = segment.text.strip()
            if not text or all(0x2500 <= ord(ch) <= 0x259F or ch == " " for ch in text):
                continue
            style = segment.style
            assert style is not None and style.color is not None and style.bgcolor is not None, (y, text)
            found.append((y, text, contrast(style.color.get_truecolor(), style.bgcolor.get_truecolor())))
    return found


def header_in_256_colours(app) -> list[tuple[str, float]]:
    """(text, contrast) of the header's parts as a 256-colour terminal (tmux's default) shows them."""
    from rich.color import ColorSystem

    def downgraded(colour):
        return colour.downgrade(ColorSystem.EIGHT_BIT).get_truecolor()

    return [(segment.text.strip(), contrast(downgraded(segment.style.color), downgraded(segment.style.bgcolor)))
            for segment in app.screen._compositor.render_strips()[0] if segment.text.strip()]


def disabled_footer_text(app) -> set[str]:
    return {part for key in app.screen.query("FooterKey") if key.disabled
            for part in (key.key_display, key.description)}


def worst(found, exempt=()) -> tuple[float, str]:
    return min(((c, f"row {y}: {t!r}") for y, t, c in found if t not in exempt), default=(99.0, ""))


def row_of(app, needle: str) -> int:
    lines = screen_text(app).splitlines()
    return next(i for i, line in enumerate(lines) if needle in line)


def part(found, row: int, text: str) -> float:
    return next(c for y, t, c in found if y == row and text in t)


async def test_every_builtin_theme_reads_on_the_run_list_and_the_transcript(tmp_path):
    from dayflow_tui.store.tables.forks import ForkPlan

    store = open_store(str(tmp_path / "themes.db"))
    lease = demo_data.every_status(store)
    # A count of every status in the header (waiting and forked too: their colours measured 2.8:1 in light themes).
    demo_data.waiting_run(store, "run-wait-0001", demo_data.BASE_TIME)
    store.fork_run("run-done-0001", ForkPlan(at=1), run_id="run-fork-0001")
    app = DayflowApp(store)
    failures = []
    try:
        async with app.run_test(size=(200, 34)) as pilot:
            await settle(pilot)
            await select_loaded(pilot, "run-queued-01")
            await pilot.pause(0.2)
            for theme in MEASURED_THEMES:
                app.theme = theme
                await pilot.pause(0.1)
                await wait_for(pilot, lambda: app.current_theme.name == theme)
                await pilot.pause(0.1)
                found = drawn(app)
                exempt = disabled_footer_text(app)
                done_row = row_of(app, "run-done-0001  ")
                normal = part(found, done_row, "run-done-0001")
                muted = part(found, done_row, "12-02 ")  # the "started" column
                cursor = part(found, row_of(app, "run-queued-01  "), "run-queued-01")
                header = min(c for y, _t, c in found if y == 0)
                for text, value in header_in_256_colours(app):  # issue #30: 2.8:1 in tmux, two light themes
                    if value < MUTED:
                        failures.append(f"{theme}: header {text!r} at {value:.2f}:1 in 256 colours")
                counted = " ".join(t for y, t, _c in found if y == 0)
                for word in ("waiting", "interrupted", "failed", "budget", "queued", "done", "forked"):
                    if word not in counted:
                        failures.append(f"{theme}: the header does not count {word}: {counted!r}")
                statuses = {word: part(found, row_of(app, row_id), word) for row_id, word in (
                    ("run-done-0001  ", "✔ done"), ("run-failed-01  ", "✖ failed"),
                    ("run-budget-01  ", "◼ budget"), ("run-crash-001  ", "⚠ interrupted"))}
                checks = [("normal text", normal, NORMAL), ("cursor row", cursor, NORMAL),
                          ("muted text", muted, MUTED), ("header", header, MUTED),
                          *((f"status {word}", c, MUTED) for word, c in statuses.items()),
                          ("anything drawn on the run list", *worst(found, exempt)[:1], MUTED)]
                for role, value, bound in checks:
                    if value < bound:
                        failures.append(f"{theme}: {role} {value:.2f}:1 < {bound}:1")
                if not muted < normal:
                    failures.append(f"{theme}: muted ({muted:.2f}:1) is not below normal ({normal:.2f}:1)")
                value, where = worst(found, exempt)
                if value < MUTED:
                    failures.append(f"{theme}: {where} at {value:.2f}:1")
            # The transcript of a failed run: facts, tool calls, the error, the step list, the Resume button.
            await select_loaded(pilot, "run-failed-01")
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, TranscriptScreen) and app.screen.run)
            await settle(pilot)
            for theme in MEASURED_THEMES:
                app.theme = theme
                await pilot.pause(0.1)
                await wait_for(pilot, lambda: app.current_theme.name == theme)
                await pilot.pause(0.1)
                value, where = worst(drawn(app), disabled_footer_text(app))
                if value < MUTED:
                    failures.append(f"{theme} transcript: {where} at {value:.2f}:1")
    finally:
        store.release(lease)
        store.close()
    assert not failures, "\n".join(failures)


async def test_the_theme_and_the_status_filter_are_remembered(tmp_path):
    store = open_store(str(tmp_path / "remember.db"))
    demo_data.every_status(store)
    try:
        first = DayflowApp(store)
        async with first.run_test(size=(120, 36)) as pilot:
            await settle(pilot)
            first.theme = "nord"
            await pilot.press("f", "f", "f", "f")  # all -> done -> running -> interrupted -> failed
            await settle(pilot)
            assert first.screen.run_filter.status == "failed"
            await wait_for(pilot, lambda: ui_state.state_path().exists()
                           and json.loads(ui_state.state_path().read_text())["theme"] == "nord")
        saved = json.loads(ui_state.state_path().read_text())
        assert saved == {"theme": "nord", "status_filter": "failed", "sort": "started", "ascending": False,
                         "hidden_columns": None}

        second = DayflowApp(store)
        async with second.run_test(size=(120, 36)) as pilot:
            await settle(pilot)
            assert second.theme == "nord"
            assert second.screen.run_filter.status == "failed"
            table = second.screen.query_one(RunTable)
            assert [table.row(i).id for i in range(table.total)] == ["run-failed-01"]
            assert "status: failed" in screen_text(second)
    finally:
        store.close()


async def test_a_damaged_state_file_opens_with_the_defaults_and_a_warning(tmp_path):
    store = open_store(str(tmp_path / "damaged.db"))
    demo_data.every_status(store)
    path = ui_state.state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"theme": "nord", "status_filter": ', encoding="utf-8")  # cut short
    try:
        app = DayflowApp(store)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot)
            assert app.theme == "textual-dark"
            assert app.screen.run_filter.status is None
            assert any("damaged" in str(n.message) for n in app._notifications)
            # Left as it was until the next choice is saved.
            assert path.read_text(encoding="utf-8") == '{"theme": "nord", "status_filter": '
            app.theme = "gruvbox"
            await wait_for(pilot, lambda: read_json(path) == {"theme": "gruvbox", "status_filter": None, "sort": None,
                                                              "ascending": False, "hidden_columns": None})
    finally:
        store.close()


def read_json(path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None


def test_an_unknown_theme_setting_is_one_line_and_exit_2(tmp_path):
    env_run = subprocess.run([str(TUI_BIN), "--db", str(tmp_path / "t.db")], capture_output=True, text=True,
                             timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                              "DAYFLOW_THEME": "no-such-theme\x1b[31m",
                                              "XDG_STATE_HOME": str(tmp_path / "state")})
    assert env_run.returncode == 2
    lines = env_run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dayflow-tui: error: theme 'no-such-theme")
    assert "\x1b" not in env_run.stderr and "nord" in lines[0]
    assert "Traceback" not in env_run.stderr
