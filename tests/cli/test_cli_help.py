"""Every command and every option says what it is for (issue #30): a test that walks the parsers."""

from __future__ import annotations

import argparse
import subprocess

from dayflow_tui.cli.parser import build_parser
from dayflow_tui.tui.launch import build_parser as build_tui_parser

from ..conftest import BIN, dayflow_cmd


def _missing(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    if not (parser.description or "").strip():
        missing.append(f"{path}: no description line")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {choice.dest for choice in action._choices_actions if (choice.help or "").strip()}
            for name, sub in action.choices.items():
                if name not in listed:
                    missing.append(f"{path} {name}: not described in {path} --help")
                missing += _missing(sub, f"{path} {name}")
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if not (action.help or "").strip():
            missing.append(f"{path} {'/'.join(action.option_strings) or action.metavar or action.dest}: no help")
    return missing


def test_every_command_and_option_has_help():
    assert _missing(build_parser(), "dayflow") == []
    assert _missing(build_tui_parser(), "dayflow-tui") == []


def test_a_subcommand_help_page_starts_with_what_it_does():
    for command, says in (("runs", "List runs, newest first"), ("show", "Print a run's transcript")):
        page = subprocess.run(dayflow_cmd(command, "--help"), capture_output=True, text=True, timeout=60)
        assert page.returncode == 0
        paragraphs = page.stdout.split("\n\n")
        assert paragraphs[1].startswith(says), page.stdout  # the line under the usage
    runs = subprocess.run(dayflow_cmd("runs", "--help"), capture_output=True, text=True, timeout=60).stdout
    limit = next(line for line in runs.splitlines() if line.strip().startswith("--limit"))
    assert len(limit.split()) > 2, runs  # --limit N, then what it does
    tui = subprocess.run([str(BIN / "dayflow-tui"), "--help"], capture_output=True, text=True, timeout=60)
    assert tui.returncode == 0 and tui.stdout.split("\n\n")[1].strip()
