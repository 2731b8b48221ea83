"""Configuration at the bottom of Dayflow: the parsers of typed values (``values``) that flags and the settings
file share.

Nothing in ``config`` imports the rest of Dayflow (only ``clock``, a leaf over the standard library), and
this file imports nothing, so reading a value pays for nothing else.
"""
