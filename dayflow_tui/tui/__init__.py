"""``dayflow-tui``: the Textual dashboard over the store and the loop."""
