"""``dayflow-tui``: the Textual dashboard over the views, the agent and the store."""
