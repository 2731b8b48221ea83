"""The package version, in a leaf module: the root package re-exports it, nothing inside imports the root."""

__version__ = "0.1.0"
