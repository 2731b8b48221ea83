"""Dollars in the `dayflow` command: runs (and --json's split), show, tasks and spend, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
from decimal import Decimal

from dayflow_tui.money.cost import format_usd

from ..conftest import dayflow_cmd
from ..loopback_api import LoopbackAPI

# The offline model priced like Claude Sonnet through the settings: $3 in, $15 out per million tokens;
# cache writes and reads follow Anthropic's multipliers (1.25x and 0.1x the input rate).
PRICED = json.dumps({"offline": {"input": 3, "output": 15}})
UNCACHED, WRITE, READ, OUTPUT = Decimal(3), Decimal("3.75"), Decimal("0.3"), Decimal(15)


def dayflow(*args: str, db, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "DAYFLOW_OFFLINE_DELAY": "0", "DAYFLOW_PRICES": PRICED, **(env or {})}
    return subprocess.run(dayflow_cmd(*args, "--db", str(db)), capture_output=True, text=True, env=full,
                          timeout=120, stdin=subprocess.DEVNULL)


def expected_split(row: dict) -> dict[str, Decimal]:
    uncached = row["input_tokens"] - row["cache_write_tokens"] - row["cache_read_tokens"]
    return {"uncached_input": uncached * UNCACHED / 1_000_000,
            "cache_write": row["cache_write_tokens"] * WRITE / 1_000_000,
            "cache_read": row["cache_read_tokens"] * READ / 1_000_000,
            "output": row["output_tokens"] * OUTPUT / 1_000_000,
            "web_search": Decimal(0)}  # the brief never searches


def test_runs_show_tasks_and_spend_carry_dollars(db_target):
    assert dayflow("brief", db=db_target, env={"DAYFLOW_FAKE_NOW": "2026-11-20T10:00:00"}).returncode == 0
    assert dayflow("brief", "--crash-after", "2", db=db_target,
                   env={"DAYFLOW_FAKE_NOW": "2026-12-02T10:00:00"}).returncode != 0
    rows = json.loads(dayflow("runs", "--json", db=db_target).stdout)
    assert [r["status"] for r in rows] == ["interrupted", "done"]
    for row in rows:
        split = expected_split(row)
        assert row["cost_split_usd"] == {k: float(round(v, 6)) for k, v in split.items()}
        assert row["cost_usd"] == float(round(sum(split.values()), 6)) > 0
        assert row["cache_hit_rate"] == round(row["cache_read_tokens"] / row["input_tokens"], 4)
        assert row["budget_usd"] is None and row["unpriced_models"] == []
    crashed, done = rows
    done_cost = sum(expected_split(done).values())

    listed = dayflow("runs", db=db_target).stdout.splitlines()
    assert f"cost={format_usd(done_cost)}" in listed[1]
    assert f"cache={done['cache_read_tokens'] / done['input_tokens']:.0%}" in listed[1]

    shown = dayflow("show", done["id"], db=db_target)
    assert shown.returncode == 0
    assert f"cost={format_usd(done_cost)}" in shown.stdout
    # The last step's line ends with the run's cumulative tokens and dollars, whole within 80 columns.
    assert f"run {done['input_tokens']}/{done['output_tokens']}, {format_usd(done_cost)}" in shown.stdout

    tasks = json.loads(dayflow("tasks", "--json", db=db_target).stdout)
    made = [t for t in tasks if t["run_id"] == done["id"]]
    assert len(made) == 6 and {t["run_cost_usd"] for t in made} == {done["cost_usd"]}
    assert f"(run {done['id']}, {format_usd(done_cost)})" in dayflow("tasks", db=db_target).stdout

    now = {"DAYFLOW_FAKE_NOW": "2026-12-03T09:00:00"}
    everything = json.loads(dayflow("spend", "--json", db=db_target, env=now).stdout)
    assert everything["total"]["cost_usd"] == float(round(sum(sum(expected_split(r).values()) for r in rows), 6))
    assert everything["total"]["runs"] == 2 and everything["total"]["calls"] == 5
    week = json.loads(dayflow("spend", "--since", "7d", "--by", "day", "--json", db=db_target, env=now).stdout)
    assert [r["day"] for r in week["rows"]] == ["2026-12-02"]
    assert week["total"]["cost_usd"] == crashed["cost_usd"]
    text = dayflow("spend", "--by", "agent", db=db_target, env=now).stdout.splitlines()
    assert text[0] == "spend all time, by agent" and text[2].split()[0] == "brief"
    assert text[-1].split()[-1] == format_usd(Decimal(str(everything["total"]["cost_usd"])))

    bad = dayflow("spend", "--since", "last tuesday", db=db_target)
    assert bad.returncode == 64 and len(bad.stderr.strip().splitlines()) == 1 and "--since" in bad.stderr


def test_a_model_without_a_price_says_so_everywhere(db_path):
    with LoopbackAPI() as api:
        env = api.env()
        assert dayflow("brief", "--model", "mystery-model", db=db_path, env=env).returncode == 0
        assert api.calls == 3
    [row] = json.loads(dayflow("runs", "--json", db=db_path).stdout)
    assert row["cost_usd"] is None and row["cost_split_usd"] is None
    assert row["unpriced_models"] == ["mystery-model"]
    assert "cost=unknown" in dayflow("runs", db=db_path).stdout
    shown = dayflow("show", row["id"], db=db_path).stdout
    assert "cost=price unknown" in shown and "$" not in shown.split("\n", 1)[0]
    spend = dayflow("spend", db=db_path).stdout
    assert "price unknown (3 call(s))" in spend


def test_show_marks_each_resume_with_what_it_did_not_pay_again(db_path):
    assert dayflow("brief", "--crash-after", "2", db=db_path).returncode != 0
    [crashed] = json.loads(dayflow("runs", "--json", db=db_path).stdout)
    assert dayflow("resume", db=db_path).returncode == 0
    shown = dayflow("show", crashed["id"], db=db_path, env={"COLUMNS": "200"}).stdout
    paid_before = format_usd(Decimal(str(crashed["cost_usd"])))
    [line] = [line for line in shown.splitlines() if line.startswith("resumed ")]
    assert line.endswith(f"(was interrupted): the 2 committed step(s) ({paid_before}) were not paid again")
    assert shown.index(line) < shown.index("step 3 ·")  # right before the first step it paid for
