"""Widgets the screens are built from. None of them runs SQL: they call the store."""
