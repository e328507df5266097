"""health_gate's pure parts: which accelerators are checked, the expectation, report parsing."""

from __future__ import annotations

import json

import pytest

from launcher.clouds.base import ClusterInfo, NodeInfo
from launcher.provisioning.health_gate import expectation, is_nvidia, parse_report
from launcher.state.db import ClusterRecord, ClusterStatus


@pytest.mark.parametrize(("name", "nvidia"), [
    ("H100", True), ("A100-80GB", True), ("RTX4090", True), ("T4g", True), ("GB200", True),
    ("tpu-v5p-8", False), ("Trainium2", False), ("Inferentia2", False), ("MI300X", False),
    ("Radeon Pro V520", False), ("Gaudi HL-205", False), (None, False),
])
def test_is_nvidia(name: str | None, nvidia: bool) -> None:
    assert is_nvidia(name) is nvidia


def _rec(accelerator: str | None, count: float) -> ClusterRecord:
    return ClusterRecord(
        name="c", cloud="aws", region="us-east-1", zone=None, instance_type="x", num_nodes=2,
        use_spot=False, accelerator=accelerator, accelerator_count=count,
        status=ClusterStatus.UP, hourly_cost=0.0, autostop_minutes=None, autostop_down=False,
        launched_at=0.0, status_changed_at=0.0, task_name=None, resources="", ssh_key_path=None,
        owner=None)


def _cluster(cloud: str = "aws") -> ClusterInfo:
    nodes = tuple(NodeInfo(rank=i, node_id=f"i-{i}", internal_ip=f"10.0.0.{i}")
                  for i in range(2))
    return ClusterInfo(cluster_name="c", cloud=cloud, region="us-east-1", zone=None,
                       instance_type="x", use_spot=False, nodes=nodes)


def test_expectation_only_expects_nvidia_gpus() -> None:
    gpu = expectation(_cluster(), _rec("H100", 8), None, "dcgm-1")
    assert (gpu["gpus"], gpu["model"], gpu["gate"], gpu["simulated"]) == (8, "H100", "dcgm-1",
                                                                          False)
    trn = expectation(_cluster(), _rec("Trainium2", 16), None)
    assert (trn["gpus"], trn["model"]) == (0.0, None)
    assert expectation(_cluster("local"), _rec("H100", 1), None)["simulated"] is True


def test_parse_report_turns_garbage_into_a_failed_node() -> None:
    bad = parse_report(1, "h", 0, "Traceback (most recent call last)\n", "")
    assert bad.status == "fail" and bad.error and "health checker failed" in bad.error
    crashed = parse_report(1, "h", 127, "", "bash: python3: command not found")
    assert crashed.error is not None and "python3: command not found" in crashed.error
    doc = {"status": "warn", "seconds": 0.3, "checks": [
        {"name": "pcie", "status": "warn", "summary": "x8", "evidence": ["l"], "seconds": 0.0}]}
    ok = parse_report(0, "h", 0, "noise\n" + json.dumps(doc) + "\n", "")
    assert ok.status == "warn" and ok.findings()[0].evidence == ("l",)
    assert ok.headline() == "node 0 (h): pcie: x8"


def test_watch_config_stop_rules_and_the_local_clouds_default() -> None:
    from launcher.provisioning.prepare import watch_config
    from launcher.task.model import Task

    def task(**health: object) -> Task:
        return Task.from_dict({"run": "true", "resources": {"health": health or {"gate": "quick"}}})

    plain = watch_config(task(), "aws", managed=False)
    assert plain is not None and plain["watch_seconds"] == 5.0 and plain["stop"] is False
    assert watch_config(task(), "aws", managed=True)["stop"] is True  # type: ignore[index]
    assert watch_config(task(on_failure="stop"), "aws", managed=False)["stop"] is True  # type: ignore[index]
    assert watch_config(task(on_failure="warn"), "aws", managed=True)["stop"] is False  # type: ignore[index]
    assert watch_config(task(), "local", managed=True) is None  # simulated GPUs: off unless set
    assert watch_config(task(watch_seconds=1), "local", managed=True)["watch_seconds"] == 1.0  # type: ignore[index]
    assert watch_config(task(watch_seconds=0), "aws", managed=False) is None
    off = Task.from_dict({"run": "true", "resources": {"health": "off"}})
    assert watch_config(off, "aws", managed=True) is None


def test_expectation_asks_for_the_fabric_the_task_or_the_catalog_names() -> None:
    import dataclasses

    from launcher.task.model import Task

    def task(network: object) -> Task:
        return Task.from_dict({"run": "true", "num_nodes": 2,
                               "resources": {"accelerators": "H100:8", "network": network}})

    rec = dataclasses.replace(_rec("H100", 8), instance_type="p5.48xlarge")
    assert expectation(_cluster(), rec, task("efa"))["efa"] == 1
    assert expectation(_cluster(), rec, task("infiniband"))["ib"] == 1
    rdma = expectation(_cluster(), rec, task("rdma"))  # p5.48xlarge: EFA per the catalog
    assert rdma.get("efa") == 1 and "ib" not in rdma
    assert "efa" not in expectation(_cluster(), rec, task("any"))
    assert "efa" not in expectation(_cluster(), rec, None)
