"""Errors the front ends turn into one clear line and a non-zero exit."""


class DayflowError(Exception):
    """A failure the user can act on; its message is one line, safe to print."""

    exit_code = 1


class StoreError(DayflowError):
    """The database cannot be opened, read or written."""

    exit_code = 2


class RunNotFound(DayflowError):
    exit_code = 3


class RunBusy(DayflowError):
    """Another live process owns the run."""

    exit_code = 4


class ModelCallFailed(DayflowError):
    """The model API failed after the SDK's own retries; the run stays resumable."""

    exit_code = 5


class UsageError(DayflowError):
    """A command line, setting or input that cannot be used (``EX_USAGE``); nothing was written."""

    exit_code = 64
