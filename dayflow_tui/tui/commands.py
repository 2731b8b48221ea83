"""The command palette's Dayflow actions (ctrl+p)."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from . import formatting


class DayflowCommands(Provider):
    """New run, resume, open, filters, help: the main actions by name."""

    def _commands(self) -> list[tuple[str, str, object]]:
        from .screens.run_list import RunListScreen

        app = self.app
        screen = self.screen
        commands: list[tuple[str, str, object]] = [
            ("New run", "Start a daily brief in the background", app.action_new_run),
            ("Help", "List every key", app.action_help),
        ]
        if hasattr(screen, "action_resume"):
            commands.append(("Resume run", "Resume the selected run where it stopped", screen.action_resume))
        if isinstance(screen, RunListScreen):
            commands.append(("Open run", "Open the highlighted run's transcript", screen.action_open))
            commands.append(("Search runs", "Search by run id or text", screen.action_search))
            commands.append(("Show all runs", "Clear the status filter and search", screen.action_clear_filters))
            for status in formatting.STATUS_ORDER:
                commands.append((f"Show {status} runs", f"Filter the list to {status} runs",
                                 partial(screen.apply_filter, status=status)))
        return commands

    async def discover(self) -> Hits:
        for name, help_text, callback in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
