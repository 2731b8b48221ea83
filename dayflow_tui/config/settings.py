"""One settings value for the whole process: defaults, then the config file, then the environment, then flags.

Every tunable of Dayflow is a field of ``Settings``. It is read once
(``current()``), validated as it is read (a bad value is one clear line,
``SettingsError``, before anything is opened or written) and passed down;
no module reads ``DAYFLOW_*`` variables or writes ``os.environ`` to hand a
value to another module.

Layers, later ones winning:

1. defaults (below);
2. the config file, TOML: ``$DAYFLOW_CONFIG``, else ``config.toml`` in the
   user's config directory (``platformdirs``: ``~/.config/dayflow/`` on Linux);
3. environment variables (``DAYFLOW_MODEL``, ``DAYFLOW_COMPACT_AT``, ...);
4. command-line flags (``with_overrides``).

The API key is never a setting: the SDK reads ``ANTHROPIC_API_KEY`` from the
environment itself, and Dayflow only asks whether it is there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Mapping

from . import values
from .errors import SettingsError

DEFAULT_API_MODEL = "claude-sonnet-5-5"
OFFLINE_MODEL = "offline"


@dataclass(frozen=True)
class Settings:
    # The database: a file path or a URL; None means the default file in the data directory.
    db: str | None = None
    # The model runs use when none is named; None means the API default with a key, else offline.
    model: str | None = None
    # Compact a request when its estimate passes this many tokens; None means off.
    compact_at: int | None = None
    # The SDK's own retries and timeout (None: the SDK's defaults).
    api_max_retries: int | None = None
    api_timeout_s: float | None = None
    # Seconds the offline model waits per call (to watch a run in the dashboard).
    offline_delay_s: float = 0.0
    # The dashboard's offline model streams each reply over this long (when offline_delay_s is 0), so a new
    # user watches it arrive; 0: at once.
    offline_pace_s: float = 0.8
    # This host's name in leases; set it where host names repeat (containers on several machines).
    hostname: str = field(default_factory=socket.gethostname)
    # How long the commit of a paid reply keeps trying before the reply goes to the spool file.
    commit_retry_s: float = 120.0
    # How long a SQLite connection waits for another writer's lock before its statement fails (and the
    # store's retries take over).
    sqlite_busy_timeout_s: float = 10.0
    # Attempts in a row that may end without a new step before a run is set failed, and the first
    # wait between them (doubling each time): no run is ever retried in a loop.
    max_attempts: int = 3
    retry_backoff_s: float = 1.0
    # How long `dayflow brief`, `run` and `resume` wait in all for a model API that pushes back (429
    # rate limited, 529 overloaded) before they exit and leave the run queued; 0: do not wait.
    rate_limit_wait_s: float = 300.0
    # Where Dayflow keeps its default database and its spool of replies that could not be committed.
    data_dir: Path | None = None
    state_dir: Path | None = None
    # OpenTelemetry: send each run's spans to this OTLP/HTTP receiver while it runs (None: off), and
    # whether the spans carry the content (messages, replies, tool arguments and results).
    otel_endpoint: str | None = None
    otel_content: bool = False
    # dayflow collect: the largest OTLP request body taken (bytes, after gzip; larger: 413), and how long
    # the spans of a trace whose invoke_agent span has not arrived are held in memory (idle seconds).
    collect_max_body_bytes: int = 16 * 1024 * 1024
    collect_hold_s: float = 3600.0
    # Test hook: append "pid messages time" per offline call to this file.
    call_log: str | None = None
    debug: bool = False
    # Where the values came from (the config file's path, when one was read).
    config_file: Path | None = None
    # Whether ANTHROPIC_API_KEY is set (the key itself is never held here).
    has_api_key: bool = False
    # Prices per million tokens that win over the price library: {model: {"input": $, "output": $, ...}}
    # (negotiated rates, or models the library does not know). See money/rates.py.
    prices: dict[str, dict[str, Decimal]] = field(default_factory=dict, hash=False)
    # Model limits that win over the shipped table (agent/model_limits.py): {model: {"max_output": N, ...}}
    # (a model the table does not know, or a limit Anthropic changed).
    models: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    # The dollar budget of runs started without --budget-usd (None: no dollar budget).
    budget_usd: Decimal | None = None
    # The dashboard asks before a resume whose next call is predicted to cost more than this.
    resume_confirm_usd: Decimal = Decimal("0.10")
    # Tools whose calls wait for a person's decision in runs started from now on (the built-in brief's
    # create_task, say): the run stops `waiting` until `dayflow approve` or `dayflow deny`.
    require_approval: tuple[str, ...] = ()
    # Who a decision is recorded as (default: the login name of the process deciding).
    user: str | None = None
    # The dashboard's theme when none was chosen there yet (a choice made in the dashboard is remembered
    # in the state directory and wins over this).
    theme: str | None = None
    # The command the dashboard's "open in editor" (o in the JSON view) runs: DAYFLOW_EDITOR, else
    # $VISUAL, else $EDITOR, else vi.
    editor: str | None = None
    # Operating a fleet (issue #29): how the driving commands log (one event per line on stderr: "text", the
    # lines a person reads, or "json", one object per line for a log shipper) and from which level; where
    # `dayflow worker` serves Prometheus metrics (None: it does not; 0: any free port, said at start).
    log_format: str = "text"
    log_level: str = "info"
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    # PostgreSQL connections find a dead peer (a blackhole) in about idle + interval * count seconds, and an
    # unacknowledged write gives up after tcp_user_timeout; on both sides of the session. 0: the OS default.
    pg_keepalives_idle_s: int = 30
    pg_keepalives_interval_s: int = 10
    pg_keepalives_count: int = 3
    pg_tcp_user_timeout_s: int = 60
    # PostgreSQL: the schema Dayflow's tables live in, set at the start of every transaction (SET LOCAL
    # search_path), so it holds behind PgBouncer in transaction pooling, which drops a URL's
    # options=-csearch_path. None: the server's search_path (the URL's options, else public).
    schema: str | None = None

    def with_overrides(self, **values: Any) -> "Settings":
        """These settings with flags applied; a None value leaves the setting as it is."""
        chosen = {k: v for k, v in values.items() if v is not None}
        return dataclasses.replace(self, **chosen) if chosen else self

    @property
    def default_model(self) -> str:
        return self.model or (DEFAULT_API_MODEL if self.has_api_key else OFFLINE_MODEL)

    @property
    def data_home(self) -> Path:
        if self.data_dir is not None:
            return self.data_dir
        return _user_dir("data")

    @property
    def state_home(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        return _user_dir("state")

    @property
    def default_db_path(self) -> Path:
        return self.data_home / "dayflow.db"


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
PRICE_FIELDS = ("input", "output", "cache_write", "cache_write_1h", "cache_read")


class _Problem(ValueError):
    """A value with parts (a table) that says which part is wrong: ``."MODEL": output is missing``."""


def _tables_by_model(raw: Any, example: str, row: str) -> list[tuple[str, dict]]:
    """``[KIND."MODEL"]`` tables (TOML) or the same as JSON (an environment variable), as (model, table) pairs.

    ``example`` shows the whole form, ``row`` one table's keys: each in the one line a wrong value gets."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            raise _Problem(f" must be a JSON object of models ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise _Problem(f" must be tables: {example}")
    pairs = []
    for model, table in raw.items():
        name = str(model).strip()
        if not name or len(name) > 200:
            raise _Problem(f": {str(model)[:40]!r} is not a model name")
        if not isinstance(table, dict):
            raise _Problem(f'."{name}" must be a table ({row})')
        pairs.append((name, table))
    return pairs


