"""The store's verbs as plain functions, one module per table or job; ``api.Store`` calls them.

Each function takes the open store (``handle.StoreHandle``) as its first
argument. The ones a caller may run on their own carry ``retry.store_call``
(the reconnect policy); the helpers named here without it run inside a
caller's call. Nothing here imports ``api``: a module gets what it needs as
arguments or from the modules below (``models``, ``leases``, ``retry``,
``status``, ``search.index``). This file re-exports nothing.
"""
