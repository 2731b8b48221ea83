"""9. Bytes per step: ours (and the knobs that would shrink it) against the Agents SDK, LangGraph and the JSON text.

Every side stores the same 400 agent-like steps (``common.agent_step``: a
short assistant turn with one tool call and about 2 KB of tool result), with
two commits per step (the reply, then the tool results), in a fresh SQLite
file (WAL, ``synchronous=FULL``). Size is the file after a WAL checkpoint
minus the empty database, per step.

- ours: ``append_step`` (with the reply's envelope, ``raw``, as the loop keeps
  it) + ``set_tool_results`` through the store, as the loop commits, with 4 KB
  pages (files made before this change) and with larger pages for a new file
  (``PRAGMA page_size`` before the first table: the same rows, the same
  format; an existing file keeps its pages).
- ours with the large blocks compressed (a format change, measured here and
  not shipped): the same ``steps`` table written with plain sqlite3, where a
  ``tool_results`` JSON of 1 KB or more is stored as a zstd (or zlib) BLOB and
  small ones stay readable text. Its cost: compressing each step, and
  decompressing a 1,000-step history on resume.
- the OpenAI Agents SDK's ``SQLiteSession`` (``openai-agents``): the same step
  as Responses API items (the assistant message, the function call, its
  output), added with ``add_items`` as its runner does after a reply and after
  the tools.
- LangGraph ``SqliteSaver``: from item 2's side-by-side run (a two-node
  agent/tools graph checkpointing the message list).
- the step's JSON text: its blocks, tool results and reply envelope, compact:
  the floor without compression.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import time
import zlib
from pathlib import Path

from bench.common import Row, scale, agent_step, median, ms, settled_bytes, size, step_record, workdir

STEPS = scale(400, 10)


def loop_step_record(i: int, assistant: list[dict]):
    """``common.step_record`` with the reply body the loop keeps beside the blocks (``replies.storable_raw``:
    the body as the API sent it, its content array left out since it is the stored blocks)."""
    from dayflow_tui.agent.replies import storable_raw
    from dayflow_tui.store import dumps

    record = step_record(i, assistant)
    body = json.dumps({"id": f"msg_bench{i:06d}", "type": "message", "role": "assistant", "model": record.model,
                       "content": assistant, "stop_reason": record.stop_reason, "stop_sequence": None,
                       "usage": {"input_tokens": 600, "cache_creation_input_tokens": 0,
                                 "cache_read_input_tokens": record.cache_read_input_tokens, "output_tokens": 60}},
                      ensure_ascii=False, separators=(",", ":"))
    return dataclasses.replace(record, raw=storable_raw(body, dumps(assistant)))
PAGE_SIZES = (4096, 8192, 16384, 65536)
SHIPPED_PAGE_SIZE = 16384  # the store's page size for new SQLite files
COMPRESS_FROM = 1024  # bytes of JSON: smaller blocks stay plain text


class OurFile:
    """Our store on a new file with the given page size, written as the loop commits."""

    def __init__(self, path: Path, page_size: int):
        from dayflow_tui.store import open_store

        self.path, self.page_size = path, page_size
        # A new file's page size is fixed by its first write; WAL mode is that first write here.
        conn = sqlite3.connect(str(path))
        conn.execute(f"PRAGMA page_size = {page_size}")
        conn.execute("PRAGMA journal_mode = wal")
        conn.close()
        path.chmod(0o600)
        store = open_store(path)
        if store.db.execute_sql("PRAGMA page_size").fetchone()[0] != page_size:
            raise RuntimeError(f"{path}: page size {page_size} did not take")
        self.empty = settled_bytes(path)
        self.run_id = store.create_run("Prepare my day.", model="offline", max_steps=STEPS + 1).id
        store.close()
        self.times: list[float] = []
        self.reads: list[float] = []

    def steps(self, numbers: range) -> None:
        """Commit steps ``numbers`` (the reply, then its tool results: two transactions each)."""
        from dayflow_tui.store import open_store

        store = open_store(self.path, create=False)  # one open store per process at a time (Peewee binding)
        for i in numbers:
            assistant, results = agent_step(i)
            started = time.perf_counter()
            store.append_step(self.run_id, loop_step_record(i, assistant))
            store.set_tool_results(self.run_id, i, results)
            self.times.append(time.perf_counter() - started)
        store.close()

    def read_history(self) -> None:
        """What a resume reads: every step's blocks, decoded (a fresh connection each time)."""
        from dayflow_tui.store import open_store

        store = open_store(self.path, create=False)
        started = time.perf_counter()
        for step in store.replay_steps(self.run_id):
            json.loads(step.assistant), json.loads(step.tool_results)
        self.reads.append(time.perf_counter() - started)
        store.close()


