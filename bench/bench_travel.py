"""12. Runs that travel: JSONL export and import against raw sqlite3, and what a vacuum costs a writer.

- Export / import of a 1,000-step run (2 KB of tool payload per step):
  ``transfer.write_jsonl`` / ``read_archive`` + ``import_archive`` against the
  floor: raw sqlite3 selecting (inserting) the same rows with ``json.dumps``
  (``json.loads``) of each, no validation.
- Vacuum while a writer commits: a separate process commits a small step
  every ~10 ms (far busier than any agent) while this one prunes 30 MB of old
  runs and vacuums. The figure is the writer's slowest commit during the
  vacuum against its slowest commit in a window of the same length with no
  vacuum (same file, same process, alternating rounds): the incremental
  vacuum (a megabyte per transaction) against the one-time full ``VACUUM``
  of a file made before incremental vacuuming.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from bench.common import Row, scale, build_run, db_bytes, interleaved, median, ms, quiet_env, size, workdir

WRITER = r"""
import json, sys, time
from dayflow_tui.store import StepRecord, open_store
db, out, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = open_store(db)
run, lease = store.create_claimed_run("writer", model="offline", max_steps=10**6)
marks = []
print("ready", flush=True)
end = time.time() + seconds
n = 0
while time.time() < end:
    n += 1
    began = time.time()
    store.append_step(run.id, StepRecord(n=n, stop_reason="tool_use", assistant=[{"type": "text", "text": "x" * 500}],
                                         input_tokens=10, output_tokens=10), lease=lease)
    marks.append((began, time.time() - began))
    time.sleep(0.01)
