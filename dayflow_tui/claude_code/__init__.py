"""Claude Code's session files (``~/.claude/projects/<slug>/<session>.jsonl``) read as steps.

``sessions`` is a pure reader: bytes in, steps out, the standard library only. It imports nothing of the
store; the store writes what it reads through its own verbs (``Store.imported_file``,
``Store.append_imported``).
"""