def ours(tmp: Path) -> dict[int, tuple[float, float, float]]:
    """Per page size: (bytes/step, median commit time of a step, median history read), interleaved in chunks."""
    files = [OurFile(tmp / f"ours-{page}.db", page) for page in PAGE_SIZES]
    chunk = 50
    for k, first in enumerate(range(1, STEPS + 1, chunk)):
        for f in (files if k % 2 else files[::-1]):  # alternate who goes first: machine noise hits all alike
            f.steps(range(first, min(first + chunk, STEPS + 1)))
    for r in range(scale(23, 3)):  # the reads are short: many rounds, or load decides the ratio
        for f in (files if r % 2 else files[::-1]):
            f.read_history()
    return {f.page_size: ((settled_bytes(f.path) - f.empty) / STEPS, median(f.times), median(f.reads[2:]))
            for f in files}


class Codec:
    def __init__(self, name: str):
        self.name = name
        if name == "zstd":
            import zstandard

            self._c, self._d = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
            self.compress, self.decompress = self._c.compress, self._d.decompress
        else:
            self.compress, self.decompress = (lambda b: zlib.compress(b, 6)), zlib.decompress


def compressed(path: Path, codec: Codec) -> tuple[float, float, float]:
    """Ours with large tool results compressed: (bytes/step, compress s/step, decompress s/step)."""
    from dayflow_tui.store import dumps

    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode = wal")
    conn.execute("PRAGMA synchronous = full")
    conn.execute("CREATE TABLE steps (run_id TEXT NOT NULL, n INTEGER NOT NULL, stop_reason TEXT, assistant TEXT "
                 "NOT NULL, tool_results BLOB, input_tokens INTEGER, output_tokens INTEGER, cache_creation_input_tokens "
                 "INTEGER, cache_read_input_tokens INTEGER, model TEXT, duration_ms INTEGER, request_est_tokens "
                 "INTEGER, compacted_est_tokens INTEGER, created_at TEXT NOT NULL, tools_done_at TEXT, raw TEXT, "
                 "PRIMARY KEY (run_id, n))")
    conn.close()
    empty = settled_bytes(path)
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA synchronous = full")
    packing = []
    stamp = "2026-12-02T08:00:00.000000Z"
    for i in range(1, STEPS + 1):
        assistant, results = agent_step(i)
        record = loop_step_record(i, assistant)
        conn.execute("INSERT INTO steps VALUES (?,?,?,?,NULL,?,?,?,?,?,?,?,NULL,?,NULL,?)",
                     ("bench0000000", i, record.stop_reason, dumps(assistant), record.input_tokens,
                      record.output_tokens, 0, record.cache_read_input_tokens, record.model, record.duration_ms,
                      record.request_est_tokens, stamp, record.raw))
        started = time.perf_counter()
        text = dumps(results).encode()
        value = codec.compress(text) if len(text) >= COMPRESS_FROM else text.decode()
        packing.append(time.perf_counter() - started)
        conn.execute("UPDATE steps SET tool_results = ?, tools_done_at = ? WHERE run_id = ? AND n = ?",
                     (value, stamp, "bench0000000", i))
    blobs = [row[0] for row in conn.execute("SELECT tool_results FROM steps ORDER BY n")]
    conn.close()
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for blob in blobs:
            if isinstance(blob, bytes):
                codec.decompress(blob)
        rounds.append((time.perf_counter() - started) / len(blobs))
    return (settled_bytes(path) - empty) / STEPS, median(packing), median(rounds)


