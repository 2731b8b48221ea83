"""PostgreSQL: one database many hosts share, its clock, row locks, a tsvector search index.

psycopg is imported only here, and only when a URL is opened (``load_psycopg``).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence
from urllib.parse import parse_qsl, urlsplit

import peewee
from peewee import SQL, PostgresqlDatabase, fn

from ... import clock
from ...config.errors import StoreError
from ...search.query import Query, Term
from ...search.text import COLUMNS, Place, words
from ..deadline import try_deadline
from ..models import ChangeCounter, StoreMeta
from ..retry import store_call, try_time_left
from ..search.docs import DOCS, WEIGHTS, DocRow, IndexState, allowed_columns
from .base import ChangeFeed, Dialect
from .pg_changes import CHANGES_CHANNEL, PgChangeFeed
from .urls import safe_url

if TYPE_CHECKING:
    from ..handle import StoreHandle

# Rows of the PostgreSQL change counter (see models.ChangeCounter).
CHANGE_SLOTS = 16

# tsvector limits: 256 positions per lexeme, positions up to 16,383, 1 MB in all (kept well under).
_MAX_POSITIONS = 256
_MAX_POSITION = 16_383
_MAX_BYTES = 900_000

_loading = threading.Lock()


def load_psycopg() -> None:
    """Import psycopg 3 and give it to Peewee (once). ``ImportError`` when it is not installed.

    Peewee was imported with its drivers hidden (``store.driver_imports``);
    this mirrors Peewee's import-time block: the module globals its PostgreSQL
    adapter reads, and the transaction states it stores on the adapter class.
    """
    with _loading:
        if peewee.psycopg is not None:
            return
        import psycopg
        from psycopg.pq import TransactionStatus
        from psycopg.types.json import Json, Jsonb

        adapter = peewee.Psycopg3Adapter
        adapter.txn_idle = TransactionStatus.IDLE
        adapter.txn_inerror = TransactionStatus.INERROR
        adapter.txn_unknown = TransactionStatus.UNKNOWN
        peewee.TransactionStatus = TransactionStatus
        peewee.Json_pg3, peewee.Jsonb_pg3 = Json, Jsonb
        peewee.psycopg = psycopg  # last: Peewee picks the psycopg 3 adapter once this is set


def _keepalives() -> dict[str, int]:
    """libpq's TCP keepalives and ``tcp_user_timeout`` (the settings ``pg_keepalives_*``, ``pg_tcp_user_timeout_s``).

    Without them a connection into a network blackhole waits for the kernel's defaults (two hours of
    keepalive silence, then about 15 minutes of retransmissions) before it errors; with them a dead peer is
    found in about ``idle + interval * count`` seconds, and unacknowledged writes give up after
    ``tcp_user_timeout``. A setting of 0 leaves the OS default. The URL's own parameters win.
    """
    from ...config import settings

    config = settings.current()
    found: dict[str, int] = {}
    if config.pg_keepalives_idle_s:
        found.update(keepalives=1, keepalives_idle=config.pg_keepalives_idle_s,
                     keepalives_interval=config.pg_keepalives_interval_s or 10,
                     keepalives_count=config.pg_keepalives_count or 3)
    if config.pg_tcp_user_timeout_s:
        found["tcp_user_timeout"] = config.pg_tcp_user_timeout_s * 1000
    return found


def _server_keepalives() -> dict[str, int]:
    """The same on the server's side of each session, so the server, too, ends a session whose client went
    silent (a blackhole left 60+ stalled backends open while workers opened new ones: issue #29)."""
    client = _keepalives()
    names = {"keepalives_idle": "tcp_keepalives_idle", "keepalives_interval": "tcp_keepalives_interval",
             "keepalives_count": "tcp_keepalives_count", "tcp_user_timeout": "tcp_user_timeout"}
    return {names[key]: value for key, value in client.items() if key in names}


class _DayflowPostgres(PostgresqlDatabase):
    """PostgreSQL with one session setting Dayflow relies on.

    Dayflow never keeps a transaction open across a model call, so a session
    idle inside a transaction for a minute is a stalled client (paused, cut
    off): the server ends it and its row locks go, instead of a run's lease
    being stuck behind them.
    """

    idle_in_transaction_timeout = "60s"

    def __init__(self, *args: Any, schema: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # Each thread's open connection, so the deadline watchdog (another thread) can cut a stalled one.
        self.thread_connections: dict[int, Any] = {}
        # The schema setting: every transaction begins with SET LOCAL search_path (see begin).
        self.schema = schema
        self._set_schema = f'; SET LOCAL search_path TO "{schema}"' if schema else ""

    def begin(self, isolation_level=None):
        # As Peewee's BEGIN, with the schema set in the same round trip: a transaction-pooling PgBouncer hands
        # each transaction to any server session, so the schema must be set inside the transaction itself
        # (a session's SET, or the URL's options, would land on one server session and not follow).
        if not self._set_schema:
            return super().begin(isolation_level)
        with peewee.__exception_wrapper__:
            self.cursor().execute(f"{self._begin_sql(isolation_level)}{self._set_schema}")

    def execute_sql(self, sql, params=None):
        # With a schema, a statement outside a transaction gets one of its own: alone, it would run on whatever
        # search_path the pooled server session has.
        if not self._set_schema or self.transaction_depth() > 0:
            return super().execute_sql(sql, params)
        return self._lone_statement(sql, params)

    def _lone_statement(self, sql, params):
        """BEGIN; SET LOCAL search_path; the statement; COMMIT in one round trip: one simple query, the
        parameters bound on this side (psycopg's ClientCursor; simple queries may hold several statements),
        the cursor moved on to the statement's result. As a transaction of three round trips, a lone read
        cost 2.4 times the read (bench item 17)."""
        import psycopg

        self._log_query(sql, params)
        conn = self.connection()
        with peewee.__exception_wrapper__:
            cursor = psycopg.ClientCursor(conn)
            try:
                cursor.execute(f"{self._begin_sql()}{self._set_schema}; {sql}; COMMIT", params or ())
            except Exception:
                if not conn.closed and conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    conn.execute("ROLLBACK")  # the failed statement left its transaction open and aborted
                raise
            cursor.nextset()  # past BEGIN
            cursor.nextset()  # past SET LOCAL: the statement's own result
        return cursor

    def _begin_sql(self, isolation_level=None) -> str:
        level = self._adapter.isolation_level_str(isolation_level or self._isolation_level or "READ COMMITTED")
        return f"BEGIN TRANSACTION ISOLATION LEVEL {level}"

    def execute_outside_transaction(self, sql: str) -> None:
        """A statement that cannot run in a transaction block (VACUUM): its names are schema-qualified."""
        super().execute_sql(sql)

    def _connect(self):
        # As Peewee's, but a connection opened inside a store call's try waits no longer than the try has
        # left (libpq counts whole seconds, at least 2): a server that accepts nothing must not hold a
        # process that is tidying up after an error for the full connect timeout.
        self._adapter.check_driver()
        params = dict(self.connect_params)
        left = try_time_left()
        if left is not None and "connect_timeout" in params:
            params["connect_timeout"] = max(2, min(int(params["connect_timeout"]), math.ceil(left)))
        conn = self._adapter.connect(self, **params)
        if self._isolation_level:
            conn.set_isolation_level(self._isolation_level)
        conn.autocommit = True
        if self._set_schema:
            # A pooler in transaction mode (PgBouncer before 1.21) cannot keep a server-side prepared statement
            # between transactions: psycopg's automatic ones (the 5th run of a statement) would fail there.
            conn.prepare_threshold = None
        return conn

    def _initialize_connection(self, conn) -> None:
        super()._initialize_connection(conn)
        self.thread_connections[threading.get_ident()] = conn
        # One round trip for every session setting (the URL's own options win: they are in self.database).
        sets = [] if "idle_in_transaction_session_timeout" in self.database else [
            f"SET idle_in_transaction_session_timeout = '{self.idle_in_transaction_timeout}'"]
        sets += [f"SET {name} = {int(value)}" for name, value in _server_keepalives().items()
                 if name not in self.database]
        if sets:
            conn.execute("; ".join(sets))


# The database's clock as stored text (ISO-8601 UTC, milliseconds), so hosts with skewed clocks agree.
_PG_NOW = "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
# Keys tell apart the Dayflow schemas of one PostgreSQL database (one per search_path).
_MIGRATION_LOCK_CLASS = 0x0DA7F10


class PostgresDialect(Dialect):
    name = "postgres"
    title = "PostgreSQL"
    container = "database"
    foreign_tables_hint = " (give Dayflow its own schema: the schema setting, DAYFLOW_SCHEMA=dayflow)"
    vacuum_shrinks_files = False

    def __init__(self, url: str):
        from ...config import settings

        self.url = url
        self.label = safe_url(url)
        self.schema = settings.current().schema

    def connect(self) -> peewee.Database:
        try:
            load_psycopg()  # the optional extra "postgres"
        except ImportError:
            raise StoreError(f"{self.label}: PostgreSQL needs the psycopg driver: "
                             "pip install 'dayflow-tui[postgres]'") from None
        extra = self._connect_options("dayflow")
        # The URL goes to libpq as it is (every libpq parameter works, e.g. sslmode or
        # options=-csearch_path%3Dteam). The lease's compare-and-swap is reasoned for
        # READ COMMITTED, so that is pinned whatever the server's default.
        return _DayflowPostgres(self.url, prefer_psycopg3=True, isolation_level="READ COMMITTED", schema=self.schema,
                                **extra)

    def _connect_options(self, application_name: str) -> dict[str, Any]:
        """libpq parameters Dayflow adds to the URL's (which win): a connect timeout, a name, keepalives."""
        given = {key for key, _value in parse_qsl(urlsplit(self.url).query)}
        extra: dict[str, Any] = {}
        if "connect_timeout" not in given:
            extra["connect_timeout"] = 10
        if "application_name" not in given:
            extra["application_name"] = application_name
        extra.update({key: value for key, value in _keepalives().items() if key not in given})
        return extra

    def change_feed(self, on_change: Callable[[], None] | None = None) -> ChangeFeed:
        return PgChangeFeed(self.url, self.schema, self._connect_options("dayflow-listen"), on_change,
                            label=self.label)

    @property
    def short_label(self) -> str:
        parts = urlsplit(self.label)
        return f"{parts.path.lstrip('/') or 'postgres'}@{parts.hostname or 'localhost'}"

    @contextlib.contextmanager
    def write_transaction(self, db: peewee.Database) -> Iterator[None]:
        # READ COMMITTED (pinned at open); row locks order the writers.
        # The change counter is bumped last, so its row lock is held only for the commit.
        with db.atomic():
            yield
            slot = hash((os.getpid(), threading.get_ident())) % CHANGE_SLOTS
            # The same statement tells listeners (dashboards, show --follow on any host): PostgreSQL delivers
            # a NOTIFY only when its transaction commits, so a notice means a commit. The payload is the schema:
            # one database may hold several Dayflows, and the channel is the database's.
            db.execute_sql(f'UPDATE "{ChangeCounter._meta.table_name}" SET n = n + 1 WHERE slot = %s '
                           f"RETURNING pg_notify('{CHANGES_CHANNEL}', current_schema())", (slot,))

    def change_marker(self, db: peewee.Database) -> tuple:
        # A tiny table read; bumped inside every write transaction, so it moves exactly when one commits.
        return (int(ChangeCounter.select(fn.SUM(ChangeCounter.n)).scalar() or 0),)

    def skip_locked(self, query: peewee.ModelSelect) -> peewee.ModelSelect:
        return query.for_update(skip_locked=True)

    def locked_until_commit(self, query: peewee.ModelSelect) -> peewee.ModelSelect:
        return query.for_update()

    def rows_locked_suffix(self, table_alias: str) -> str:
        return f" FOR UPDATE OF {table_alias}"

    def try_deadline(self, db: peewee.Database, seconds: float) -> contextlib.AbstractContextManager[dict]:
        """A server that stops answering (no RST, no FIN) would hold this thread in ``recv`` for good."""
        caller = threading.get_ident()

        def caller_socket() -> int | None:
            conn = getattr(db, "thread_connections", {}).get(caller)
            if conn is None or conn.closed:
                return None
            return conn.pgconn.socket

        return try_deadline(seconds, caller_socket)

    def now(self) -> Any:
        # The fake clock (tests, screenshots) wins; otherwise every host stamps with the server's clock.
        return clock.iso() if clock.is_pinned() else SQL(_PG_NOW)

    def now_column(self) -> Any:
        return None if clock.is_pinned() else SQL(_PG_NOW)

    # -- schema ---------------------------------------------------------------------------------

    def schema_version(self, db: peewee.Database) -> int:
        if StoreMeta._meta.table_name not in db.get_tables():
            return 0
        row = StoreMeta.get_or_none(StoreMeta.key == "schema_version")
        return row.value if row is not None else 0

    def set_schema_version(self, db: peewee.Database, version: int) -> None:
        (StoreMeta.insert(key="schema_version", value=version)
         .on_conflict(conflict_target=[StoreMeta.key], update={StoreMeta.value: version}).execute())

    def schema_version_for_claim(self, db: peewee.Database) -> int:
        # The migration lock, shared: claims do not wait for each other, a migration waits for the claims in
        # flight, and a claim after it reads the new version. One round trip.
        row = db.execute_sql("SELECT pg_advisory_xact_lock_shared(%s, hashtext(current_schema())), "
                             "(SELECT value FROM dayflow_meta WHERE key = 'schema_version')",
                             (_MIGRATION_LOCK_CLASS,)).fetchone()
        return int(row[1] or 0)

    def lock_migrations(self, db: peewee.Database) -> None:
        # DDL is transactional here; this lock makes two first opens take turns.
        db.execute_sql("SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", (_MIGRATION_LOCK_CLASS,))

    def own_tables(self) -> tuple:
        return (StoreMeta, ChangeCounter)

    def after_create(self, db: peewee.Database) -> None:
        ChangeCounter.insert_many([{"slot": k, "n": 0} for k in range(CHANGE_SLOTS)]).on_conflict_ignore().execute()

    def widen_column(self, db: peewee.Database, table: str, column: str, sql_type: str) -> None:
        db.execute_sql(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE {sql_type}')

    # -- archives -------------------------------------------------------------------------------

    def begin_snapshot(self, db: peewee.Database) -> None:
        db.execute_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def lock_for_new_ids(self, db: peewee.Database, tables: Sequence[str]) -> None:
        # Ids are chosen by the caller, then written: no concurrent insert may take one in between.
        db.execute_sql(f"LOCK TABLE {_table_list(tables)} IN SHARE ROW EXCLUSIVE MODE")

    def after_explicit_ids(self, db: peewee.Database, tables: Sequence[str]) -> None:
        # An id written explicitly does not move its serial sequence; the next one is past them all.
        # Safe under lock_for_new_ids: no other insert holds a number from the sequence meanwhile.
        for table in tables:
            db.execute_sql(f"SELECT setval(pg_get_serial_sequence('\"{table}\"', 'id'), "
                           f"(SELECT COALESCE(MAX(id), 0) + 1 FROM \"{table}\"), false)")

    # -- sizes and vacuum -----------------------------------------------------------------------

    def octet_length(self, column: peewee.Field) -> peewee.Node:
        return fn.OCTET_LENGTH(column)

    def database_bytes(self, db: peewee.Database, tables: Sequence[str]) -> int:
        # The tables with their indexes and TOAST.
        return sum(int(db.execute_sql("SELECT pg_total_relation_size(%s)", (f'"{t}"',)).fetchone()[0])
                   for t in tables)

    def vacuum(self, store: "StoreHandle", tables: Sequence[str]) -> tuple[bool, bool]:
        """A plain ``VACUUM (ANALYZE)``, which blocks nobody (VACUUM FULL would lock the tables)."""
        _vacuum_analyze(store, tables)
        return False, True

    # -- the search index: a tsvector column with a GIN index ------------------------------------
    #
    # Built in Python from the same words as FTS5 (lexemes are not stemmed, positions keep phrases
    # exact); places told apart by the row's part and the lexeme's weight (search.docs.WEIGHTS).

    def search_index_state(self, db: peewee.Database) -> IndexState:
        has_table = db.execute_sql(f"SELECT to_regclass('\"{DOCS}\"') IS NOT NULL").fetchone()[0]
        return IndexState("tsvector" if has_table else None, bool(has_table))

    def create_search_tables(self, db: peewee.Database) -> None:
        db.execute_sql(
            f'CREATE TABLE IF NOT EXISTS "{DOCS}" (id BIGSERIAL PRIMARY KEY, '
            f'run_id TEXT NOT NULL REFERENCES "runs" ("id") ON DELETE CASCADE, n INTEGER NOT NULL, '
            f"part SMALLINT NOT NULL, body TEXT, doc TSVECTOR NOT NULL)")
        db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{DOCS}_doc" ON "{DOCS}" USING gin (doc)')
        db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{DOCS}_run_id_n" ON "{DOCS}" (run_id, n)')

    def clear_search_tables(self, db: peewee.Database) -> None:
        db.execute_sql(f'DELETE FROM "{DOCS}"')

    @contextlib.contextmanager
    def filling_search_index(self, db: peewee.Database):
        # Building a GIN index once over all rows is many times faster than growing it row by row.
        db.execute_sql(f'DROP INDEX IF EXISTS "{DOCS}_doc"')
        db.execute_sql("SET LOCAL maintenance_work_mem = '256MB'")
        yield
        db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{DOCS}_doc" ON "{DOCS}" USING gin (doc)')
        db.execute_sql(f'ANALYZE "{DOCS}"')

    def write_search_docs(self, db: peewee.Database, docs: Sequence[DocRow]) -> int:
        rows = []
        for run_id, n, part, body, places in docs:
            vector = _tsvector(part, places)
            if vector:
                rows.append((run_id, n, part, body, vector))
        if rows:
            # One statement for the batch (a round trip per row is most of a commit's cost here).
            values = ", ".join(["(%s, %s, %s, %s, %s::tsvector)"] * len(rows))
            db.execute_sql(f'INSERT INTO "{DOCS}" (run_id, n, part, body, doc) VALUES {values}',
                           [value for row in rows for value in row])
        return len(rows)

    def search_match(self, query: Query) -> tuple[str, str, str, list]:
        clause, params = _match(query)
        return f'FROM "{DOCS}" d', "d.id", clause, params


@store_call(cut_stalls=False)  # may rightly run long on a healthy server
def _vacuum_analyze(store: "StoreHandle", tables: Sequence[str]) -> None:
    schema = store.db.schema
    names = _table_list(tables) if not schema else ", ".join(f'"{schema}"."{t}"' for t in tables)
    store.db.execute_outside_transaction(f"VACUUM (ANALYZE) {names}")


def _table_list(tables: Sequence[str]) -> str:
    return ", ".join('"' + table + '"' for table in tables)


def _tsvector(part: int, places: dict[str, list[Place]]) -> str:
    """The tsvector literal of one row: every word with its positions and its place's weight.

    Places are a position apart, so a phrase never spans two of them.
    """
    weights = WEIGHTS[part]
    positions: dict[str, list[str]] = {}
    size = 0
    at = 0
    for column in COLUMNS:
        for place in places.get(column, ()):
            weight = weights[column]
            at += 1
            for word in words(place.text):
                at += 1
                seen = positions.get(word)
                if seen is None:
                    if size > _MAX_BYTES:
                        continue
                    seen = positions[word] = []
                    size += len(word.encode()) + 8
                if len(seen) < _MAX_POSITIONS:
                    seen.append(f"{min(at, _MAX_POSITION)}{weight}")
                    size += 2
    return " ".join(f"'{word}':{','.join(spots)}" for word, spots in positions.items())


def _tsquery_operand(term: Term, weights: str) -> str:
    suffix = (":" if term.prefix or weights else "") + ("*" if term.prefix else "") + weights
    operands = [f"'{word}'" + (suffix if i == len(term.words) - 1 else (":" + weights if weights else ""))
                for i, word in enumerate(term.words)]
    return "(" + " <-> ".join(operands) + ")"


def tsquery(query: Query, weights: str = "") -> str:
    """The tsquery text of ``query``'s terms, each lexeme limited to ``weights`` (e.g. "AB"; "" for any)."""
    parts = [_tsquery_operand(t, weights) for t in query.positive]
    parts += ["!" + _tsquery_operand(t, weights) for t in query.negative]
    return " & ".join(parts)


def _match(query: Query) -> tuple[str, list]:
    """The WHERE text: rows of the allowed parts whose words carry the allowed weights."""
    columns = set(allowed_columns(query))
    if columns == set(COLUMNS):
        return "d.doc @@ %s::tsquery", [tsquery(query)]
    clauses, params, whole_parts = [], [], []
    for part, weights in WEIGHTS.items():
        chosen = "".join(sorted(weight for column, weight in weights.items() if column in columns))
        if not chosen:
            continue
        if len(chosen) == len(weights):
            whole_parts.append(part)
        else:
            clauses.append("(d.part = %s AND d.doc @@ %s::tsquery)")
            params += [part, tsquery(query, chosen)]
    if whole_parts:
        clauses.append(f"(d.part IN ({', '.join(['%s'] * len(whole_parts))}) AND d.doc @@ %s::tsquery)")
        params += [*whole_parts, tsquery(query)]
    return "(" + " OR ".join(clauses) + ")", params
