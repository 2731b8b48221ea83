"""``dayflow import --claude-code``: every session file under a directory, read from where the last import
stopped, appended to read-only runs through the store's verbs.

A session file ``DIR/<project-slug>/<session>.jsonl`` is a run (``source`` claude-code); each sidechain
(a subagent's conversation: the ``isSidechain`` records of the file, by ``agentId``, or a file
``<session>/subagents/agent-*.jsonl``) a child run of it. Run ids are derived from the file's path and
the thread, so the same file always lands in the same runs.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..store.tables.imported import CLAUDE_CODE, ImportedRun, ImportedStep
from .sessions import MAIN, SETTLED_AFTER_S, SessionRead, SessionStep, read_session

DEFAULT_DIR = "~/.claude/projects"


@dataclass
class ImportSummary:
    files: int = 0
    unchanged: int = 0
    foreign: int = 0
    steps: int = 0
    runs: set = field(default_factory=set)
    new_runs: int = 0
    problems: int = 0
    waiting: int = 0  # files whose end is still being written (read again next time)


def run_id_for(key: str, thread: str) -> str:
    return "cc" + hashlib.sha256(f"{key}\0{thread}".encode("utf-8", "replace")).hexdigest()[:14]


def session_files(root: Path) -> list[Path]:
    """The session files under ``root`` (a projects directory, one project's directory, or one file): the
    sessions first, then the subagents' files (their parent runs exist by then)."""
    if root.is_file():
        return [root]
    mains = sorted(root.glob("*.jsonl")) + sorted(root.glob("*/*.jsonl"))
    agents = sorted(root.glob("*/subagents/*.jsonl")) + sorted(root.glob("*/*/subagents/*.jsonl"))
    return [p for p in mains + agents if p.is_file()]


def _session_file_of(path: Path) -> Path | None:
    """The session file of a subagent's file ``<slug>/<session>/subagents/agent-X.jsonl``."""
    if path.parent.name != "subagents":
        return None
    session_dir = path.parent.parent
    return session_dir.with_name(session_dir.name + ".jsonl")


def _stored(step: SessionStep) -> ImportedStep:
    return ImportedStep(stop_reason=step.stop_reason, assistant=step.assistant, tool_results=step.tool_results,
                        model=step.model, input_tokens=step.input_tokens, output_tokens=step.output_tokens,
                        cache_creation_input_tokens=step.cache_creation_input_tokens,
                        cache_read_input_tokens=step.cache_read_input_tokens,
                        cache_write_1h_tokens=step.cache_write_1h_tokens,
                        web_search_requests=step.web_search_requests, raw=step.raw, created_at=step.created_at)


def _runs_of(key: str, path: Path, read: SessionRead) -> list[ImportedRun]:
    session_file = _session_file_of(path)
    session_run = run_id_for(str(session_file.resolve()), MAIN) if session_file is not None else None
    main = run_id_for(key, MAIN)
    threads: dict[str, ImportedRun] = {}
    main_info = read.threads.get(MAIN)
    for step in read.steps:
        run = threads.get(step.thread)
        if run is None:
            info = read.threads.get(step.thread) or main_info
            parent = None
            if step.thread != MAIN or session_run is not None:
                parent = session_run or main
            session_id = (info.session_id if info else None) or \
                (session_file.stem if session_file is not None else path.stem)
            run = threads[step.thread] = ImportedRun(
                run_id=run_id_for(key, step.thread), external_id=session_id, source=CLAUDE_CODE,
                parent_id=parent, external_dir=info.cwd if info else None,
                external_branch=info.git_branch if info else None, model=info.model if info else None,
                user_msg=info.first_prompt if info else None, created_at=(info.started_at if info else None)
                or step.created_at)
        run.steps.append(_stored(step))
    return sorted(threads.values(), key=lambda r: r.run_id != main)


def import_file(store, path: Path, summary: ImportSummary, say: Callable[[str], None]) -> None:
    from ..safe_text import printable

    key = str(path.resolve())
    try:
        stat = path.stat()
    except OSError as exc:
        say(f"{printable(path)}: cannot be read ({printable(exc.strerror)}); skipped")
        summary.problems += 1
        return
    summary.files += 1
    state = store.imported_file(key)
    settled = time.time() - stat.st_mtime > SETTLED_AFTER_S
    same = state is not None and state.size == stat.st_size and state.mtime_ns == stat.st_mtime_ns
    if same and (state.offset == stat.st_size or not settled):
        summary.unchanged += 1  # (a tail still waiting is read again only once the file has settled)
        return
    if state is not None and stat.st_size < state.offset:
        say(f"{printable(path)}: shorter than when it was imported ({stat.st_size:,} < {state.offset:,} bytes); "
            "left as imported")
        summary.problems += 1
        return
    try:
        read = read_session(path, start=state.offset if state else 0, done=state.done if state else None,
                            settled=settled)
    except OSError as exc:
        say(f"{printable(path)}: cannot be read ({printable(exc.strerror)}); skipped")
        summary.problems += 1
        return
    if read.foreign:
        say(f"{printable(path)}: not a Claude Code session file ({read.foreign}); nothing imported from it")
        summary.foreign += 1
        return
    for problem in read.problems:
        say(f"{printable(path)} {problem}")
        summary.problems += 1
    if read.waiting:
        summary.waiting += 1
    runs = _runs_of(key, path, read)
    if same and not runs and read.end_offset == state.offset and read.done == state.done:
        summary.unchanged += 1  # read again, nothing new (a line still unfinished): nothing written
        return
    added = store.append_imported(key, was=state, run_id=run_id_for(key, MAIN), size=stat.st_size,
                                  offset=read.end_offset, mtime_ns=stat.st_mtime_ns, done=read.done, runs=runs)
    for run in runs:
        count = added.get(run.run_id, 0)
        if not count:
            continue
        summary.steps += count
        summary.runs.add(run.run_id)
        kind = "subagent of " + printable(run.parent_id) if run.parent_id else "session"
        say(f"{printable(run.run_id)}  {count} new step(s)  {kind} {printable(run.external_id or '?')}"
            f"  {printable(run.external_dir or '')}")


def import_claude_code(store, root: str | os.PathLike, *, say: Callable[[str], None]) -> ImportSummary:
    """Import every session file under ``root``; ``say`` gets one line per run appended to and per problem."""
    summary = ImportSummary()
    for path in session_files(Path(root).expanduser()):
        import_file(store, path, summary, say)
    return summary
