"""4. Start-up: what a process pays before it does its job.

- ``dayflow runs`` on a file of 10 runs (the real console script, a new
  process each time) against ``python -c "import sqlite3, peewee"`` with
  psycopg installed but not imported (the baseline hides it the way the store
  does; Peewee alone would import it), and against plain ``import sqlite3,
  peewee`` (which does import psycopg here).
- ``dayflow resume`` of an interrupted 1,000-step run on a real model (the
  real ``anthropic`` SDK, against a loopback HTTP server in this process):
  from spawning the process to the server receiving the first request,
  against ``python -c "import anthropic"``: from spawning it to the import
  done (the strict floor: the same interpreter start and SDK import, nothing
  else), and to the process's end (its exit alone takes about a second: the
  final garbage collection walks the SDK's objects; ``dayflow`` freezes the
  collector before it exits, see ``cli.main``).
- ``dayflow brief`` on the real SDK: from the last reply arriving to the
  process's end (committing, printing, exiting).
- Which heavy modules a command imports (``anthropic``, psycopg).

The two sides of each comparison alternate, round by round.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import BIN, Row, scale, build_run, interleaved, median, ms, quiet_env, workdir

LIST_RUNS = 10
RESUME_STEPS = scale(1_000, 20)
REAL_MODEL = "claude-bench-1"  # any name but "offline": the real SDK path
_DRIVERS = ("psycopg2cffi", "psycopg2", "psycopg", "pymysql", "MySQLdb")
PEEWEE_WITHOUT_DRIVERS = ("import sys\nfor name in %r: sys.modules[name] = None\nimport sqlite3, peewee" % (_DRIVERS,))


def imported(argv: list[str], env: dict | None = None) -> set[str]:
    """Top-level packages whose code ran in ``argv`` (an import refused on purpose shows as a bare name)."""
    done = subprocess.run(argv, env={**(env or quiet_env()), "PYTHONPROFILEIMPORTTIME": "1"},
                          capture_output=True, text=True, timeout=300)
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:") and line.count("|") == 2}
    if "peewee" not in names:
        raise RuntimeError(f"no import capture from {argv}: {done.stderr[-300:]}")
    return {name.split(".")[0] for name in names if "." in name} | {n for n in names if n == "anthropic"}


class FirstCallServer:
    """A loopback Messages API: notes when each request arrives and ends the run with one short reply."""

    def __init__(self):
        self.arrivals: list[float] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                server.arrivals.append(time.time())
                self.rfile.read(int(self.headers.get("content-length", 0)))
                body = json.dumps({"id": "msg_bench", "type": "message", "role": "assistant", "model": REAL_MODEL,
                                   "content": [{"type": "text", "text": "## Today\n- done"}],
                                   "stop_reason": "end_turn", "stop_sequence": None,
                                   "usage": {"input_tokens": 1, "output_tokens": 1}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def resume_fixture(tmp: Path) -> tuple[Path, str]:
    from dayflow_tui.store import Run, open_store

    path = tmp / "resume-1000.db"
    store = open_store(path)
    run_id = build_run(store, RESUME_STEPS)
    Run.update(model=REAL_MODEL).where(Run.id == run_id).execute()
    store.close()
    return path, run_id


def first_call_timer(pristine: Path, run_id: str, tmp: Path, server: FirstCallServer):
    env = quiet_env(ANTHROPIC_API_KEY="sk-ant-bench-not-a-key", ANTHROPIC_BASE_URL=server.url)
    trial = tmp / "trial.db"
    argv = [str(BIN / "dayflow"), "resume", run_id, "--db", str(trial)]
    seconds: list[float] = []

    def once() -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{trial}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(pristine, trial)
        before = len(server.arrivals)
        started = time.time()
        done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
        if done.returncode != 0 or len(server.arrivals) == before:
            raise RuntimeError(f"resume exited {done.returncode} after {len(server.arrivals) - before} call(s): "
                               f"{done.stderr.decode()[-400:]}")
        seconds.append(server.arrivals[before] - started)

    return once, seconds


def spawn(argv: list[str], env: dict):
    return lambda: subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)


def sdk_import_timer(env: dict):
    """``python -c "import anthropic"``: seconds from spawn to the import done, and to the process's end."""
    argv = [sys.executable, "-c", "import anthropic, time; print(time.time(), flush=True)"]
    to_import: list[float] = []
    to_end: list[float] = []

    def once() -> None:
        started = time.time()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        ended = time.time()
        to_import.append(float(done.stdout.split()[0]) - started)
        to_end.append(ended - started)

    return once, to_import, to_end


