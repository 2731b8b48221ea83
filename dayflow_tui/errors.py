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


class RateLimited(ModelCallFailed):
    """The model API pushed back (429 rate limited, 529 overloaded) past the SDK's own retries.

    Not a failure of the run: it is released ``queued`` until ``wait_s`` has passed (``agent.backpressure``),
    its attempt not counted. ``EX_TEMPFAIL``: try again later.
    """

    exit_code = 75

    def __init__(self, message: str, *, status: int, wait_s: float, run_id: str | None = None):
        super().__init__(message)
        self.status = status
        self.wait_s = wait_s
        self.run_id = run_id


class UsageError(DayflowError):
    """A command line, setting or input that cannot be used (``EX_USAGE``); nothing was written."""

    exit_code = 64
