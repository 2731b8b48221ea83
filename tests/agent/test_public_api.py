"""The public API: ``from dayflow_tui import Agent, tool`` (issue #25), and what ``import dayflow_tui`` costs.

``import dayflow_tui`` must load none of the SDK, Textual or Peewee: every process (the CLI's reading
commands above all) imports the package, and the names are imported on first use. Each check runs in a
fresh interpreter, as a user's script would; the control (the same interpreter after ``from dayflow_tui
import Agent``) shows the measurement sees imports when there are some.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import grimp

from ..conftest import dayflow_cmd

HEAVY = ("anthropic", "textual", "peewee")

MEASURE = """
import sys
import dayflow_tui
heavy = sorted({name.split(".")[0] for name in sys.modules} & {"anthropic", "textual", "peewee"})
ours = sorted(name for name in sys.modules if name.startswith("dayflow_tui."))
print("after import:", heavy, ours)
from dayflow_tui import Agent, Param, ToolContext, open_store, tool
from dayflow_tui.agent import define
from dayflow_tui import store
assert (Agent, Param, ToolContext, tool) == (define.Agent, define.Param, define.ToolContext, define.tool)
assert open_store is store.open_store
heavy = sorted({name.split(".")[0] for name in sys.modules} & {"anthropic", "textual", "peewee"})
print("after the names:", heavy)
print("version:", dayflow_tui.__version__)
try:
    dayflow_tui.no_such_name
except AttributeError as exc:
    print("unknown:", exc)
"""


def test_import_dayflow_tui_loads_nothing_heavy_and_the_names_come_on_first_use():
    done = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "after import: [] ['dayflow_tui.version']"  # only the version leaf: nothing else of ours
    assert lines[1] == "after the names: ['peewee']"  # the control: the store's driver came with the names
    assert lines[2] == f"version: {metadata.version('dayflow-tui')}"
    assert lines[3] == "unknown: module 'dayflow_tui' has no attribute 'no_such_name'"


AGENT_FILE = '''
from typing import Annotated

from dayflow_tui import Agent, Param, ToolContext, tool


@tool(read_only=True)
def shout(ctx: ToolContext, word: Annotated[str, Param("The word to shout.", max_length=40)]) -> dict:
    """Say a word louder."""
    return {"ok": True, "run": ctx.run_id, "word": word.upper()}


agent = Agent(name="shouter", system="Shout the word you are given.", tools=(shout,), task="shout hello")
'''


def test_an_agent_written_against_the_public_api_runs_with_dayflow_run(tmp_path, db_path):
    path = tmp_path / "shouter.py"
    path.write_text(AGENT_FILE, encoding="utf-8")
    env = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0"}
    done = subprocess.run(dayflow_cmd("run", f"{path}:agent", "--db", str(db_path)), capture_output=True,
                          text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    runs = subprocess.run(dayflow_cmd("runs", "--json", "--db", str(db_path)), capture_output=True, text=True,
                          timeout=120, env=env)
    [run] = json.loads(runs.stdout)
    assert (run["agent"], run["status"], run["steps"]) == ("shouter", "done", 2), run


def test_the_examples_and_the_readme_use_the_public_api():
    root = Path(__file__).resolve().parents[2]
    sources = [*sorted((root / "examples").glob("*.py")), root / "README.md"]
    for source in sources:
        text = source.read_text(encoding="utf-8")
        assert "from dayflow_tui.agent.define import" not in text, source
    assert "from dayflow_tui import Agent" in (root / "examples" / "todo_triage.py").read_text(encoding="utf-8")


def test_no_module_imports_its_own_packages_init():
    """Every package, new ones included (pyproject's contracts name the packages there are today)."""
    graph = grimp.build_graph("dayflow_tui")
    packages = {module for module in graph.modules if graph.find_children(module)}
    assert {"dayflow_tui.money", "dayflow_tui.config", "dayflow_tui.store"} <= packages
    found = []
    for package in packages:
        for child in graph.find_children(package):
            if graph.direct_import_exists(importer=child, imported=package):
                lines = graph.get_import_details(importer=child, imported=package)
                found.append(f"{child} -> {package}: {[line['line_contents'] for line in lines]}")
    assert found == []


def test_the_import_graph_has_no_circle():
    """Every import counts, those inside functions and under TYPE_CHECKING too (tools/import_circles.py)."""
    import importlib.util

    script = Path(__file__).resolve().parents[2] / "tools" / "import_circles.py"
    spec = importlib.util.spec_from_file_location("import_circles", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    edges = module.import_graph()
    assert "dayflow_tui.agent.runs" in edges and "dayflow_tui.otel.live" in edges
    assert module.circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]  # the counter does find one
    assert module.circles(edges) == []