def _price_table(raw: Any) -> dict[str, dict[str, Decimal]]:
    """``[prices."MODEL"]`` tables (TOML) or the same as JSON (``DAYFLOW_PRICES``): dollars per million tokens."""
    table: dict[str, dict[str, Decimal]] = {}
    for name, rates in _tables_by_model(raw, '[prices."MODEL"] input = 3.0, output = 15.0',
                                        "input = ..., output = ..."):
        unknown = sorted(set(rates) - set(PRICE_FIELDS))
        if unknown:
            raise _Problem(f'."{name}": unknown price {unknown[0]!r} (known: {", ".join(PRICE_FIELDS)})')
        missing = [key for key in ("input", "output") if key not in rates]
        if missing:
            raise _Problem(f'."{name}": {missing[0]} is missing (dollars per million tokens)')
        parsed = {}
        for key, value in rates.items():
            try:
                parsed[key] = values.dollars(value)
            except values.BadValue as exc:
                raise _Problem(f'."{name}" {key} {exc}') from None
        table[name] = parsed
    return table


MODEL_FIELDS = {"max_output": "tokens", "context_window": "tokens", "thinking": "thinking", "cache_1h": "flag",
                "context_1m": "flag"}


def _model_table(raw: Any) -> dict[str, dict[str, Any]]:
    """``[models."MODEL"]`` tables (TOML) or the same as JSON (``DAYFLOW_MODELS``): a model's own limits."""
    table: dict[str, dict[str, Any]] = {}
    for name, limits in _tables_by_model(raw, '[models."MODEL"] max_output = 64000',
                                         "max_output = ..., context_window = ..."):
        parsed: dict[str, Any] = {}
        for key, value in limits.items():
            kind = MODEL_FIELDS.get(key)
            if kind is None:
                raise _Problem(f'."{name}": unknown limit {str(key)[:40]!r} (known: {", ".join(MODEL_FIELDS)})')
            try:
                if kind == "tokens":
                    parsed[key] = values.whole(value, least=1, most=100_000_000)
                elif kind == "flag":
                    parsed[key] = value if isinstance(value, bool) else values.flag(value)
                elif value in ("extended", "adaptive", "none", False):
                    parsed[key] = None if value in ("none", False) else value
                else:
                    raise values.BadValue("must be extended, adaptive or none")
            except values.BadValue as exc:
                raise _Problem(f'."{name}" {key} {exc}') from None
        table[name] = parsed
    return table


