"""Tests of the store (``dayflow_tui.store``); ``contract/`` is its conformance suite, one file per verb."""