def agents_sdk_items(i: int) -> tuple[list[dict], list[dict]]:
    """Step ``i`` as the Agents SDK's runner stores it: Responses API input items."""
    assistant, results = agent_step(i)
    text, call = assistant
    message = {"id": f"msg_bench{i:06d}", "content": [{"annotations": [], "text": text["text"], "type": "output_text",
                                                       "logprobs": []}],
               "role": "assistant", "status": "completed", "type": "message"}
    function_call = {"arguments": json.dumps(call["input"]), "call_id": call["id"], "name": call["name"],
                     "type": "function_call", "id": f"fc_bench{i:06d}", "status": "completed"}
    output = {"call_id": call["id"], "output": results[0]["content"], "type": "function_call_output"}
    return [message, function_call], [output]


def agents_sdk(path: Path) -> tuple[float, list[float]]:
    from agents.memory import SQLiteSession

    session = SQLiteSession("bench", str(path))  # WAL, SQLite's default synchronous (FULL)
    empty = settled_bytes(path)
    times = []

    async def fill():
        await session.add_items([{"role": "user", "content": "Prepare my day."}])
        for i in range(1, STEPS + 1):
            reply, outputs = agents_sdk_items(i)
            started = time.perf_counter()
            await session.add_items(reply)
            await session.add_items(outputs)
            times.append(time.perf_counter() - started)

    asyncio.run(fill())
    session.close()
    return (settled_bytes(path) - empty) / STEPS, times


def raw_json_per_step() -> float:
    """The step's stored text: its blocks, its tool results and the reply's envelope (``raw``)."""
    from dayflow_tui.store import dumps

    total = 0
    for i in range(1, STEPS + 1):
        assistant, results = agent_step(i)
        total += len(dumps(assistant).encode()) + len(dumps(results).encode()) + \
            len(loop_step_record(i, assistant).raw.encode())
    return total / STEPS


def langgraph_per_step(tmp: Path) -> float | None:
    try:
        from bench.bench_growth import side_by_side
    except ModuleNotFoundError:
        return None
    try:
        return side_by_side(STEPS, tmp)["langgraph"][0] / STEPS
    except ModuleNotFoundError:
        return None


def run(quick: bool = False) -> list[Row]:
    rows = []
    with workdir("bytes") as tmp:
        theirs, _their_t = agents_sdk(tmp / "agents.db")
        found = ours(tmp)
        packed = {name: compressed(tmp / f"{name}.db", Codec(name)) for name in ("zstd", "zlib")}
        langgraph = None if quick else langgraph_per_step(tmp)
    json_bytes = raw_json_per_step()
    _bytes, base_t, base_read = found[4096]
    for page in PAGE_SIZES:
        per_step, commit, read = found[page]
        shipped = page == SHIPPED_PAGE_SIZE
        rows.append(Row("9 bytes", f"ours, {page // 1024} KB pages{' (new files: shipped)' if shipped else ''}, "
                        f"bytes/step at {STEPS} steps", f"{size(per_step)} ({per_step:,.0f} B)",
                        f"Agents SDK SQLiteSession {size(theirs)} ({theirs:,.0f} B)", per_step / theirs,
                        "<= 1.0x" if shipped else "", per_step <= theirs if shipped else None,
                        f"step commit {ms(commit)} ({commit / base_t:.2f}x), read of the history "
                        f"{ms(read)} ({read / base_read:.2f}x) vs 4 KB pages"))
    for name, (per_step, pack_s, unpack_s) in packed.items():
        rows.append(Row("9 bytes", f"ours, tool results >= {COMPRESS_FROM} B as {name} (format change, not shipped)",
                        size(per_step), f"Agents SDK SQLiteSession {size(theirs)}", per_step / theirs, "", None,
                        f"+{ms(pack_s)} to compress a step; +{ms(unpack_s * 1000)} to decompress 1,000 steps"))
    rows.append(Row("9 bytes", "Agents SDK SQLiteSession, bytes/step (3 items/step)", size(theirs), "", None, "",
                    None, "add_items after the reply and after the tools; WAL, synchronous FULL"))
    if langgraph is not None:
        rows.append(Row("9 bytes", "LangGraph SqliteSaver, bytes/step at 400 steps", size(langgraph),
                        f"Agents SDK SQLiteSession {size(theirs)}", langgraph / theirs, "", None, ""))
    rows.append(Row("9 bytes", "the step's JSON text (blocks + tool results + reply envelope)", size(json_bytes),
                    f"Agents SDK SQLiteSession {size(theirs)}", json_bytes / theirs, "", None, "the uncompressed floor"))
    return rows


if __name__ == "__main__":
    from bench.run_all import table

    print(table(run()))
