"""Claude Code session files, written to the shapes real ones have, for ``dayflow import --claude-code``.

Claude Code publishes no schema for ``~/.claude/projects/<slug>/<session>.jsonl``. Each record below follows
what public projects that read these files document (cited at each fixture); every fixture says which shapes
it covers. ``write_projects(root)`` lays them out as Claude Code does::

    root/-home-ana-shop/11111111-2222-4333-8444-555555555555.jsonl          the session (SESSION)
    root/-home-ana-shop/11111111-2222-4333-8444-555555555555/subagents/agent-a7f3c2.jsonl   a subagent
    root/-home-ana-notes/not-claude.jsonl                                  another program's JSONL
"""

from __future__ import annotations

import json
from pathlib import Path

SESSION = "11111111-2222-4333-8444-555555555555"
SLUG = "-home-ana-shop"
CWD = "/home/ana/shop"
BRANCH = "feature/cart"
MODEL = "claude-sonnet-4-5-20250929"
SUBAGENT = "a7f3c2"

# The fields every user/assistant/system record carries.
# Shape: yongkangc/claude-ui knowledge/example-cc-config-folder.md (parentUuid, isSidechain, userType, cwd,
# sessionId, version, type, message, uuid, timestamp); Huntehhh/claude-code-chat docs/claude-cli-jsonl-format.md
# (gitBranch, requestId on assistant records, thinkingMetadata on user records).


def _base(uuid: str, parent: str | None, kind: str, ts: str, *, sidechain: bool = False, **extra) -> dict:
    record = {"parentUuid": parent, "isSidechain": sidechain, "userType": "external", "cwd": CWD,
              "sessionId": SESSION, "version": "2.0.14", "gitBranch": BRANCH, "type": kind, "uuid": uuid,
              "timestamp": ts}
    record.update(extra)
    return record


def _usage(inp: int, out: int, write: int, read: int, hour: int = 0) -> dict:
    # Usage shape: tokentop (ClaudeCodeUsageInfo: input/output/cache_creation_input/cache_read_input tokens,
    # cache_creation.ephemeral_5m/1h_input_tokens, service_tier), and Huntehhh/claude-code-chat's "Usage Object".
    return {"input_tokens": inp, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": write - hour, "ephemeral_1h_input_tokens": hour},
            "output_tokens": out, "service_tier": "standard"}


