"""One parser per kind of value (``config.values``): flags and the settings file read values the same way.

``dayflow spend --since``, ``dayflow search --since`` and ``dayflow prune --older-than`` used to read ages
three ways (``spend --since 90s`` was refused while ``search --since 90s`` worked). They are run here as a
user runs them, against a real run whose calls were made at a known time, so an age is checked by what it
selects, not only by being accepted.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from dayflow_tui.config import values

from ..conftest import dayflow_cmd

RAN_AT = "2026-12-03T09:00:00"  # the run's calls
NOW = "2026-12-03T10:00:00"  # an hour later: 90s selects nothing, 12h and 7d select the run
BAD_AGES = ["7 fortnights", "last tuesday", "90x", "-5m", "12 h ago", "1e3s"]


def dayflow(*args: str, db, now: str = NOW) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0", "DAYFLOW_FAKE_NOW": now}
    return subprocess.run(dayflow_cmd(*args, "--db", str(db)), capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def run_an_hour_ago(db_path):
    done = dayflow("brief", db=db_path, now=RAN_AT)
    assert done.returncode == 0, done.stderr
    return db_path


def test_spend_search_and_prune_read_the_same_ages(run_an_hour_ago):
    db = run_an_hour_ago
    for age, selected in [("90s", False), ("12h", True), ("7d", True), ("2w", True), ("30m", False)]:
        spend = dayflow("spend", "--since", age, "--json", db=db)
        assert spend.returncode == 0, (age, spend.stderr)
        assert json.loads(spend.stdout)["total"]["calls"] == (3 if selected else 0), age
        search = dayflow("search", "--since", age, "inbox", "--json", db=db)
        assert search.returncode == 0, (age, search.stderr)
        assert bool(json.loads(search.stdout)) == selected, (age, search.stdout[:300])
        # --older-than: the run was last changed an hour ago, so it is older than 90s and younger than 12h.
        prune = dayflow("prune", "--older-than", age, "--dry-run", db=db)
        assert prune.returncode == 0, (age, prune.stderr)
        assert ("nothing to prune" in prune.stderr) == selected, (age, prune.stdout, prune.stderr)


def test_spend_search_and_prune_refuse_the_same_ages_with_one_line(run_an_hour_ago):
    db = run_an_hour_ago
    for bad in BAD_AGES:
        for argv in (("spend", "--since", bad), ("search", "--since", bad, "inbox"),
                     ("prune", "--older-than", bad, "--dry-run")):
            done = dayflow(*argv, db=db)
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 64 and len(lines) == 1, (argv, done.stderr)
            assert argv[1] in lines[0] and "Traceback" not in done.stderr, (argv, lines)
            assert done.stdout == "", argv
    # A date is a --since, never an age.
    assert dayflow("spend", "--since", "2026-12-03", "--json", db=db).returncode == 0
    assert dayflow("prune", "--older-than", "2026-12-03", "--dry-run", db=db).returncode == 64


def test_ages_and_times():
    now = datetime(2026, 12, 3, 10, tzinfo=timezone.utc)
    assert values.age("90s") == timedelta(seconds=90)
    assert values.age(" 12H ") == timedelta(hours=12)
    assert values.age("1.5d") == timedelta(hours=36)
    assert values.age("2w") == timedelta(days=14)
    assert values.since("90s", now) == "2026-12-03T09:58:30.000Z"
    assert values.since("2026-12-01", now) == "2026-12-01T00:00:00.000Z"
    assert values.since("2026-12-01T08:00:00+02:00", now) == "2026-12-01T06:00:00.000Z"
    for bad in BAD_AGES + ["", "36501d", "9" * 40 + "w", None, 7]:
        with pytest.raises(values.BadValue):
            values.since(bad, now)
    with pytest.raises(values.BadValue, match="100 years"):
        values.age("36501d")


def test_numbers_dollars_and_off():
    assert values.whole("3") == 3 and values.whole(0) == 0
    for bad in ("3.5", 3.5, True, "three", "-1", None, str(2**31)):
        with pytest.raises(values.BadValue):
            values.whole(bad)
    with pytest.raises(values.BadValue):
        values.positive("0")
    assert values.thread_count("256") == 256
    with pytest.raises(values.BadValue):
        values.thread_count("257")
    assert values.tokens_or_off("off") is None and values.tokens_or_off("0") is None
    assert values.tokens_or_off(0) is None and values.tokens_or_off(" 8000 ") == 8000
    with pytest.raises(values.BadValue, match="tokens or 'off'"):
        values.tokens_or_off("a lot")
    assert values.seconds("0.5") == 0.5 and values.seconds(2) == 2.0
    for bad in ("nan", "inf", "-1", True, "soon"):
        with pytest.raises(values.BadValue):
            values.seconds(bad)
    with pytest.raises(values.BadValue):
        values.seconds("86401", most=values.DAY_S)
    assert values.dollars("$0.50") == Decimal("0.50") and values.dollars(0) == 0
    with pytest.raises(values.BadValue, match="above 0"):
        values.dollars("0", above_zero=True)
    for bad in ("NaN", "-1", "lots", True, "2000000"):
        with pytest.raises(values.BadValue):
            values.dollars(bad)
    assert values.dollars_or_off("off") is None


def test_flags_refuse_bad_numbers_in_one_line(db_path):
    for argv, flag in [(("runs", "--limit", "0"), "--limit"), (("worker", "--poll", "nan"), "--poll"),
                       (("worker", "--concurrency", "999"), "--concurrency"),
                       (("brief", "--budget-usd", "0"), "--budget-usd"), (("brief", "--compact-at", "lots"), "--compact-at"),
                       (("fork", "RUN", "--at", "-1"), "--at")]:
        done = dayflow(*argv, db=db_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 64 and len(lines) == 1 and flag in lines[0], (argv, done.stderr)


def test_the_settings_and_the_flags_accept_and_refuse_the_same_values(monkeypatch):
    """A value kind reads the same from DAYFLOW_* (and so the settings file) as from a flag."""
    from dayflow_tui.cli.parser import build_parser
    from dayflow_tui.config import settings
    from dayflow_tui.config.errors import SettingsError

    parser = build_parser()

    def from_flag(*argv):
        try:
            return parser.parse_args(list(argv))
        except SystemExit as stop:
            assert stop.code == 64
            return None

    def from_env(variable, raw):
        try:
            return settings.load({variable: raw})
        except SettingsError:
            return None

    for raw, tokens in [("off", None), ("0", None), ("8000", 8000), (" 12000 ", 12000), ("lots", "bad"),
                        ("-5", "bad"), ("1.5", "bad")]:
        flag, env = from_flag("brief", "--compact-at", raw), from_env("DAYFLOW_COMPACT_AT", raw)
        if tokens == "bad":
            assert flag is None and env is None, raw
        else:  # off is 0 on the command line (it turns off a threshold the settings set), None in the settings
            assert (flag.compact_at or None, env.compact_at) == (tokens, tokens), raw
    for raw, seconds in [("2.5", 2.5), ("0", 0.0), ("nan", None), ("-1", None), ("soon", None)]:
        flag, env = from_flag("brief", "--delay", raw), from_env("DAYFLOW_API_TIMEOUT", raw)
        assert (flag and flag.delay, env and env.api_timeout_s) == (seconds, seconds), raw
    for raw, dollars in [("$0.50", Decimal("0.50")), ("2", Decimal(2)), ("lots", None), ("-1", None)]:
        flag, env = from_flag("brief", "--budget-usd", raw), from_env("DAYFLOW_RESUME_CONFIRM_USD", raw)
        assert (flag and flag.budget_usd, env and env.resume_confirm_usd) == (dollars, dollars), raw


def test_every_error_kind_is_defined_in_config_errors_with_its_exit_code():
    """One place to read what dayflow exits with: every DayflowError, wherever it is raised, is defined there."""
    import importlib
    import pkgutil

    import dayflow_tui
    from dayflow_tui.config import errors

    for module in pkgutil.walk_packages(dayflow_tui.__path__, "dayflow_tui."):
        if not module.name.endswith(".__main__"):  # python -m dayflow_tui.cli: running it is not importing it
            importlib.import_module(module.name)
    kinds, stack = set(), [errors.DayflowError]
    while stack:
        kind = stack.pop()
        kinds.add(kind)
        stack.extend(kind.__subclasses__())
    assert len(kinds) >= 15
    for kind in kinds:
        assert kind.__module__ == "dayflow_tui.config.errors", kind
        assert isinstance(kind.exit_code, int) and 0 < kind.exit_code < 126, kind
        # The module's table lists each kind under its own exit code.
        line = next(line for line in errors.__doc__.splitlines() if f"``{kind.__name__}``" in line)
        assert line.lstrip("- ").startswith(str(kind.exit_code)), (kind, line)
