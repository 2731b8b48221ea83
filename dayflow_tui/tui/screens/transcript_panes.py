"""The transcript's JSON panes: a step's stored JSON (raw) and the next request, each in a ``JsonView``.

A part of ``TranscriptScreen`` (a mixin: it reads the screen's ``views`` and
selection). The payloads are built by ``views.json_rows``; the next request
is built on the reader thread.
"""

from __future__ import annotations

from textual import on
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import OptionList, Static

from ...agent.request import next_request_preview
from ...safe_text import one_line, printable
from ...views.json_rows import request_payloads, step_payloads
from ..editor import open_in_editor
from ..widgets.json_view import JsonView
from ..widgets.step_detail import StepDetail


class RequestBuilt(Message):
    def __init__(self, run_id: str, preview, error: BaseException | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.preview = preview
        self.error = error


class StepPanes(Screen):
    """The detail, raw and request panes; a ``Screen`` so Textual registers the handlers here."""

    def _set_mode(self, mode: str) -> None:
        self.mode = mode
        for name, pane in (("detail", "#detail"), ("raw", "#raw-pane"), ("request", "#request-pane")):
            self.query_one(pane).display = name == mode
        if mode == "raw":
            self._fill_raw()
            self.query_one("#raw", JsonView).focus()
        elif mode == "request":
            self._fill_request()
            self.query_one("#request", JsonView).focus()
        else:
            self.query_one("#steps", OptionList).focus()

    def _fill_raw(self) -> None:
        index = self._selected()
        title = self.query_one("#raw-title", Static)
        view_pane = self.query_one("#raw", JsonView)
        if index is None or index >= len(self.views):
            title.update(Content("Raw JSON: select a step"))
            view_pane.set_payloads([], key=None)
            return
        view = self.views[index]
        title.update(Content.assemble(
            f"Step {view.n}: the JSON stored, block by block  ",
            ("enter/z fold · c copy · o editor", "$text-muted")))
        view_pane.set_payloads(step_payloads(view), key=(self.run_id, view.n, view.raw_tool_results is not None))

    @on(JsonView.OpenRequested)
    def _open_in_editor(self, message: JsonView.OpenRequested) -> None:
        message.stop()
        open_in_editor(self.app, f"{self.run_id}-{message.name}", message.document)

    def _fill_request(self) -> None:
        self.query_one("#request-title", Static).update(Content.styled("Next request: reading…", "$text-muted"))
        store, run_id = self.store, self.run_id

        def done(preview, error) -> None:
            self.post_message(RequestBuilt(run_id, preview, error))

        self.app.reader.submit(f"request:{id(self)}", lambda: next_request_preview(store, run_id), done)

    @on(RequestBuilt)
    def _request_built(self, message: RequestBuilt) -> None:
        if message.run_id != self.run_id:
            return
        message.stop()
        title = self.query_one("#request-title", Static)
        area = self.query_one("#request", JsonView)
        if message.error is not None:
            title.update(Content(f"Next request: cannot be built ({printable(one_line(message.error, 200))})"))
            area.set_payloads([])
            return
        preview = message.preview
        compacted = (f"compacted to ~{preview.est_after:,} tokens" if preview.compacted
                     else "not compacted")
        title.update(Content(f"Next request: {len(preview.messages)} messages, ~{preview.est_before:,} tokens "
                             f"from history, {compacted}. Exactly what the next call sends."))
        area.set_payloads(request_payloads(preview.messages), key=(self.run_id, "request", len(preview.messages)))

    def action_expand(self) -> None:
        self.payloads_open = not self.payloads_open
        self.query_one(StepDetail).set_payloads(self.payloads_open)

    def action_raw(self) -> None:
        self._set_mode("detail" if self.mode == "raw" else "raw")

    def action_next_request(self) -> None:
        self._set_mode("detail" if self.mode == "request" else "request")
