"""The transcript's decisions: approve, deny or edit the tool calls a waiting run holds for a person.

A part of ``TranscriptScreen`` (a mixin: it reads the screen's ``run`` and
``views``). These are actions, not reads: each decision is committed in a
thread worker (``store.decide``, after the run's agent is checked), then the
run goes on in the app's drive worker.
"""

from __future__ import annotations

from textual import on, work
from textual.screen import Screen

from ...redaction import redacted_line
from .decide import Decided, DenyDialog, EditDialog


class DecidesWaitingCalls(Screen):
    """Approve (a), deny (d), edit (e); a ``Screen`` so Textual registers the handlers here."""

    def _waiting_calls(self) -> list:
        """The calls of the shown run that wait for a decision (read with the steps)."""
        if self.run is None or self.run.status != "waiting":
            return []
        return [call for view in self.views for call in view.calls
                if call.decision and call.decision.startswith("waiting")]

    def action_approve(self) -> None:
        if self._waiting_calls():
            self._decide(True, None)

    def action_deny(self) -> None:
        calls = self._waiting_calls()
        if not calls:
            return

        def denied(reason: str | None) -> None:
            if reason:
                self._decide(False, reason)

        self.app.push_screen(DenyDialog(self.run_id, [f"{c.name} ({c.id})" for c in calls]), denied)

    def action_edit_call(self) -> None:
        calls = self._waiting_calls()
        if not calls:
            return
        call = calls[0]

        def edited(text: str | None) -> None:
            if text is not None:
                self._approve_edited(call.id, text)

        from ...agent.approvals import parse_edit, tool_of_run
        from ...config.errors import UsageError

        tool = tool_of_run(self.run.agent_ref if self.run is not None else None, call.name)

        def problem_of(text: str) -> str | None:
            try:
                parse_edit(text, tool)
            except UsageError as exc:
                return str(exc)
            return None

        self.app.push_screen(EditDialog(self.run_id, call.name, call.id, call.pretty_input(), problem_of), edited)

    @work(thread=True, exclusive=True, exit_on_error=False, group="decide")
    def _approve_edited(self, tool_use_id: str, text: str) -> None:
        from ...agent.approvals import decider, validated_edit
        from ...agent.registry import agent_for_run

        store, run_id = self.store, self.run_id
        try:
            user, host = decider()
            agent_for_run(store.get_run(run_id))  # a changed agent: nothing decided (resume it from the CLI)
            target, value = validated_edit(store, run_id, tool_use_id, text)  # one line when it does not fit
            row = next(r for r in store.approvals(run_id) if r.tool_use_id == target)
            store.decide(run_id, target, approve=True, by=user, host=host, edited_input=value,
                         expect_hash=row.input_hash)
            waiting = any(r.state == "pending" for r in store.approvals(run_id))
            self.post_message(Decided(run_id, 0 if waiting else 1, None))
        except Exception as exc:
            self.post_message(Decided(run_id, 0, redacted_line(exc, 200)))
        finally:
            store.close_thread_connection()

    @work(thread=True, exclusive=True, exit_on_error=False, group="decide")
    def _decide(self, approve: bool, reason: str | None) -> None:
        from ...agent.approvals import decider
        from ...agent.registry import agent_for_run

        store, run_id = self.store, self.run_id
        decided = 0
        try:
            user, host = decider()
            agent_for_run(store.get_run(run_id))  # a changed agent: nothing decided (resume it from the CLI)
            for row in store.approvals(run_id):
                if row.state == "pending":
                    store.decide(run_id, row.tool_use_id, approve=approve, by=user, host=host, reason=reason,
                                 expect_hash=row.input_hash)
                    decided += 1
            self.post_message(Decided(run_id, decided, None))
        except Exception as exc:  # decided elsewhere meanwhile, or the database: the line says which
            self.post_message(Decided(run_id, decided, redacted_line(exc, 200)))
        finally:
            store.close_thread_connection()

    @on(Decided)
    def _decided(self, message: Decided) -> None:
        if message.run_id != self.run_id:
            return
        if message.error:
            self.app.notify(f"Run {message.run_id}: {message.error}", severity="warning")
        elif message.decided:
            self.app.notify(f"{message.decided} call(s) decided; run {message.run_id} goes on.", title="Approvals")
            self.app.resume_run(message.run_id)
        self._load()
