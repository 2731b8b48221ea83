"""Full-text search over every run: the query language (``query``) and what a run's places and words are (``text``).

The index itself lives with the store (``store/search.py``); front ends parse
a query here, ask ``Store.search`` and render its hits.
"""