def exit_after_last_reply(server: FirstCallServer, tmp: Path, rounds: int) -> list[float]:
    """``dayflow brief`` on the real SDK (one reply ends the run): last reply sent -> process gone."""
    env = quiet_env(ANTHROPIC_API_KEY="sk-ant-bench-not-a-key", ANTHROPIC_BASE_URL=server.url)
    found = []
    for r in range(rounds):
        db = tmp / f"brief-{r}.db"
        subprocess.run([str(BIN / "dayflow"), "brief", "--model", REAL_MODEL, "--db", str(db)], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=300)
        found.append(time.time() - server.arrivals[-1])
    return found


def run(quick: bool = False) -> list[Row]:
    rows = []
    env = quiet_env()
    with workdir("startup") as tmp:
        runs_db = tmp / "runs.db"
        from dayflow_tui.store import open_store

        store = open_store(runs_db)
        for _ in range(LIST_RUNS):
            build_run(store, 3)
        store.close()
        runs = [str(BIN / "dayflow"), "runs", "--db", str(runs_db)]
        hidden = [sys.executable, "-c", PEEWEE_WITHOUT_DRIVERS]
        plain = [sys.executable, "-c", "import sqlite3, peewee"]
        ours_t, hidden_t, plain_t = interleaved(spawn(runs, env), spawn(hidden, env), spawn(plain, env),
                                                rounds=scale(8 if quick else 25, 1), warmup=scale(2, 0))
        runs_imports = imported(runs)
        plain_imports = imported(plain)

        pristine, run_id = resume_fixture(tmp)
        server = FirstCallServer()
        try:
            resume_once, first_call = first_call_timer(pristine, run_id, tmp, server)
            sdk_once, sdk_import, sdk_end = sdk_import_timer(env)
            kept = scale(4 if quick else 11, 1)
            interleaved(resume_once, sdk_once, rounds=kept, warmup=scale(1, 0))
            first_call, sdk_import, sdk_end = first_call[-kept:], sdk_import[-kept:], \
                sdk_end[-kept:]  # the warm-up rounds left out
            exits = exit_after_last_reply(server, tmp, scale(3 if quick else 7, 1))
        finally:
            server.close()

    ratio = median(ours_t) / median(hidden_t)
    rows.append(Row("4 start-up", f"`dayflow runs` ({LIST_RUNS} runs), wall time (median)", ms(median(ours_t)),
                    f"`import sqlite3, peewee`, psycopg installed, not imported {ms(median(hidden_t))}", ratio,
                    "<= 1.5x", ratio <= 1.5, f"+{ms(median(ours_t) - median(hidden_t))} over the floor"))
    rows.append(Row("4 start-up", "the same floor with Peewee importing psycopg (plain `import sqlite3, peewee`)",
                    ms(median(plain_t)), f"without psycopg {ms(median(hidden_t))}",
                    median(plain_t) / median(hidden_t), "", None,
                    f"psycopg imported: {'yes' if 'psycopg' in plain_imports else 'no'}"))
    rows.append(Row("4 start-up", "`dayflow runs` imports anthropic / psycopg",
                    f"{'yes' if 'anthropic' in runs_imports else 'no'} / "
                    f"{'yes' if 'psycopg' in runs_imports else 'no'}", "", None, "no / no",
                    not ({"anthropic", "psycopg"} & runs_imports), "also tested: tests/cli/test_startup_imports.py"))
    ratio = median(first_call) / median(sdk_import)
    rows.append(Row("4 start-up", f"process start -> first API call, `dayflow resume` of {RESUME_STEPS:,} steps, "
                    "real SDK (median)", ms(median(first_call)),
                    f"`python -c \"import anthropic\"`, start -> import done {ms(median(sdk_import))}",
                    ratio, "<= 1.1x", ratio <= 1.1, "loopback HTTP server; the SDK is built in a thread while the "
                    "history is read"))
    ratio = median(first_call) / median(sdk_end)
    rows.append(Row("4 start-up", "the same, against the whole `python -c \"import anthropic\"` process",
                    ms(median(first_call)), f"start -> exit {ms(median(sdk_end))}", ratio, "", None,
                    f"its exit alone: {ms(median(sdk_end) - median(sdk_import))}"))
    rows.append(Row("4 start-up", "`dayflow brief`, real SDK: last reply -> process gone (median)", ms(median(exits)),
                    f"`import anthropic` exit {ms(median(sdk_end) - median(sdk_import))}",
                    median(exits) / (median(sdk_end) - median(sdk_import)), "", None,
                    "commit, print the brief, exit (collector frozen)"))
    return rows


if __name__ == "__main__":
    from bench.run_all import table

    print(table(run(quick="--quick" in sys.argv)))
