"""The transcript's decisions: approve, deny or edit the tool calls a waiting run holds for a person, call by call.

A part of ``TranscriptScreen`` (a mixin: it reads the screen's ``run`` and ``pending``, the calls
listed in its ``PendingCalls``). Space marks calls; ``a`` approves the marked ones (or the one under
the cursor), ``A`` every one after a confirm naming what each will do, ``d`` denies with a reason,
``E`` edits the one under the cursor. These are actions, not reads: each decision is committed in a
thread worker with the store verb ``dayflow approve``/``deny`` use (``store.decide``, one conditional
UPDATE per call, bound to the argument hash shown), so a call is decided once however many presses or
dashboards race: the second is refused and says by whom. Once none waits, the run goes on in the app's
drive worker.
"""

from __future__ import annotations

from textual import on, work
from textual.screen import Screen

from ...redaction import redacted_line
from ..widgets.pending_calls import PendingCalls
from .decide import ApproveAllDialog, Decided, DenyDialog, EditDialog


class DecidesWaitingCalls(Screen):
    """Approve (a, A), deny (d), edit (E); a ``Screen`` so Textual registers the handlers here."""

    pending: tuple = ()  # views.pending.PendingCall rows, from the last read
    _deciding: frozenset = frozenset()  # call ids a decision worker is deciding now (a second press waits)

    def _waiting_calls(self) -> tuple:
        """The calls of the shown run that wait for a decision (read with the steps)."""
        if self.run is None or self.run.status != "waiting":
            return ()
        return self.pending

    def _chosen(self) -> tuple:
        """What a key acts on: the marked calls, else the one under the cursor (none being decided now)."""
        if not self._waiting_calls():
            return ()
        lists = self.query(PendingCalls)
        chosen = lists.first().chosen if lists else self.pending[:1]
        return tuple(call for call in chosen if call.tool_use_id not in self._deciding)

    def action_approve(self) -> None:
        calls = self._chosen()
        if calls:
            self._start(calls, approve=True, reason=None)
        elif self._deciding:
            self.app.notify("A decision on these calls is being saved.", severity="information")

    def action_approve_all(self) -> None:
        calls = tuple(call for call in self._waiting_calls() if call.tool_use_id not in self._deciding)
        if not calls:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                fresh = {call.tool_use_id for call in self._waiting_calls()} - set(self._deciding)
                self._start(tuple(call for call in calls if call.tool_use_id in fresh), approve=True, reason=None)

        self.app.push_screen(ApproveAllDialog(self.run_id, [call.side_effect() for call in calls]), answered)

    def action_deny(self) -> None:
        calls = self._chosen()
        if not calls:
            return

        def denied(reason: str | None) -> None:
            if reason:
                self._start(calls, approve=False, reason=reason)

        self.app.push_screen(DenyDialog(self.run_id, [f"{c.tool} ({c.tool_use_id})" for c in calls]), denied)

    def _start(self, calls: tuple, *, approve: bool, reason: str | None) -> None:
        if not calls:
            return
        self._deciding = self._deciding | {call.tool_use_id for call in calls}
        self._decide(tuple((call.tool_use_id, call.input_hash) for call in calls), approve, reason)

    def action_edit_call(self) -> None:
        if not self._waiting_calls():
            return
        lists = self.query(PendingCalls)
        call = lists.first().under_cursor if lists else self.pending[0]
        if call is None or call.tool_use_id in self._deciding:
            return

        def edited(text: str | None) -> None:
            if text is not None:
                self._deciding = self._deciding | {call.tool_use_id}
                self._approve_edited(call.tool_use_id, call.input_hash, text)

        from ...agent.approvals import parse_edit, tool_of_run
        from ...config.errors import UsageError

        tool = tool_of_run(self.run.agent_ref if self.run is not None else None, call.tool)

        def problem_of(text: str) -> str | None:
            try:
                parse_edit(text, tool)
            except UsageError as exc:
                return str(exc)
            return None

        self.app.push_screen(EditDialog(self.run_id, call.tool, call.tool_use_id, call.pretty_arguments(),
                                        problem_of), edited)

    @work(thread=True, exit_on_error=False, group="decide")
    def _approve_edited(self, tool_use_id: str, input_hash: str, text: str) -> None:
        from ...agent.approvals import decider, validated_edit
        from ...agent.registry import agent_for_run

        store, run_id = self.store, self.run_id
        try:
            user, host = decider()
            agent_for_run(store.get_run(run_id))  # a changed agent: nothing decided (resume it from the CLI)
            target, value = validated_edit(store, run_id, tool_use_id, text)  # one line when it does not fit
            store.decide(run_id, target, approve=True, by=user, host=host, edited_input=value, expect_hash=input_hash)
            left = sum(1 for r in store.approvals(run_id) if r.state == "pending")
            self.post_message(Decided(run_id, 1, None, left=left, calls=(tool_use_id,)))
        except Exception as exc:
            self.post_message(Decided(run_id, 0, redacted_line(exc, 200), calls=(tool_use_id,)))
        finally:
            store.close_thread_connection()

    @work(thread=True, exit_on_error=False, group="decide")
    def _decide(self, calls: tuple[tuple[str, str], ...], approve: bool, reason: str | None) -> None:
        """Each call decided on its own, bound to the hash of the arguments shown (as ``--hash`` does)."""
        from ...agent.approvals import decider
        from ...agent.registry import agent_for_run
        from ...config.errors import DecisionRefused

        store, run_id = self.store, self.run_id
        decided, refused, ids = 0, [], tuple(call_id for call_id, _hash in calls)
        try:
            user, host = decider()
            agent_for_run(store.get_run(run_id))  # a changed agent: nothing decided (resume it from the CLI)
            for call_id, input_hash in calls:
                try:
                    store.decide(run_id, call_id, approve=approve, by=user, host=host, reason=reason,
                                 expect_hash=input_hash)
                    decided += 1
                except DecisionRefused as exc:  # decided elsewhere first: said, and the others still decided
                    refused.append(redacted_line(exc, 200))
            left = sum(1 for r in store.approvals(run_id) if r.state == "pending")
            self.post_message(Decided(run_id, decided, None, refused=tuple(refused), left=left, calls=ids))
        except Exception as exc:  # the database, a changed agent: the line says which
            self.post_message(Decided(run_id, decided, redacted_line(exc, 200), refused=tuple(refused), calls=ids))
        finally:
            store.close_thread_connection()

    @on(Decided)
    def _decided(self, message: Decided) -> None:
        if message.run_id != self.run_id:
            return
        self._deciding = self._deciding - set(message.calls)
        for line in message.refused:
            self.app.notify(f"Run {message.run_id}: {line}", severity="warning")
        if message.error:
            self.app.notify(f"Run {message.run_id}: {message.error}", severity="warning")
        elif message.decided and message.left:
            self.app.notify(f"{message.decided} call(s) decided; {message.left} still wait.", title="Approvals")
        elif message.decided:
            self.app.notify(f"{message.decided} call(s) decided; run {message.run_id} goes on.", title="Approvals")
            self.app.resume_run(message.run_id)
        lists = self.query(PendingCalls)
        if lists:
            lists.first().deselect_all()
        self._load()
