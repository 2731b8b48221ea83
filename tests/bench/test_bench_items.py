"""Every benchmark item at least starts: ``python -m bench`` is run by hand, never by CI, so a broken item
(``--only 3`` once died of a NameError: a missing import) would otherwise go unnoticed.

Cheap by design: each item's module is imported the way ``bench/run_all.py`` imports it, and every name
its functions read as a global must exist in the module or the builtins (what a NameError at run time
would be); item 3's in-process parts run on a 5-step run.
"""

from __future__ import annotations

import builtins
import dis
import importlib
import inspect
import types

import pytest

from bench.run_all import ITEMS


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _functions(module: types.ModuleType):
    """The module's own functions and methods (decorators unwrapped; not the ones it imported)."""
    for value in vars(module).values():
        members = vars(value).values() if isinstance(value, type) else [value]
        for member in members:
            function = inspect.unwrap(getattr(member, "__func__", member))
            if isinstance(function, types.FunctionType) and function.__globals__ is vars(module):
                yield function


def undefined_globals(module: types.ModuleType) -> set[str]:
    """Names a function of ``module`` loads as globals that are neither in the module nor builtins."""
    missing = set()
    for function in _functions(module):
        for code in _code_objects(function.__code__):
            for op in dis.get_instructions(code):
                if op.opname == "LOAD_GLOBAL" and op.argval not in vars(module) and not hasattr(builtins, op.argval):
                    missing.add(f"{code.co_name}: {op.argval}")
    return missing


def _import(module_name: str) -> types.ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:  # an optional package (the bench extra): run_all skips the item too
        if exc.name and not exc.name.startswith(("bench", "dayflow_tui")):
            pytest.skip(f"{module_name} needs {exc.name} (pip install '.[bench]')")
        raise


@pytest.mark.parametrize("item", list(ITEMS), ids=[f"item{k}" for k in ITEMS])
def test_every_bench_item_imports_and_names_only_what_exists(item):
    module = _import(ITEMS[item][0])
    assert callable(getattr(module, "run", None)), f"{module.__name__} has no run(quick=...)"
    assert undefined_globals(module) == set()


def test_the_undefined_name_check_finds_a_missing_import():
    module = types.ModuleType("bench_fake")
    exec("import json\ndef run(quick=False):\n    return json.dumps(rebuild_messages())\n", vars(module))
    assert undefined_globals(module) == {"run: rebuild_messages"}


def test_item_3_resume_runs_its_in_process_measures_on_a_small_run(tmp_path):
    from bench import bench_resume
    from bench.common import build_run
    from dayflow_tui.store import open_store

    fresh = tmp_path / "fresh.db"
    open_store(fresh).close()
    small = tmp_path / "small.db"
    store = open_store(small)
    fixtures = {"fresh": (fresh, None), 1_000: (small, build_run(store, 5))}  # the 1,000-step slot, 5 steps
    store.close()
    in_process = bench_resume.work_before_first_call(fixtures, tmp_path, rounds=1)
    assert all(len(found) == 1 and found[0] > 0 for found in in_process.values())
    ours_t, raw_t = bench_resume.rebuild(fixtures, rounds=1)  # checks rebuild_messages == the raw rebuild
    assert ours_t and raw_t


@pytest.mark.parametrize("item", list(ITEMS), ids=[f"item{k}" for k in ITEMS])
def test_every_bench_item_runs_at_smoke_size(item):
    """``python -m bench --smoke --only N`` runs the item end to end at a tiny size (the names check above
    cannot see a renamed attribute or an empty sample): it exits 0 and prints its rows, none FAILED. An
    item whose optional package or server is missing says "skipped" and why; nothing else may skip."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    done = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--only", item], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| item ")]
    assert rows, done.stdout
    assert not [r for r in rows if "| FAILED |" in r], done.stdout
    skipped = [r for r in rows if "| skipped" in r]
    for row in skipped:  # only for a package of the bench/postgres extras or a server that is not there
        assert "needs " in row or "no server" in row or "skipped:" in row, row
