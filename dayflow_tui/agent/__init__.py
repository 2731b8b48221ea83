"""The agent side: runs started, queued and resumed (``runs``), driven step by step (``driver``: call, commit,
tools), their limits (``budget``), the request and the call (``request``), what they tell the world (``events``),
tools, compaction, the offline model and workers.

Built on money and the store; knows nothing of any front end, nor of the trace export (``otel`` registers with
``events`` as a drive watcher).
"""