# setting: (environment variable, parser, what it must be). The parsers are config.values', which the
# command line's flags use too; each raises ValueError (values.BadValue) with the reason.
_FIELDS: dict[str, tuple[str, Any, str]] = {
    # setting: (environment variable, parser, what it must be)
    "db": ("DAYFLOW_DB", values.text, "a file path or a database URL"),
    "model": ("DAYFLOW_MODEL", values.text, "a model name"),
    "compact_at": ("DAYFLOW_COMPACT_AT", values.tokens_or_off, "a number of tokens or 'off'"),
    "api_max_retries": ("DAYFLOW_API_MAX_RETRIES", lambda raw: values.whole(raw, most=1_000_000), "a number of retries"),
    "api_timeout_s": ("DAYFLOW_API_TIMEOUT", values.seconds, "a number of seconds"),
    "offline_delay_s": ("DAYFLOW_OFFLINE_DELAY", lambda raw: values.seconds(raw) if str(raw).strip() else 0.0,
                        "a number of seconds"),
    "offline_pace_s": ("DAYFLOW_OFFLINE_PACE", values.seconds, "a number of seconds"),
    "hostname": ("DAYFLOW_HOSTNAME", values.text, "a host name"),
    "commit_retry_s": ("DAYFLOW_COMMIT_RETRY_S", values.seconds, "a number of seconds"),
    "sqlite_busy_timeout_s": ("DAYFLOW_SQLITE_BUSY_TIMEOUT", lambda raw: values.seconds(raw, most=values.DAY_S),
                              "a number of seconds, at most a day"),
    "max_attempts": ("DAYFLOW_MAX_ATTEMPTS", lambda raw: max(1, values.whole(raw, most=1_000_000)), "a number of attempts"),
    "retry_backoff_s": ("DAYFLOW_RETRY_BACKOFF", values.seconds, "a number of seconds"),
    "rate_limit_wait_s": ("DAYFLOW_RATE_LIMIT_WAIT", values.seconds, "a number of seconds (0: do not wait)"),
    "data_dir": ("DAYFLOW_DATA_DIR", values.path, "a directory"),
    "state_dir": ("DAYFLOW_STATE_DIR", values.path, "a directory"),
    "otel_endpoint": ("DAYFLOW_OTEL_ENDPOINT", values.http_url, "an OTLP/HTTP receiver's http:// or https:// URL "
                      "(e.g. http://localhost:4318)"),
    "otel_content": ("DAYFLOW_OTEL_CONTENT", values.flag, "1 or 0"),
    "collect_max_body_bytes": ("DAYFLOW_COLLECT_MAX_BODY", lambda raw: values.positive(raw, most=1 << 31),
                               "a number of bytes from 1 to 2147483648"),
    "collect_hold_s": ("DAYFLOW_COLLECT_HOLD", values.seconds, "a number of seconds"),
    "call_log": ("DAYFLOW_CALL_LOG", values.text, "a file path"),
    "debug": ("DAYFLOW_DEBUG", values.flag, "1 or 0"),
    "prices": ("DAYFLOW_PRICES", _price_table,
               'tables [prices."MODEL"] of input, output, cache_write, cache_read (dollars per million tokens)'),
    "models": ("DAYFLOW_MODELS", _model_table,
               'tables [models."MODEL"] of max_output, context_window, thinking, cache_1h, context_1m'),
    "budget_usd": ("DAYFLOW_BUDGET_USD", values.dollars_or_off, "an amount of dollars or 'off'"),
    "resume_confirm_usd": ("DAYFLOW_RESUME_CONFIRM_USD", values.dollars, "an amount of dollars"),
    "require_approval": ("DAYFLOW_REQUIRE_APPROVAL", values.tool_names,
                         "tool names separated by commas (e.g. create_task), or a list of them"),
    "user": ("DAYFLOW_USER", values.text, "a name"),
    "theme": ("DAYFLOW_THEME", values.text, "a theme name (the dashboard's palette lists them)"),
    "editor": ("DAYFLOW_EDITOR", values.text, "an editor command (e.g. 'code --wait')"),
    "log_format": ("DAYFLOW_LOG_FORMAT", lambda raw: values.one_of(raw, LOG_FORMATS), "text or json"),
    "log_level": ("DAYFLOW_LOG_LEVEL", lambda raw: values.one_of(raw, LOG_LEVELS),
                  "debug, info, warning or error"),
    "metrics_port": ("DAYFLOW_METRICS_PORT", values.port_or_off,
                     "a port number (0 to 65535; 0: any free port) or 'off'"),
    "metrics_host": ("DAYFLOW_METRICS_HOST", values.host_name, "a host name or IP address to listen on"),
    "pg_keepalives_idle_s": ("DAYFLOW_PG_KEEPALIVES_IDLE", lambda raw: values.whole(raw, most=values.DAY_S),
                             "a whole number of seconds (0: the OS default)"),
    "pg_keepalives_interval_s": ("DAYFLOW_PG_KEEPALIVES_INTERVAL", lambda raw: values.whole(raw, most=3600),
                                 "a whole number of seconds, at most 3600"),
    "pg_keepalives_count": ("DAYFLOW_PG_KEEPALIVES_COUNT", lambda raw: values.whole(raw, most=100),
                            "a number of probes, at most 100"),
    "schema": ("DAYFLOW_SCHEMA", values.identifier, "a schema name (letters, digits and _)"),
    "pg_tcp_user_timeout_s": ("DAYFLOW_PG_TCP_USER_TIMEOUT", lambda raw: values.whole(raw, most=values.DAY_S),
                              "a whole number of seconds (0: the OS default)"),
}
# Settings whose value is a table: ``[prices."MODEL"]`` is the setting ``prices``, not ``prices_MODEL``.
_TABLES = {"prices", "models"}


