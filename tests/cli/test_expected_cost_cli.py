"""`launcher cost` and `launch --dryrun` show, for spot tasks, list price, expected cost and
the interruption rate with its source (human table and --json), as real subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_catalog_cli import run, run_json

SPOT = "name: t\nresources:\n  accelerators: V100:1\n  use_spot: true\n"
ON_DEMAND = "name: t\nresources:\n  accelerators: V100:1\n"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def _task(tmp_path: Path, text: str) -> str:
    path = tmp_path / "task.yaml"
    path.write_text(text)
    return str(path)


def test_cost_json_has_list_price_expected_cost_and_rate(tmp_path: Path, home: Path) -> None:
    plan = run_json("cost", _task(tmp_path, SPOT), "--hours", "10", "--json", home=home)
    assert plan["work_hours"] == 10 and plan["restart_overhead_hours"] == pytest.approx(25 / 60)
    assert plan["order_differs_from_list_price"] is False and plan["reordered"] == []
    sources = set()
    for row in plan["placements"]:
        assert row["list_price_per_hour"] == row["hourly_cost"]
        assert row["interruption_rate_per_hour"] > 0
        assert row["expected_cost"] >= row["total_cost"]  # restarts only add
        assert row["expected_hourly_cost"] * 10 == pytest.approx(row["expected_cost"])
        sources.add(row["interruption_source"].split(" (")[0])
    assert "aws spot advisor band >20%" in sources and "default for gcp" in sources
    costs = [r["expected_hourly_cost"] for r in plan["placements"] if r["preference"] == 0]
    assert costs == sorted(costs)  # ranked on expected cost


def test_dryrun_table_shows_expected_cost_and_rate_source(tmp_path: Path, home: Path) -> None:
    proc = run("launch", _task(tmp_path, SPOT), "--dryrun", home=home)
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[0]
    assert "$/H" in header and "EXPECTED" in header and "INTERRUPTS/NODE-H" in header
    assert "/h, aws spot advisor band >20%" in proc.stdout
    assert "EXPECTED: cost to finish 1 h of work, counting a 25-min restart" in proc.stdout


def test_on_demand_plans_have_no_expected_columns(tmp_path: Path, home: Path) -> None:
    task = _task(tmp_path, ON_DEMAND)
    proc = run("launch", task, "--dryrun", home=home)
    assert proc.returncode == 0 and "EXPECTED" not in proc.stdout
    plan = run_json("launch", task, "--dryrun", "--json", home=home)
    assert plan["work_hours"] is None and plan["order_differs_from_list_price"] is False
    row = plan["placements"][0]
    assert row["expected_hourly_cost"] == row["hourly_cost"] == row["list_price_per_hour"]
    assert row["interruption_rate_per_hour"] is None and row["interruption_source"] is None
