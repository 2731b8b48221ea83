"""``ctrl+e`` in the edit dialog of a waiting call (issue #30): the arguments go to the user's $EDITOR (the
dashboard suspends), come back into the box, are checked there (a bad edit stays, with the reason under it),
and Approve decides the call with what the editor left. Driven in a real terminal (tmux) with the real
console script; the "editor" is a small script that rewrites the file."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time

import pytest

from dayflow_tui.store import open_store
from dayflow_tui.tui import demo_data

from ..reliability_helpers import cli_env
from ..tui_helpers import TUI_BIN

RUN = "run-wait-0001"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_ctrl_e_edits_the_arguments_in_the_editor_and_approve_uses_them(tmp_path):
    db = tmp_path / "wait.db"
    store = open_store(str(db))
    demo_data.waiting_run(store, RUN, demo_data.BASE_TIME)
    first = sorted((r for r in store.approvals(RUN) if r.state == "pending"), key=lambda r: (r.n, r.id))[0]
    store.close()
    runs, editor = tmp_path / "editor-runs", tmp_path / "editor.sh"
    # The first time it leaves broken JSON; the second time a changed title (the rest as it was).
    wanted = {"title": "From the editor", "idempotency_key": "edited-in-editor"}
    editor.write_text(
        "#!/bin/sh\n"
        f"echo run >> {shlex.quote(str(runs))}\n"
        f'if [ "$(wc -l < {shlex.quote(str(runs))})" -eq 1 ]; then printf \'{{"title": "half\' > "$1"; exit 0; fi\n'
        f"printf '%s' {shlex.quote(json.dumps(wanted))} > \"$1\"\n")
    editor.chmod(0o755)
    env = cli_env(DAYFLOW_EDITOR=str(editor), XDG_STATE_HOME=str(tmp_path / "state"), TERM="xterm-256color",
                  HOME=str(tmp_path))
    env.pop("TMUX", None)
    socket = f"dayflow-ctrl-e-{os.getpid()}-{time.monotonic_ns()}"

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
        wait_screen(RUN)
        tmux("send-keys", "-t", "dash", "Enter")  # the waiting run is pinned on top, under the cursor
        wait_screen("Waiting for your decision: 6 calls")
        tmux("send-keys", "-t", "dash", "E")
        wait_screen("Edit, then approve")
        tmux("send-keys", "-t", "dash", "C-e")
        shown = wait_screen("not JSON")  # the editor left broken JSON: said at once, under the edit
        assert '{"title": "half' in shown
        tmux("send-keys", "-t", "dash", "C-e")
        wait_screen("Edited in your editor")
        tmux("send-keys", "-t", "dash", "C-s")  # Approve, from the box
        wait_screen("Waiting for your decision: 5 calls")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=30)
    assert runs.read_text().count("run") == 2
    store = open_store(str(db))
    try:
        row = next(r for r in store.approvals(RUN) if r.tool_use_id == first.tool_use_id)
        assert row.state == "approved" and json.loads(row.edited_input) == wanted
    finally:
        store.close()