def config_path(env: Mapping[str, str]) -> Path:
    given = env.get("DAYFLOW_CONFIG")
    if given:
        return Path(given).expanduser()
    return _user_dir("config") / "config.toml"


# The XDG base directories platformdirs gives on Linux, without importing it (it costs a few ms of every
# command's start-up: tempfile, shutil and the compressors come with it); elsewhere platformdirs decides.
_XDG = {"data": ("XDG_DATA_HOME", ".local/share"), "state": ("XDG_STATE_HOME", ".local/state"),
        "config": ("XDG_CONFIG_HOME", ".config")}


def _user_dir(kind: str) -> Path:
    if sys.platform.startswith("linux"):
        variable, under_home = _XDG[kind]
        base = os.environ.get(variable, "").strip()
        return Path(base if base else Path.home() / under_home) / "dayflow"
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")("dayflow", appauthor=False))


def _read_config(path: Path) -> dict[str, Any]:
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SettingsError(f"config file {path}: cannot be read ({exc})") from None
    import tomllib  # only when there is a file: most commands have none, and this import is not free

    with fh:
        try:
            data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"config file {path}: cannot be read ({exc})") from None
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key in _TABLES:
            flat[key] = value
        elif isinstance(value, dict):  # [section] key = value is the same as section_key = value
            for inner, inner_value in value.items():
                flat[f"{key}_{inner}"] = inner_value
        else:
            flat[key] = value
    return flat


