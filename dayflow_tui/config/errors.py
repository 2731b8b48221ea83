"""Every error the front ends turn into one clear line and a non-zero exit, with its exit code.

Every kind is here, so what ``dayflow`` exits with can be read in one place (anything else is an
internal error, exit 70); the modules that raise them import them from here. By exit code:

- 1: ``DayflowError`` (the default), ``AgentNotFound``, ``AgentChanged``
- 2: ``StoreError``, ``HistoryError``, ``SchemaAhead`` (``dayflow worker`` exits 78, ``EX_CONFIG``, for it)
- 3: ``RunNotFound``
- 4: ``RunBusy``, ``DecisionRefused``, ``RunCancelled``, ``CancelRefused``, ``ReadOnlyRun``
- 5: ``ModelCallFailed``
- 64 (``EX_USAGE``): ``UsageError``, ``SettingsError``, ``QueryError``, ``ArchiveError``, ``OtelMissing``, ``MetricsMissing``, ``NoSuchFile``, ``BadOtlpRequest``

One cause, one code, whatever the command: a file or directory a person named that is not there
(``--db``'s file or its directory, ``import``'s JSONL, ``run``'s agent file) is ``NoSuchFile``, 64.
- 75 (``EX_TEMPFAIL``, try again later): ``RateLimited``, ``ReplySpooled``, ``StreamBroken``, ``McpUnavailable``
"""


class DayflowError(Exception):
    """A failure the user can act on; its message is one line, safe to print."""

    exit_code = 1


class StoreError(DayflowError):
    """The database cannot be opened, read or written."""

    exit_code = 2


class SchemaAhead(StoreError):
    """The database is at a schema newer than this Dayflow's: a newer Dayflow migrated it (a rolling upgrade).

    A command exits 2 as for any database it cannot serve; ``dayflow worker`` exits ``WORKER_EXIT`` (78,
    EX_CONFIG), at start or when it notices mid-life, so a supervisor can tell "upgrade me" from a crash
    (systemd: ``RestartPreventExitStatus=78``) instead of restarting the old version in a loop."""

    WORKER_EXIT = 78

    def __init__(self, label: str, found: int, known: int):
        super().__init__(f"{label}: the database is at schema {found}, newer than this Dayflow's {known} "
                         f"(a newer Dayflow migrated it); upgrade dayflow-tui")
        self.found, self.known = found, known


class RunNotFound(DayflowError):
    exit_code = 3


class RunBusy(DayflowError):
    """Another live process owns the run."""

    exit_code = 4


class ReadOnlyRun(DayflowError):
    """The run was imported (a Claude Code session): it is never resumed, forked, decided or cancelled here;
    the message says how to go on with it where it came from. Nothing was written."""

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


class StreamBroken(DayflowError):
    """A reply's stream ended before ``message_stop`` (the connection dropped, an ``overloaded_error`` event):
    no reply came, so none is committed. A failed attempt: the run backs off and is tried again, at most
    ``max_attempts`` times. ``error_type`` is the API's error type when the stream said why, else None.
    """

    exit_code = 75

    def __init__(self, message: str, *, error_type: str | None = None):
        super().__init__(message)
        self.error_type = error_type


class McpUnavailable(DayflowError):
    """An MCP server could not answer a call (it died, hung past its timeout, would not start): not the tool's
    outcome but a failed attempt; the run backs off and is tried again with a fresh server (exit 75)."""

    exit_code = 75


class UsageError(DayflowError):
    """A command line, setting or input that cannot be used (``EX_USAGE``); nothing was written."""

    exit_code = 64


class NoSuchFile(UsageError):
    """A file (or the directory of one) named on the command line or in a setting is not there; nothing was
    created. The same code for every command (``EX_USAGE``)."""


class SettingsError(UsageError):
    """A setting's value cannot be used (a bad number, an unreadable config file)."""


class HistoryError(StoreError):
    """The stored history cannot be sent to the API; nothing was changed (exit 2, a database problem)."""


class ReplySpooled(StoreError):
    """A paid reply is safe in the spool file; the run continues from it on this host."""

    exit_code = 75  # EX_TEMPFAIL: try again later, nothing was lost


class AgentNotFound(DayflowError):
    """An agent that cannot be loaded: one line, exit 1, nothing changed."""

    exit_code = 1


class AgentChanged(DayflowError):
    """The agent's code changed since the run started: a resume says what, and needs --allow-changed-agent."""

    exit_code = 1


class OtelMissing(DayflowError):
    """The OpenTelemetry SDK is not installed (the ``otel`` extra)."""

    exit_code = 64


class BadOtlpRequest(DayflowError):
    """An OTLP request ``dayflow collect`` cannot take (malformed, too large, an unknown encoding): answered
    with its HTTP status (``status``) and one line; nothing of it is kept. Never ends the receiver, so its
    exit code is never used."""

    exit_code = 64

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class MetricsMissing(DayflowError):
    """Prometheus metrics were asked for, and prometheus-client is not installed (the ``metrics`` extra)."""

    exit_code = 64


class QueryError(UsageError):
    """A search query that cannot be used; the message says why, in one line."""


class ArchiveError(UsageError):
    """A JSONL file that cannot be imported; the message names the line. Nothing was written."""


class DecisionRefused(DayflowError):
    """A decision that cannot be taken: decided already, nothing waits, the arguments changed."""

    exit_code = 4


class RunCancelled(DayflowError):
    """The run was cancelled (``dayflow cancel``): it is never claimed or resumed again; a fork of it may run."""

    exit_code = 4


class CancelRefused(DayflowError):
    """A cancel that cannot be taken: the run has ended already (done, failed, budget, cancelled)."""

    exit_code = 4
