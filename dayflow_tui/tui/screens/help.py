"""``?``: every key, read from ``bindings.SECTIONS`` so the list cannot drift from the code."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from .. import bindings
from ..widgets.fitting_footer import FittingFooter


def _keys(binding) -> str:
    if binding.key_display and "," not in binding.key:
        return binding.key_display
    names = {"question_mark": "?", "slash": "/", "escape": "esc", "pageup": "PgUp", "pagedown": "PgDn",
             "ctrl+p": "ctrl+p", "backspace": "⌫", "enter": "enter", "home": "Home", "end": "End",
             "up": "↑", "down": "↓"}
    return " ".join(names.get(key.strip(), key.strip()) for key in binding.key.split(","))


def help_table() -> Table:
    table = Table(show_header=False, box=None, padding=(0, 2), expand=True)
    table.add_column("key", style="bold", no_wrap=True, width=14)
    table.add_column("what")
    for section, section_bindings in bindings.SECTIONS:
        table.add_row(Text(section, style="bold underline"), "")
        for binding in section_bindings:
            table.add_row(Text(_keys(binding)), Text(binding.tooltip or binding.description))
        table.add_row("", "")
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = bindings.HELP

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(Text("Dayflow keys", style="bold"), id="help-title")
            yield Static(help_table(), id="help-keys")
            yield Static(Text("The mouse works too: click a run, click again to open it; click a payload to "
                              "unfold it. Esc or ? closes this screen."), id="help-footer")
        yield FittingFooter()  # the keys of this dialog, where the screen's were
