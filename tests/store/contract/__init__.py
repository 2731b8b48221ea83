"""The store's contract: one file per verb of ``Store``, each run on SQLite and PostgreSQL by the ``store`` fixture.

Laid out like LangGraph's checkpoint conformance suite: every file states what any backend must do
(required), and a capability a backend may lack (FTS5 in a SQLite build) is detected and skipped with
its reason. ``test_every_verb_has_a_contract.py`` keeps the list whole as ``Store`` grows.
"""
