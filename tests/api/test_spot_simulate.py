"""launcher.api.spot_simulate: the task's catalog prices, trace prices, and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.api.spot_simulate import SpotTraceError, simulate_task
from launcher.errors import UsageError


def setup(tmp_path: Path, doc: dict[str, object], nodes: int = 1) -> tuple[str, str]:
    task = tmp_path / "t.yaml"
    task.write_text(f"name: s\nnum_nodes: {nodes}\nresources:\n  accelerators: V100:1\n")
    trace = tmp_path / "zone-a_v100_1.json"
    trace.write_text(json.dumps(doc))
    return str(task), str(trace)


def test_catalog_prices_and_gang_size(tmp_path: Path) -> None:
    task, trace = setup(tmp_path, {"metadata": {"gap_seconds": 3600}, "data": [2] * 30}, nodes=2)
    sim = simulate_task(task, hours=5, traces=[trace], deadline_h=10, restart_overhead_min=0)
    assert sim.n_nodes == 2 and not sim.trace_prices
    p = sim.placement
    assert 0 < p.spot_h < p.on_demand_h
    assert sim.result.cost == pytest.approx(5 * 2 * p.spot_h)
    assert sim.result.on_demand_cost == pytest.approx(5 * 2 * p.on_demand_h)
    doc = sim.to_json()
    assert doc["spot_price_source"] == "catalog" and doc["num_nodes"] == 2


def test_errors(tmp_path: Path) -> None:
    task, trace = setup(tmp_path, {"metadata": {"gap_seconds": 60}, "data": [1]})
    with pytest.raises(SpotTraceError, match="--trace"):
        simulate_task(task, hours=1, traces=[str(tmp_path / "missing.json")])
    with pytest.raises(UsageError, match="--deadline"):
        simulate_task(task, hours=5, traces=[trace], deadline_h=5)
    with pytest.raises(UsageError, match="--hours"):
        simulate_task(task, hours=0, traces=[trace])
    with pytest.raises(UsageError, match="--trace is required"):
        simulate_task(task, hours=1, traces=[])


def test_defaults_come_from_the_tasks_job_recovery(tmp_path: Path) -> None:
    task = tmp_path / "d.yaml"
    task.write_text(
        "name: d\nresources:\n  accelerators: V100:1\n  use_spot: true\n  job_recovery:\n"
        "    strategy: deadline\n    deadline: 15h\n    duration: 10h\n    restart_overhead: 30m\n"
        "    policy: uniform_progress\n"
    )
    trace = tmp_path / "z_v100_1.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 1800}, "data": [1, 0, 0, 1] * 20}))
    sim = simulate_task(str(task), hours=None, traces=[str(trace)])
    assert sim.work_h == 10 and sim.result.deadline_h == 15 and sim.restart_overhead_h == 0.5
    assert sim.result.policy == "uniform_progress" and sim.result.deadline_met
    # options win over the task's values
    sim2 = simulate_task(str(task), hours=4, traces=[str(trace)], deadline_h=8, policy="greedy")
    assert sim2.work_h == 4 and sim2.result.deadline_h == 8 and sim2.result.policy == "greedy"


def test_hours_required_without_a_task_duration(tmp_path: Path) -> None:
    task, trace = setup(tmp_path, {"metadata": {"gap_seconds": 60}, "data": [1]})
    with pytest.raises(UsageError, match="--hours is required"):
        simulate_task(task, hours=None, traces=[trace])


def test_an_absolute_deadline_counts_from_now(tmp_path: Path) -> None:
    import datetime as dt

    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=20)
    task = tmp_path / "a.yaml"
    task.write_text(
        "name: a\nresources:\n  accelerators: V100:1\n  use_spot: true\n  job_recovery:\n"
        f"    strategy: deadline\n    deadline: '{at.strftime('%Y-%m-%dT%H:%M:%SZ')}'\n"
        "    duration: 10h\n"
    )
    trace = tmp_path / "z_v100_1.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 1800}, "data": [1, 0] * 40}))
    sim = simulate_task(str(task), hours=None, traces=[str(trace)])
    assert sim.result.deadline_h == pytest.approx(20, abs=0.01)
    assert sim.result.deadline_met


REPO = Path(__file__).resolve().parents[2]
SPOT_ORDERED = str(REPO / "task_examples" / "spot-ordered.yaml")  # H100:8 spot, cheapest: use2-az1


def test_prices_come_from_the_placement_the_trace_records(tmp_path: Path) -> None:
    """A trace of aws use2-az2 p5.48xlarge is priced at use2-az2, not at the task's
    cheapest zone (use2-az1), and says so."""
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({
        "metadata": {"gap_seconds": 3600, "cloud": "aws", "zone": "use2-az2",
                     "instance_type": "p5.48xlarge"}, "data": [1] * 40}))
    sim = simulate_task(SPOT_ORDERED, hours=5, traces=[str(trace)], deadline_h=10)
    assert sim.placement.description == "aws use2-az2 p5.48xlarge x1"
    assert sim.placement.matches_trace
    bare = tmp_path / "u.json"  # says nothing of where it was recorded
    bare.write_text(json.dumps({"metadata": {"gap_seconds": 3600}, "data": [1] * 40}))
    cheapest = simulate_task(SPOT_ORDERED, hours=5, traces=[str(bare)], deadline_h=10)
    assert cheapest.placement.description == "aws use2-az1 p5.48xlarge x1"
    assert not cheapest.placement.matches_trace
    doc = sim.to_json()
    assert doc["placement_matches_trace"] is True
    assert doc["trace_origins"] == [{  # type: ignore[comparison-overlap]
        "file": "t.json", "cloud": "aws", "region": None, "zone": "use2-az2",
        "instance_type": "p5.48xlarge", "accelerator": None, "nodes": None, "synthetic": None,
        "from_file_name": False}]


def test_a_trace_of_another_machine_is_labelled_as_such(tmp_path: Path) -> None:
    """The public V100 trace of us-west-2a replayed for an H100:8 task: the trace is
    labelled with what it is (aws us-west-2a V100), the prices are the task's cheapest
    placement, and the result says that no placement of the task matches the trace."""
    trace = tmp_path / "aws-02-15-2023" / "us-west-2a_v100_1.json"
    trace.parent.mkdir()
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 3600}, "data": [1, 1, 0] * 20}))
    sim = simulate_task(SPOT_ORDERED, hours=5, traces=[str(trace)], deadline_h=10)
    (origin,) = sim.origins
    assert origin.describe() == "aws us-west-2a V100:1, from the file name"
    assert not sim.placement.matches_trace
    assert sim.placement.description == "aws use2-az1 p5.48xlarge x1"


def test_a_zone_name_prices_from_its_region(tmp_path: Path) -> None:
    """A V100 task and a V100 trace of zone us-west-2a: priced in us-west-2, the trace's
    region (zone names map to zone IDs per account)."""
    task = tmp_path / "v.yaml"
    task.write_text("name: v\nresources:\n  accelerators: V100:1\n  use_spot: true\n")
    trace = tmp_path / "aws-02-15-2023" / "us-west-2a_v100_1.json"
    trace.parent.mkdir()
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 3600}, "data": [1] * 40}))
    sim = simulate_task(str(task), hours=5, traces=[str(trace)], deadline_h=10)
    assert sim.placement.matches_trace, sim.placement
    assert sim.placement.description.startswith("aws usw2-"), sim.placement