def _shown(raw: Any) -> Any:
    return raw if not isinstance(raw, str) or len(raw) <= 40 else raw[:40] + "…"


def load(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from the config file and the environment, validated."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = config_path(env)
    for key, raw in _read_config(path).items():
        if key not in _FIELDS:
            raise SettingsError(f"config file {path}: unknown setting {key!r} "
                                f"(known: {', '.join(sorted(_FIELDS))})")
        try:
            values[key] = _FIELDS[key][1](raw)
        except _Problem as exc:
            raise SettingsError(f"config file {path}: {key}{exc}") from None
        except (ValueError, TypeError):
            raise SettingsError(f"config file {path}: {key} must be {_FIELDS[key][2]}, got {_shown(raw)!r}") from None
    for key, (variable, parse, meaning) in _FIELDS.items():
        raw = env.get(variable)
        if raw is None:
            continue
        try:
            values[key] = parse(raw)
        except _Problem as exc:
            raise SettingsError(f"{variable}{exc}") from None
        except (ValueError, TypeError):
            raise SettingsError(f"{variable} must be {meaning}, got {_shown(raw)!r}") from None
    if values.get("hostname") is None:
        values.pop("hostname", None)
    if values.get("editor") is None:  # the editor everyone's tools use, when Dayflow was not told one
        values["editor"] = (env.get("VISUAL") or "").strip() or (env.get("EDITOR") or "").strip() or None
    values["has_api_key"] = bool(env.get("ANTHROPIC_API_KEY"))
    values["config_file"] = path if path.exists() else None
    return Settings(**values)


_cached: tuple[tuple, Settings] | None = None


_WATCHED = tuple(variable for variable, _parse, _meaning in _FIELDS.values()) + (
    "DAYFLOW_CONFIG", "ANTHROPIC_API_KEY", "VISUAL", "EDITOR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME")


def _fingerprint() -> tuple:
    # Asked on every commit of a paid reply: one lookup per variable. The key's value is hashed, not kept.
    environ = os.environ
    return tuple(hash(value) if name == "ANTHROPIC_API_KEY" and value is not None else value
                 for name, value in zip(_WATCHED, map(environ.get, _WATCHED)))


_flags: dict[str, Any] = {}


def apply_flags(**values: Any) -> None:
    """Command-line flags, the last layer (a None value leaves a setting as it is): passed down through the
    settings, never through the environment."""
    global _cached
    _flags.update({k: v for k, v in values.items() if v is not None})
    _cached = None


def current() -> Settings:
    """The process's settings, read once (read again only if the environment itself changed, as in tests)."""
    global _cached
    stamp = _fingerprint()
    if _cached is None or _cached[0] != stamp:
        _cached = (stamp, load().with_overrides(**_flags))
    return _cached[1]
