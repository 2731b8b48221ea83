"""The agent side: the loop, the messages it sends, tools, compaction, the offline model and workers.

Built on the store (``dayflow_tui.store``); knows nothing of any front end.
"""
