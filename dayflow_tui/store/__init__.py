"""The store: runs, steps, tasks and leases in one SQLite file or a PostgreSQL database.

``api`` holds ``Store`` (one explicit class of every verb) and ``open_store``;
each verb hands its work to a plain function in ``tables/`` (runs, steps,
tasks, claims, approvals, forks, spend, resumes). Below them: ``models``
(the tables), ``status`` (the one RunStatus vocabulary), ``schema``
(migrations as an ordered list), ``retry`` (the reconnect policy),
``leases`` (what a lease is and whether its owner lives), ``spool`` (paid
replies that could not be committed), ``search`` (the index), and
``dialect`` (everything that differs between SQLite and PostgreSQL). Every
public method turns a database failure into ``StoreError`` with one
readable line. The store knows nothing of the agent or any front end.
"""

from . import driver_imports  # first: Peewee is imported without the drivers SQLite never uses
from .dialect import is_url, safe_url
from .api import Store, default_db_path, open_store
from .leases import (COMMIT_WHILE_CONFIRMED_S, CONFIRM_AFTER_S, HEARTBEAT_EVERY_S, STALE_AFTER_S, this_host,
                     Lease, effective_status, holder, owner_alive, pid_alive, process_start_time, still_refused)
from .models import Run, Step, Task
from .retry import attempt_number, is_connection_error
from .schema import MIGRATIONS, SCHEMA_VERSION
from .sample_tasks import SEED_TASKS
from ..config.errors import ReplySpooled
from .spool import ingest_spool, pending_spool, spool_files, spool_reply
from .status import RESUMABLE, RunStatus
from .tables.steps import ReplayStep, StepRecord, dumps, step_blocks
from .tables.imported import is_imported, read_only_message, refuse_imported


def __getattr__(name: str):
    if name == "HOSTNAME":  # this host's name in leases, read from the settings when asked
        return this_host()
    if name == "CHANGE_SLOTS":  # PostgreSQL's: its dialect is imported only when asked
        from .dialect import postgres

        return postgres.CHANGE_SLOTS
    raise AttributeError(name)


__all__ = ["COMMIT_WHILE_CONFIRMED_S", "CONFIRM_AFTER_S", 
    "CHANGE_SLOTS", "HEARTBEAT_EVERY_S", "HOSTNAME", "MIGRATIONS", "RESUMABLE", "SCHEMA_VERSION", "SEED_TASKS",
    "STALE_AFTER_S", "this_host", "Lease", "ReplySpooled", "ReplayStep", "Run", "RunStatus", "Step", "StepRecord", "StoreHandle", "Task",
    "attempt_number", "default_db_path", "dumps", "effective_status", "holder", "ingest_spool",
    "is_connection_error", "is_imported", "is_url", "open_store", "owner_alive", "pending_spool", "pid_alive",
    "process_start_time", "read_only_message", "refuse_imported", "safe_url", "spool_files", "spool_reply", "step_blocks", "still_refused",
]