def _assistant(uuid: str, parent: str, ts: str, message_id: str, block: dict, usage: dict, *,
               stop: str | None = None, sidechain: bool = False, **extra) -> dict:
    # One record per content block, the records of one message sharing message.id and its usage.
    # Shape: Huntehhh/claude-code-chat docs/claude-cli-jsonl-format.md ("assistant": message.model, id, role,
    # content, stop_reason "end_turn"|null, usage; requestId), tokentop ClaudeCodeAssistantMessage.
    return _base(uuid, parent, "assistant", ts, sidechain=sidechain, requestId=f"req_{message_id[-6:]}",
                 message={"id": message_id, "type": "message", "role": "assistant", "model": MODEL,
                          "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage},
                 **extra)


def _result(uuid: str, parent: str, ts: str, tool_use_id: str, content, *, sidechain: bool = False,
            is_error: bool = False, **extra) -> dict:
    # A user record carrying a tool_result block (and toolUseResult beside it).
    # Shape: Huntehhh/claude-code-chat docs/claude-cli-jsonl-format.md (tool_result: tool_use_id, content),
    # alignment-hive docs/sessions/session-8-jsonl-format.md ("user": user messages and tool results).
    block = {"tool_use_id": tool_use_id, "type": "tool_result", "content": content}
    if is_error:
        block["is_error"] = True
    return _base(uuid, parent, "user", ts, sidechain=sidechain, message={"role": "user", "content": [block]},
                 toolUseResult={"stdout": content if isinstance(content, str) else "", "stderr": ""}, **extra)


# The session. Covers: summary, file-history-snapshot (bookkeeping), a string prompt, an assistant message
# written as three records (thinking, text, tool_use) with one message.id, its tool_result, an end_turn
# text, a prompt with a list of blocks, a Task call whose subagent runs inline as a sidechain (isSidechain,
# its own prompt, tool_use, tool_result and answer), the Task's result, a compaction boundary, a message
# after it, an api_error system record, and a record type Dayflow does not know.
def session_records() -> list[dict]:
    thinking_usage = _usage(3, 412, 5120, 12000, hour=1024)
    return [
        # summary: Huntehhh/claude-code-chat ("summary","leafUuid"), yongkangc/claude-ui (first line of a file).
        {"type": "summary", "summary": "Fix the cart total rounding", "leafUuid": "u-0009"},
        # file-history-snapshot: Huntehhh/claude-code-chat, chrisguillory/claude-session-mcp CLAUDE.md.
        {"type": "file-history-snapshot", "messageId": "u-0001", "isSnapshotUpdate": False,
         "snapshot": {"messageId": "u-0001", "trackedFileBackups": {}, "timestamp": "2025-10-01T09:00:00.000Z"}},
        # A prompt as a string: yongkangc/claude-ui ("content": "Please help me add a new config file ...").
        _base("u-0001", None, "user", "2025-10-01T09:00:00.000Z",
              message={"role": "user", "content": "The cart total is off by a cent; find out why"},
              thinkingMetadata={"level": "high", "disabled": False, "triggers": []}),
        _assistant("u-0002", "u-0001", "2025-10-01T09:00:04.100Z", "msg_01AAAAAAAAAAAAAAAAAAAAAA",
                   {"type": "thinking", "thinking": "Totals are summed as floats, probably.",
                    "signature": "EqQBCkYIBRgCKkB0c2lnbmF0dXJl"}, thinking_usage),
        _assistant("u-0003", "u-0002", "2025-10-01T09:00:04.900Z", "msg_01AAAAAAAAAAAAAAAAAAAAAA",
                   {"type": "text", "text": "Let me look at how the total is computed."}, thinking_usage),
        _assistant("u-0004", "u-0003", "2025-10-01T09:00:05.300Z", "msg_01AAAAAAAAAAAAAAAAAAAAAA",
                   {"type": "tool_use", "id": "toolu_01BASH", "name": "Bash",
                    "input": {"command": "grep -rn total cart/", "description": "Find the total"}},
                   thinking_usage, stop="tool_use"),
        _result("u-0005", "u-0004", "2025-10-01T09:00:06.000Z", "toolu_01BASH",
                "cart/total.py:12:    return sum(float(p) for p in prices)"),
        _assistant("u-0006", "u-0005", "2025-10-01T09:00:09.000Z", "msg_01BBBBBBBBBBBBBBBBBBBBBB",
                   {"type": "text", "text": "The total sums floats: use Decimal for the kumquat prices."},
                   _usage(5, 96, 0, 17512), stop="end_turn"),
        # A prompt as a list of blocks (Huntehhh/claude-code-chat: "content":[...]).
        _base("u-0007", "u-0006", "user", "2025-10-01T09:01:00.000Z",
              message={"role": "user", "content": [{"type": "text", "text": "Ask a subagent to check the tests"}]}),
        _assistant("u-0008", "u-0007", "2025-10-01T09:01:03.000Z", "msg_01CCCCCCCCCCCCCCCCCCCCCC",
                   {"type": "tool_use", "id": "toolu_01TASK", "name": "Task",
                    "input": {"description": "Check tests", "prompt": "Which tests cover the total?",
                              "subagent_type": "general-purpose"}}, _usage(4, 80, 300, 17600), stop="tool_use"),
        # The subagent's conversation inline (isSidechain: true; the older layout, no agentId):
        # alignment-hive docs/sessions/session-8-jsonl-format.md, alicoding/claude-parser docs/JSONL-STRUCTURE.md.
        _base("s-0001", None, "user", "2025-10-01T09:01:04.000Z", sidechain=True,
              message={"role": "user", "content": "Which tests cover the total?"}),
        _assistant("s-0002", "s-0001", "2025-10-01T09:01:06.000Z", "msg_01SSSSSSSSSSSSSSSSSSSSSS",
                   {"type": "tool_use", "id": "toolu_01GREP", "name": "Grep", "input": {"pattern": "def test_total"}},
                   _usage(6, 40, 2000, 0), stop="tool_use", sidechain=True),
        _result("s-0003", "s-0002", "2025-10-01T09:01:07.000Z", "toolu_01GREP",
                [{"type": "text", "text": "tests/test_cart.py:3:def test_total_of_quince():"}], sidechain=True),
        _assistant("s-0004", "s-0003", "2025-10-01T09:01:09.000Z", "msg_01TTTTTTTTTTTTTTTTTTTTTT",
                   {"type": "text", "text": "Only test_total_of_quince covers it."}, _usage(8, 30, 0, 2100),
                   stop="end_turn", sidechain=True),
        _result("u-0009", "u-0008", "2025-10-01T09:01:10.000Z", "toolu_01TASK",
                [{"type": "text", "text": "Only test_total_of_quince covers it."}]),
        # Compaction: chrisguillory/claude-session-mcp CLAUDE.md (system, subtype compact_boundary, content,
        # compactMetadata {trigger, preTokens}, logicalParentUuid); microsoft/amplifier ai_working/claude_code_logging.
        _base("u-0010", None, "system", "2025-10-01T09:30:00.000Z", subtype="compact_boundary",
              content="Conversation compacted", isMeta=False, level="info", logicalParentUuid="u-0009",
              compactMetadata={"trigger": "auto", "preTokens": 155321}),
        _assistant("u-0011", "u-0010", "2025-10-01T09:30:05.000Z", "msg_01DDDDDDDDDDDDDDDDDDDDDD",
                   {"type": "text", "text": "Compacted; the fix is in cart/total.py."}, _usage(9, 20, 4000, 0),
                   stop="end_turn"),
        # api_error: chrisguillory/claude-session-mcp CLAUDE.md (system subtypes: api_error with retryInMs...).
        _base("u-0012", "u-0011", "system", "2025-10-01T09:31:00.000Z", subtype="api_error", level="error",
              error={"status": 529}, retryInMs=2000, retryAttempt=1, maxRetries=10),
        # A record type from a later Claude Code: kept as raw JSON.
        _base("u-0013", "u-0012", "x-future-record", "2025-10-01T09:32:00.000Z", payload={"quokka": 7}),
    ]


# Appended by the incremental test: a new prompt, a tool call and its result, then the reply.
def appended_records() -> list[dict]:
    return [
        _base("u-0014", "u-0013", "user", "2025-10-01T10:00:00.000Z",
              message={"role": "user", "content": "Now run the tests for the wombat checkout"}),
        _assistant("u-0015", "u-0014", "2025-10-01T10:00:03.000Z", "msg_01EEEEEEEEEEEEEEEEEEEEEE",
                   {"type": "tool_use", "id": "toolu_01TEST", "name": "Bash", "input": {"command": "pytest -q"}},
                   _usage(3, 50, 100, 18000), stop="tool_use"),
        _result("u-0016", "u-0015", "2025-10-01T10:00:09.000Z", "toolu_01TEST", "3 passed", is_error=False),
        _assistant("u-0017", "u-0016", "2025-10-01T10:00:12.000Z", "msg_01FFFFFFFFFFFFFFFFFFFFFF",
                   {"type": "text", "text": "All three wombat tests pass."}, _usage(4, 12, 0, 18200), stop="end_turn"),
    ]


# A subagent in its own file, <session>/subagents/agent-<agentId>.jsonl, every record isSidechain with an
# agentId: 23min/copilot-lens docs/research/claude-code-sessions.md ("Subagent files ... Same JSONL format as
# main session, but with isSidechain: true and an agentId field").
def subagent_records() -> list[dict]:
    return [
        _base("a-0001", None, "user", "2025-10-01T09:05:00.000Z", sidechain=True, agentId=SUBAGENT,
              message={"role": "user", "content": "List the files that import cart.total"}),
        _assistant("a-0002", "a-0001", "2025-10-01T09:05:02.000Z", "msg_01GGGGGGGGGGGGGGGGGGGGGG",
                   {"type": "text", "text": "checkout.py and invoice.py import it (platypus)."},
                   _usage(10, 25, 1500, 0), stop="end_turn", sidechain=True, agentId=SUBAGENT),
    ]


# Another program's JSONL (not Claude Code's): one clear line, nothing imported.
FOREIGN = [{"event": "login", "user": "ana", "at": "2025-10-01T09:00:00Z"}, {"event": "logout", "user": "ana"}]


def line(record) -> bytes:
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def write_records(path: Path, records: list, *, append: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab" if append else "wb") as fh:
        for record in records:
            fh.write(line(record))


def session_path(root: Path) -> Path:
    return root / SLUG / f"{SESSION}.jsonl"


def subagent_path(root: Path) -> Path:
    return root / SLUG / SESSION / "subagents" / f"agent-{SUBAGENT}.jsonl"


def write_projects(root: Path) -> Path:
    write_records(session_path(root), session_records())
    write_records(subagent_path(root), subagent_records())
    write_records(root / "-home-ana-notes" / "not-claude.jsonl", FOREIGN)
    return root
