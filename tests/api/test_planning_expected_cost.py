"""The planning API ranks spot tasks on expected cost and says when that order differs
from the list-price order (launcher.provisioning.planning.plan, `observed` rates)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.api import planning
from launcher.catalog.interruption import InterruptionRate
from launcher.task.model import Task

SPOT = "resources:\n  accelerators: V100:1\n  use_spot: true\n  cloud: aws\n  region: us-east-1\n"


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))


def test_observed_preemptions_reorder_and_the_note_names_the_swap() -> None:
    task = Task.from_yaml_str(SPOT)
    base = planning.plan(task)
    first, second = base.placements[0], base.placements[1]
    assert first.hourly_cost < second.hourly_cost and not base.reordered
    # the cheapest zone was just preempted: 2/h more
    seen = {("aws", first.region, first.zone): InterruptionRate(2.0, "+2/h from 1 recent preemption")}
    plan = planning.plan(task, observed=seen)
    assert plan.placements[0].zone != first.zone
    moved = next(p for p in plan.placements if p.zone == first.zone)
    assert moved.interruption_source is not None and "recent preemption" in moved.interruption_source
    assert plan.reordered and plan.reordered[0].cheaper.zone == first.zone
    (note,) = [n for n in plan.notes if n.startswith("Expected cost changes the list-price order")]
    assert f"{first.region}/{first.zone}" in note and "ahead of" in note
    js = plan.to_json()
    assert js["order_differs_from_list_price"] is True
    assert js["reordered"][0]["cheaper_by_list_price"].startswith(f"aws {first.region}/{first.zone} ")


def test_a_zone_that_never_finishes_in_expectation_says_so() -> None:
    task = Task.from_yaml_str(SPOT)
    first = planning.plan(task).placements[0]
    seen = {("aws", first.region, first.zone): InterruptionRate(10.0, "+10/h")}
    plan = planning.plan(task, observed=seen)
    assert plan.placements[-1].zone == first.zone
    assert plan.placements[-1].expected_cost == float("inf")
    assert any("never finish in expectation" in n for n in plan.notes)
    row = [r for r in plan.to_json(None)["placements"] if first.zone in r["zones"]]
    assert row and row[0]["expected_cost"] is None and row[0]["list_price_per_hour"] > 0


def test_hours_and_work_default() -> None:
    task = Task.from_yaml_str(SPOT)
    assert planning.plan(task).work_hours == 1.0
    p = planning.cost(task, hours=48)
    assert p.work_hours == 48 and p.placements[0].expected_cost == pytest.approx(
        p.placements[0].expected_hourly_cost * 48)


def test_the_tasks_restart_overhead_and_duration_drive_the_model() -> None:
    task = Task.from_yaml_str(
        SPOT + "  job_recovery: {strategy: deadline, deadline: 36h, duration: 10h, "
        "restart_overhead: 60m}\n")
    plan = planning.plan(task)
    assert plan.restart_overhead_hours == pytest.approx(1.0) and plan.work_hours == 10.0
    p = plan.placements[0]
    lam = p.interruption_rate_per_hour
    assert lam is not None
    assert p.expected_cost == pytest.approx(p.hourly_cost * 10.0 / (1 - lam * 1.0))
    assert planning.cost(task, hours=3).work_hours == 3.0  # --hours wins
