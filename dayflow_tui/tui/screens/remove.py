"""``X`` on the run list: remove the highlighted run, or archive it first, by ``dayflow prune --archive``'s rules.

The same rules as the command (``store.retention``): only a done, failed or budget-stopped run is
removed; a run that changed after the confirm was shown (resumed, decided, forked on) is kept; its
tasks stay (the person's); an archive is written whole before anything is deleted, and never over
an existing file (``store.transfer.new_file``). The confirm names the run; the work is a thread worker.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from ...redaction import redacted_line
from ...safe_text import one_line, printable
from ...store import effective_status
from ...store.retention import PRUNABLE
from ..widgets.fitting_footer import FittingFooter

REMOVABLE = tuple(status.value for status in PRUNABLE)


def removal_blocker(run) -> str | None:
    """Why ``run`` cannot be removed from here (prune's rules), or None."""
    status = effective_status(run)
    if status in REMOVABLE:
        return None
    why = {"running": "it is running", "interrupted": "it is interrupted (resume it, or let it finish)",
           "queued": "it is queued for a worker", "waiting": "it waits for a decision on a tool call"}
    return f"{why.get(status, f'it is {status}')}; only done, failed and budget-stopped runs are removed"


def default_archive(run_id: str) -> str:
    return str(Path.cwd() / f"dayflow-archive-{''.join(c for c in run_id if c.isalnum() or c in '-_')[:40]}.jsonl")


class Removed(Message):
    """The removal worker's answer: the run removed (and archived where), kept (changed), or an error."""

    def __init__(self, run_id: str, removed: bool, archive: str | None, error: str | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.removed = removed
        self.archive = archive
        self.error = error


class RemoveDialog(ModalScreen["tuple[str, str | None] | None"]):
    """Dismissed with ("remove", None), ("archive", path) or None (cancelled)."""

    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, run, title: str) -> None:
        super().__init__(classes="resume-dialog")
        self.run = run
        self.title_text = title

    def compose(self) -> ComposeResult:
        run = self.run
        with Vertical(id="resume-box"):
            yield Static(Content.styled(f"Remove run {printable(run.id)}?", "bold"))
            yield Static(Content.assemble((one_line(self.title_text, 70), "bold"), "\n",
                                          f"{effective_status(run)}  ·  {run.step_count} step(s)  ·  last change "
                                          f"{printable(run.updated_at[:19])}"))
            yield Static(Content("Its steps and resumes go; the tasks it made stay. An archive (the file "
                                 "`dayflow import` reads) is written first if you choose it:"))
            yield Input(default_archive(run.id), id="archive-path")
            yield Static(id="remove-problem")
            with Horizontal(id="resume-buttons"):
                yield Button("Archive, then remove", id="remove-archive", variant="primary")
                yield Button("Remove", id="remove-confirm", variant="error")
                yield Button("Cancel", id="remove-cancel")
        yield FittingFooter()  # the keys of this dialog, where the screen's were

    def on_mount(self) -> None:
        self.query_one("#remove-cancel", Button).focus()  # Enter at once removes nothing

    @on(Button.Pressed, "#remove-archive")
    @on(Input.Submitted, "#archive-path")
    def _archive(self) -> None:
        path = self.query_one("#archive-path", Input).value.strip()
        if not path:
            self.query_one("#remove-problem", Static).update(Content.styled("Name the archive file.", "bold"))
            return
        self.dismiss(("archive", path))

    @on(Button.Pressed, "#remove-confirm")
    def _remove(self) -> None:
        self.dismiss(("remove", None))

    @on(Button.Pressed, "#remove-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


def remove_in_worker(app: App, run_id: str, archive: str | None, reply_to) -> None:
    """Archive (when asked), then remove ``run_id`` if it is still as it was: prune's own functions, on a
    worker thread; ``Removed``, posted to ``reply_to`` (the run list), says how it went."""

    def work() -> None:
        from ...store.retention import prunable_runs, prune
        from ...store.transfer import new_file, write_jsonl

        store = app.store
        try:
            candidates = prunable_runs(store, older_than=timedelta(0), statuses=PRUNABLE, run_ids=[run_id])
            if not candidates:
                raise ValueError(removal_blocker(store.get_run(run_id)) or "it changed just now; look again")
            if archive:
                with new_file(archive, "the dashboard's archive") as out:
                    write_jsonl(store, [run_id], out)
            report = prune(store, candidates)
            removed = any(c.id == run_id for c in report.removed)
            reply_to.post_message(Removed(run_id, removed, archive if removed else None, None if removed else
                                     "it changed after it was chosen (resumed?): kept"))
        except Exception as exc:  # refused by the rules, an archive that exists, the database: one line
            reply_to.post_message(Removed(run_id, False, None, redacted_line(exc, 200)))
        finally:
            store.close_thread_connection()

    app.run_worker(work, thread=True, exit_on_error=False, group="remove")
