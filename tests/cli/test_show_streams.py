"""``dayflow show`` writes a long run as it reads it, and pages through ``$PAGER`` on a terminal.

Streaming: the run's steps are read a page at a time (``views.transcript.show_pages``), each written before
the next is read. Through a pipe nobody reads past the first line, the process blocks once the pipe is full
(the transcript is far larger than a pipe holds), so the pages it read by then are fewer than the run has:
the first screen did not wait for the whole run. Before, every step was read before the first line.

Paging: on a terminal (a pty here) the output goes to ``$PAGER``'s stdin, coloured (the pager is a terminal
program), with untrusted text still escaped; ``--no-pager`` and a pipe print directly.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dayflow_tui.store import StepRecord, open_store

from ..conftest import dayflow_cmd, run_on_a_terminal
from ..reliability_helpers import cli_env

STEPS = 2_000
HOSTILE = "\x1b]0;pwned-title\x07 \x1b[2J\x1b[H [bold]markup[/bold]"


def _long_run(path: Path, n_steps: int) -> str:
    store = open_store(path)
    run = store.create_run("Prepare my day.", model="offline", max_steps=n_steps + 5, status="running")
    with store.db.atomic():
        for n in range(1, n_steps + 1):
            tool_id = f"toolu_show{n:05d}"
            blocks = [{"type": "text", "text": f"Step {n}: reading the inbox. {HOSTILE if n == 1 else ''}"},
                      {"type": "tool_use", "id": tool_id, "name": "read_inbox", "input": {"limit": 20}}]
            store.append_step(run.id, StepRecord(n=n, stop_reason="tool_use", assistant=blocks, input_tokens=900,
                                                 output_tokens=60, model="offline"))
            store.set_tool_results(run.id, n, [{"type": "tool_result", "tool_use_id": tool_id,
                                                "content": '{"ok":true,"count":0,"mails":[]}'}])
    store.close()
    return run.id


def test_the_first_screen_is_written_before_the_run_is_read_whole(tmp_path):
    db = tmp_path / "long.db"
    run_id = _long_run(db, STEPS)
    trace = tmp_path / "trace"
    proc = subprocess.Popen(dayflow_cmd("show", run_id, "--db", str(db)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=cli_env(DAYFLOW_TEST_TRACE=str(trace)))
    try:
        first = proc.stdout.readline().decode()
        assert first.startswith(f"run {run_id}"), first
        while b"step 1 " not in proc.stdout.readline():  # the first step's rule: the first page was written
            pass
        assert proc.poll() is None  # blocked on the full pipe: we have read a few KB of a few hundred
        pages_read = trace.read_text().split().count("show-page")
        assert 0 < pages_read < STEPS // 500, pages_read
        rest = proc.stdout.read()
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        proc.kill()
    assert f"step {STEPS} ".encode() in rest
    assert trace.read_text().split().count("show-page") >= STEPS // 500  # every page, in the end


def _recording_pager(tmp_path: Path) -> tuple[str, Path]:
    got = tmp_path / "paged.bin"
    script = tmp_path / "pager.py"
    script.write_text(f"import sys\nopen({str(got)!r}, 'wb').write(sys.stdin.buffer.read())\n")
    return f"{sys.executable} {script}", got


def test_on_a_terminal_show_pages_through_PAGER_with_untrusted_text_escaped(tmp_path):
    db = tmp_path / "run.db"
    run_id = _long_run(db, 30)
    pager, got = _recording_pager(tmp_path)
    done, screen = run_on_a_terminal(dayflow_cmd("show", run_id, "--db", str(db)), stream="stdout",
                                     env=cli_env(PAGER=pager, TERM="xterm-256color"), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    paged = got.read_bytes()
    assert run_id.encode() in paged and b"step 30 " in paged
    assert b"\x1b[" in paged  # coloured: the pager is a terminal program (less -R shows SGR colours)
    assert b"[bold]markup[/bold]" in paged  # markup printed as text
    for raw in (b"\x1b]0;", b"\x07", b"\x1b[2J", b"\x1b[H"):  # the model's escapes never reach the pager raw
        assert raw not in paged, raw
    assert run_id.encode() not in screen  # nothing printed around the pager


def test_no_pager_and_a_pipe_print_directly(tmp_path):
    db = tmp_path / "run.db"
    run_id = _long_run(db, 3)
    pager, got = _recording_pager(tmp_path)
    done, screen = run_on_a_terminal(dayflow_cmd("show", run_id, "--no-pager", "--db", str(db)), stream="stdout",
                                     env=cli_env(PAGER=pager), timeout=120)
    assert done.returncode == 0 and run_id.encode() in screen and not got.exists()
    for raw in (b"\x1b]0;", b"\x07", b"\x1b[2J"):
        assert raw not in screen, raw
    piped = subprocess.run(dayflow_cmd("show", run_id, "--db", str(db)), capture_output=True,
                           env=cli_env(PAGER=pager), timeout=120)
    assert piped.returncode == 0 and f"run {run_id}".encode() in piped.stdout and not got.exists()
    assert b"\x1b[" not in piped.stdout  # a pipe gets plain text


def test_quitting_the_pager_early_is_a_normal_end(tmp_path):
    """``q`` in less before the end: the pager is gone, the rest cannot be written; exit 0, nothing on stderr."""
    db = tmp_path / "long.db"
    run_id = _long_run(db, STEPS)
    script = tmp_path / "quits.py"
    script.write_text("import sys\nsys.stdin.readline()\n")  # one line read, then gone (like q)
    done, screen = run_on_a_terminal(dayflow_cmd("show", run_id, "--db", str(db)), stream="stdout",
                                     env=cli_env(PAGER=f"{sys.executable} {script}"), timeout=120)
    assert done.returncode == 0 and done.stderr == b"", done.stderr[-2000:]
