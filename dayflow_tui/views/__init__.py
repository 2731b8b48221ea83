"""What the two front ends show, read once: frozen read models with no Textual in them.

The ``dayflow`` printers and the dashboard's screens read runs, a
transcript, search results, tasks, the fork tree, costs and times through
the functions here, and get frozen dataclasses back. The dashboard calls
them on its reader thread or in thread workers, never on the UI thread; the
CLI calls them directly. Actions (resume, decide, fork) are not here: they
go to ``agent`` or the store.

Nothing is imported here, so ``import dayflow_tui.views.time`` stays light
(the CLI's start-up imports are measured).
"""
