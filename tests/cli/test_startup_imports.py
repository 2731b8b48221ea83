"""Pay for an import only when it is used: ``anthropic`` (about two seconds) and psycopg.

Commands that make no real model call (every reading command, and runs on the
offline model) must not import ``anthropic``; commands on a SQLite file must
not import psycopg, although it is installed (the ``postgres`` extra) and
Peewee would import it. Each case runs the real console script with
``PYTHONPROFILEIMPORTTIME`` and reads the modules it actually imported. The
controls: ``dayflow brief`` on a real model (the SDK, against a loopback
server) shows ``anthropic`` in the same capture, and a command on PostgreSQL
shows psycopg.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dayflow_tui.agent.runs import run_brief
from dayflow_tui.store import open_store

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI


def imported_modules(argv: list[str], **extra_env: str) -> set[str]:
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0", "PYTHONPROFILEIMPORTTIME": "1", **extra_env}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    assert "peewee" in names, "the import-time capture saw nothing"
    return names


@pytest.fixture
def finished_run(store, counting_client) -> str:
    result = run_brief(store, client=counting_client)
    assert result.status == "done"
    return result.run_id


@pytest.mark.parametrize("args", [("runs",), ("runs", "--json"), ("tasks",), ("show", "RUN")],
                         ids=["runs", "runs-json", "tasks", "show"])
def test_commands_that_call_no_model_do_not_import_anthropic(args, backend, db_target, finished_run):
    args = tuple(finished_run if a == "RUN" else a for a in args)
    names = imported_modules(dayflow_cmd(*args, "--db", str(db_target)))
    assert not of_package(names, "anthropic")
    if backend == "sqlite":
        assert not psycopg_loaded(names), "a SQLite command imported psycopg"
    else:
        assert psycopg_loaded(names)  # the control: PostgreSQL does load its driver


def of_package(names: set[str], package: str) -> set[str]:
    return {n for n in names if n == package or n.startswith(package + ".")}


def psycopg_loaded(names: set[str]) -> bool:
    """Whether psycopg's code ran: its submodules were imported.

    The capture also lists an import that was tried and refused: Peewee's
    ``import psycopg`` while the store hides the driver shows as a bare
    ``psycopg`` line (an ImportError Peewee expects), with nothing under it.
    """
    return bool(of_package(names, "psycopg") - {"psycopg"})


CLI_MODULES = """
import sys
from dayflow_tui.cli import main
code = main(sys.argv[1:])
print(code, sorted(name for name in sys.modules if name.split(".")[0] in ("psycopg", "anthropic")))
"""


def test_sqlite_commands_leave_psycopg_out_of_sys_modules(db_path, counting_client):
    """The same, read from ``sys.modules`` at the end of the command in a fresh interpreter."""
    from dayflow_tui.store import open_store

    store = open_store(db_path)
    run_id = run_brief(store, client=counting_client).run_id
    store.close()
    for args in (["runs"], ["tasks", "--json"], ["show", run_id]):
        done = subprocess.run([sys.executable, "-c", CLI_MODULES, *args, "--db", str(db_path)],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1] == "0 []", args


def test_psycopg_is_installed_for_this_suite():
    """The SQLite checks above mean something only where psycopg could be imported."""
    import importlib.util

    assert importlib.util.find_spec("psycopg") is not None, "install the postgres extra to run the tests"


def test_offline_runs_do_not_import_anthropic_and_real_ones_do(db_path):
    names = imported_modules(dayflow_cmd("brief", "--db", str(db_path)))
    assert not of_package(names, "anthropic") and not psycopg_loaded(names)
    assert "dayflow_tui.agent.offline" in names  # it did run the offline model
    with LoopbackAPI() as api:
        names = imported_modules(dayflow_cmd("brief", "--model", "claude-loopback-1", "--db", str(db_path)),
                                 **api.env())
        assert api.calls == 3
    assert "anthropic" in names


DASHBOARD = r"""
import asyncio, pkgutil, importlib, sys
import dayflow_tui.tui
from dayflow_tui.store import open_store
from dayflow_tui.tui.app import DayflowApp
from dayflow_tui.tui.screens.transcript import TranscriptScreen

for module in pkgutil.walk_packages(dayflow_tui.tui.__path__, "dayflow_tui.tui."):
    if module.name != "dayflow_tui.tui.demo_data":  # builds example runs on the offline model, on purpose
        importlib.import_module(module.name)

async def main(db, run_id):
    app = DayflowApp(open_store(db, create=False))
    async with app.run_test(headless=True, size=(120, 40)) as pilot:
        await pilot.pause()
        app.open_transcript(run_id)
        for _ in range(50):
            await pilot.pause(0.05)
            if isinstance(app.screen, TranscriptScreen) and app.screen.run is not None:
                break
        assert isinstance(app.screen, TranscriptScreen) and app.screen.run.id == run_id
    print(sorted(name for name in sys.modules if name.split(".")[0] == "anthropic"))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_dashboard_list_and_transcript_do_not_import_anthropic(db_target, finished_run):
    """Every dashboard module imported, the run list painted and a transcript opened: no anthropic.

    ``demo_data`` (example databases for tests, screenshots and benchmarks) drives the offline
    model and is the one module of the package left out.
    """
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0"}
    done = subprocess.run([sys.executable, "-c", DASHBOARD, str(db_target), finished_run], capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


LISTING_MODULES = """
import sys
from dayflow_tui.cli import main
code = main(sys.argv[1:])
heavy = ("genai_prices", "rich", "textual", "anthropic", "psycopg", "markdown_it", "pydantic", "httpx")
ours = ("dayflow_tui.store.dialect.postgres", "dayflow_tui.tui", "dayflow_tui.render", "dayflow_tui.agent")
print(code, sorted(name for name in sys.modules if name.split(".")[0] in heavy or name.startswith(ours)))
"""


@pytest.mark.parametrize("args", [("runs",), ("runs", "--json"), ("tasks",)], ids=["runs", "runs-json", "tasks"])
def test_a_plain_listing_imports_nothing_it_does_not_use(db_path, counting_client, args):
    """``dayflow runs`` is measured against ``import sqlite3, peewee`` (bench item 4): nothing from the price
    library, Rich, Textual, the SDK, the PostgreSQL dialect or the agent is on a plain listing's path. Read from
    ``sys.modules`` once the command is done, in a fresh interpreter."""
    from dayflow_tui.store import open_store

    store = open_store(db_path)
    run_brief(store, client=counting_client)
    store.close()
    done = subprocess.run([sys.executable, "-c", LISTING_MODULES, *args, "--db", str(db_path)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "0 []", (args, done.stdout[-3000:])


def test_a_listing_without_a_config_file_imports_no_toml_parser_nor_platformdirs(tmp_path, db_path):
    """On Linux the XDG directories are read from the environment (as platformdirs reads them) and the TOML
    parser is imported only when a config file exists; the control: a config file brings tomllib in."""
    run_brief_db = str(db_path)
    open_store(run_brief_db).close()
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "DAYFLOW_CONFIG": ""}
    names = imported_modules(dayflow_cmd("runs", "--db", run_brief_db), **env)
    assert not of_package(names, "tomllib") and not of_package(names, "platformdirs")
    (tmp_path / "config" / "dayflow").mkdir(parents=True)
    (tmp_path / "config" / "dayflow" / "config.toml").write_text("theme = 'textual-dark'\n")
    assert of_package(imported_modules(dayflow_cmd("runs", "--db", run_brief_db), **env), "tomllib")
