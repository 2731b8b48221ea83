"""Dayflow's benchmarks: ``python -m bench`` runs them all and prints one table.

Not part of the test suite (pytest collects ``tests/`` only). Every figure is
a ratio against a baseline measured in the same run, on the same machine.
"""
