"""4. Start-up: ``dayflow runs`` against ``python -c "import peewee"``, and what it imports.

``dayflow runs`` lists the 50 newest of 200 runs in an existing database (the
real console script, in a new process each time); the floor is the same
interpreter importing Peewee and nothing else. The two alternate.
"""

from __future__ import annotations

import subprocess
import sys

from bench.common import BIN, Row, build_run, interleaved, median, ms, quiet_env, workdir

_RUNS = 200


def anthropic_imported(argv: list[str]) -> bool:
    env = quiet_env(PYTHONPROFILEIMPORTTIME="1")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:") and line.count("|") == 2}
    if "peewee" not in names:
        raise RuntimeError(f"no import capture from {argv}: {done.stderr[-300:]}")
    return "anthropic" in names


def run(quick: bool = False) -> list[Row]:
    from dayflow_tui.store import open_store

    with workdir("startup") as tmp:
        path = tmp / "runs.db"
        store = open_store(path)
        for _ in range(_RUNS):
            build_run(store, 3)
        store.close()
        env = quiet_env()
        runs = [str(BIN / "dayflow"), "runs", "--db", str(path)]
        peewee = [sys.executable, "-c", "import peewee"]

        def spawn(argv: list[str]):
            return lambda: subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)

        ours_t, floor_t = interleaved(spawn(runs), spawn(peewee), rounds=8 if quick else 25, warmup=2)
        imports = anthropic_imported(runs)
    ratio = median(ours_t) / median(floor_t)
    return [
        Row("4 start-up", f"`dayflow runs` ({_RUNS} runs in the file), wall time (median)", ms(median(ours_t)),
            f"`python -c \"import peewee\"` {ms(median(floor_t))}", ratio, "", None,
            f"{'+' if ratio >= 1 else '-'}{ms(abs(median(ours_t) - median(floor_t)))} over the floor"),
        Row("4 start-up", "`dayflow runs` imports anthropic", "yes" if imports else "no", "", None, "no",
            not imports, "also a test: tests/test_startup_imports.py"),
    ]