store.release(lease)
json.dump(marks, open(out, "w"))
"""


def _bulky_runs(db: Path, runs: int) -> None:
    """``runs`` done runs 60 days old and as many from today, five steps of ~40 KB each (about 200 KB a run).

    Pruning removes the old half; the recent half is what a full ``VACUUM`` has to copy.
    """
    import os

    from dayflow_tui import clock
    from dayflow_tui.store import StepRecord, open_store

    store = open_store(db)
    try:
        for age in (60, 0):
            os.environ["DAYFLOW_FAKE_NOW"] = clock.iso(clock.now() - timedelta(days=age))
            with store.db.atomic():
                for i in range(runs):
                    run = store.create_run(f"run {i}, {age} days old", model="offline", status="running")
                    for n in range(1, 6):
                        blocks = [{"type": "text", "text": f"{i}-{n} " + "lorem ipsum " * 3300}]
                        store.append_step(run.id, StepRecord(n=n, stop_reason="end_turn", assistant=blocks))
                    store.finish_run(run.id, "done", final_text="brief")
            del os.environ["DAYFLOW_FAKE_NOW"]
    finally:
        store.close()


def _legacy(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.close()


def _checkpoint(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _writer_round(base: Path, work: Path, *, vacuum: bool, seconds: float) -> tuple[float, float, int, int]:
    """(slowest commit in the window, window length, bytes given back, commits in the window), one round.

    Bytes given back: the file (and its log) before the prune, against after the vacuum.
    """
    from dayflow_tui.store import open_store
    from dayflow_tui.store.retention import prunable_runs, prune
    from dayflow_tui.store.retention import vacuum as run_vacuum

    db = work / "round.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copy(base, db)
    before = db_bytes(db)
    store = open_store(db)
    prune(store, prunable_runs(store, older_than=timedelta(days=30)))
    marks = work / "marks.json"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(marks), str(seconds)],
                              env=quiet_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        began = time.time()
        if vacuum:
            run_vacuum(store)
        else:
            time.sleep(0.5)  # a window with no vacuum, to compare against
        ended = time.time()
        given_back = before - db_bytes(db)
    finally:
        store.close()
        writer.wait(timeout=seconds + 120)
    assert writer.returncode == 0
    inside = [took for start, took in json.loads(marks.read_text()) if began <= start + took and start <= ended]
    return max(inside), ended - began, given_back, len(inside)


def _export_import(quick: bool) -> list[Row]:
    from dayflow_tui.store import open_store
    from dayflow_tui.store.transfer import import_archive, read_archive, write_jsonl

    rows: list[Row] = []
    with workdir("travel-io") as work:
        source_path = work / "source.db"
        store = open_store(source_path)
        run_id = build_run(store, scale(1000, 20))
        store.close()
        _checkpoint(source_path)
        archive = work / "run.jsonl"
        counter = iter(range(10**6))

        def ours_export() -> None:
            store = open_store(source_path)
            with open(archive, "w", encoding="utf-8") as out:
                write_jsonl(store, [run_id], out)
            store.close()

        def raw_export() -> None:
            conn = sqlite3.connect(source_path)
            with open(work / "raw.jsonl", "w", encoding="utf-8") as out:
                for table, where in (("runs", "id"), ("steps", "run_id")):
                    cursor = conn.execute(f"SELECT * FROM {table} WHERE {where} = ?", (run_id,))
                    names = [c[0] for c in cursor.description]
                    for row in cursor:
                        out.write(json.dumps(dict(zip(names, row)), ensure_ascii=False) + "\n")
            conn.close()

        def ours_import() -> None:
            target = open_store(work / f"in-{next(counter)}.db")
            import_archive(target, read_archive(archive))
            target.close()

        def raw_import() -> None:
            path = work / f"raw-{next(counter)}.db"
            shutil.copy(work / "empty.db", path)
            conn = sqlite3.connect(path)
            with conn:
                for line in open(work / "raw.jsonl", encoding="utf-8"):
                    row = json.loads(line)
                    table = "steps" if "n" in row else "runs"
                    conn.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                                 list(row.values()))
            conn.close()

        open_store(work / "empty.db").close()
        _checkpoint(work / "empty.db")
        rounds = scale(3 if quick else 7, 1)
        ours_out, raw_out = interleaved(ours_export, raw_export, rounds=rounds, warmup=1)
        ours_in, raw_in = interleaved(ours_import, raw_import, rounds=rounds, warmup=1)
        rows.append(Row("12 travel", "export --jsonl, 1,000-step run (median)", ms(median(ours_out)),
                        f"raw sqlite3 + json.dumps {ms(median(raw_out))}", median(ours_out) / median(raw_out),
                        note=f"file {size(archive.stat().st_size)} for a {size(db_bytes(source_path))} database"))
        rows.append(Row("12 travel", "import, 1,000-step run: validate the file, then one transaction (median)",
                        ms(median(ours_in)), f"raw sqlite3 inserts {ms(median(raw_in))}",
                        median(ours_in) / median(raw_in), note="ours reads the file twice (check, then write)"))
    return rows


def _vacuum_stalls(quick: bool) -> list[Row]:
    rows: list[Row] = []
    with workdir("travel-vacuum") as work:
        incremental, legacy = work / "incremental.db", work / "legacy.db"
        _bulky_runs(incremental, scale(30 if quick else 150, 4))
        _checkpoint(incremental)
        shutil.copy(incremental, legacy)
        _legacy(legacy)
        results: dict[str, list[tuple[float, float, int, int]]] = {"none": [], "incremental": [], "full": []}
        for _ in range(1 if quick else 3):
            results["none"].append(_writer_round(incremental, work, vacuum=False, seconds=scale(4, 1)))
            results["incremental"].append(_writer_round(incremental, work, vacuum=True, seconds=scale(8, 2)))
            results["full"].append(_writer_round(legacy, work, vacuum=True, seconds=scale(8, 2)))
    base = median([r[0] for r in results["none"]])
    for kind, label in (("incremental", "incremental vacuum (new files)"),
                        ("full", "first vacuum of an older file (one full VACUUM)")):
        worst = median([r[0] for r in results[kind]])
        took = median([r[1] for r in results[kind]])
        back = median([r[2] for r in results[kind]])
        commits = median([r[3] for r in results[kind]])
        rows.append(Row("12 travel", f"writer's slowest commit during the {label}, median of rounds", ms(worst),
                        f"no vacuum {ms(base)}", worst / base,
                        note=f"vacuum took {ms(took)} ({commits:.0f} commits meanwhile); prune + vacuum gave back "
                             f"{size(back)}"))
    return rows


def run(quick: bool = False) -> list[Row]:
    return _export_import(quick) + _vacuum_stalls(quick)
