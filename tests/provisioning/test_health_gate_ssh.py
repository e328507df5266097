"""The health gate on real sshd nodes (tests/netns.py) whose "image" puts the fake
nvidia-smi/dcgmi (tests/fakes/bin) first on PATH and points LAUNCHER_HEALTH_KMSG_PATH at a
kernel log file the test writes XID lines into: the checker runs the real commands it
finds, exactly as on a cloud node. Also `launcher health` (table, --json, exit code)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.clouds.base import ClusterInfo
from launcher.provisioning.health_gate import HealthGateError, gate
from launcher.runtime.execution import close_runners, open_runners
from launcher.state.db import ClusterStatus, PlacementRecord, StateDB
from launcher.task.model import Task
from tests.fakes import BIN_DIR, write_config
from tests.netns import SSHNodeSet

NODE_ENV = {"PATH": f"{BIN_DIR}:/usr/local/bin:/usr/bin:/bin",
            "LAUNCHER_HEALTH_KMSG_PATH": "/root/kern.log"}
XID_79 = "[ 9123.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, GPU has fallen off the bus."
TASK = Task.from_dict({"run": "true", "resources": {"accelerators": "H100:8"}})


@pytest.fixture
def gang(ssh_nodes: Callable[..., SSHNodeSet], launcher_home: Path
         ) -> Iterator[tuple[SSHNodeSet, ClusterInfo]]:
    """Two healthy 8 x H100 nodes, recorded UP in the state DB as cluster 'hg'."""
    nodes = ssh_nodes(2, envs=[NODE_ENV, NODE_ENV])
    for node in nodes:
        (node.home / "kern.log").write_text("[    0.000000] Linux version 5.15.0\n")
    cluster = nodes.cluster_info("hg")
    with StateDB() as db:
        db.create_cluster("hg", PlacementRecord(
            cloud="ssh", region="lab", zone=None, instance_type="p5.48xlarge", num_nodes=2,
            use_spot=False, accelerator="H100", accelerator_count=8, resources="2x H100:8"),
            ssh_key_path=nodes.client_key_path)
        db.set_nodes("hg", cluster.nodes)
        db.set_status("hg", ClusterStatus.UP)
    try:
        yield nodes, cluster
    finally:
        nodes.close()


def _gate(cluster: ClusterInfo, task: Task = TASK) -> tuple[list, list[str]]:
    said: list[str] = []
    runners = open_runners(cluster)
    try:
        with StateDB() as db:
            return gate(db, cluster, runners, task, said.append), said
    finally:
        close_runners(runners)


def _events(kind_prefix: str = "health-") -> list[tuple[str, str]]:
    with StateDB() as db:
        return [(e.kind, e.message) for e in db.events("hg") if e.kind.startswith(kind_prefix)]


def test_a_healthy_gang_passes(gang: tuple[SSHNodeSet, ClusterInfo]) -> None:
    _, cluster = gang
    nodes, said = _gate(cluster)
    assert [n.status for n in nodes] == ["ok", "ok"]
    assert {c.name for c in nodes[0].checks} == {"gpus", "ecc", "pcie", "xid"}
    assert said == ["Checking node health (quick) on 2 node(s)"]
    assert [k for k, _ in _events()] == ["health-ok", "health-ok"]


def test_node_1_with_7_of_8_gpus_fails_the_gate_naming_it(
        gang: tuple[SSHNodeSet, ClusterInfo]) -> None:
    nodes, cluster = gang
    write_config(nodes[1].home / ".fake-gpus.json", count=7)
    with pytest.raises(HealthGateError) as err:
        _gate(cluster)
    assert err.value.rank == 1
    assert "node 1" in str(err.value) and "7 GPU(s) visible, 8 paid for" in str(err.value)
    assert [n.status for n in err.value.nodes] == ["ok", "fail"]
    (fail,) = [m for k, m in _events() if k == "health-fail"]
    assert fail.startswith("node 1 ") and "gpus fail: 7 GPU(s) visible" in fail


def test_an_xid_79_in_the_kernel_log_fails_the_gate_with_the_line(
        gang: tuple[SSHNodeSet, ClusterInfo]) -> None:
    nodes, cluster = gang
    with open(nodes[0].home / "kern.log", "a") as f:
        f.write(XID_79 + "\n")
    with pytest.raises(HealthGateError) as err:
        _gate(cluster)
    assert err.value.rank == 0
    assert "Xid 79: GPU has fallen off the bus" in str(err.value)
    assert XID_79 in str(err.value)
    assert XID_79 in dict(_events())["health-fail"]


def test_on_failure_warn_goes_on_and_gate_off_runs_nothing(
        gang: tuple[SSHNodeSet, ClusterInfo]) -> None:
    nodes, cluster = gang
    write_config(nodes[1].home / ".fake-gpus.json", count=7)
    warn = Task.from_dict({"run": "true", "resources": {
        "accelerators": "H100:8", "health": {"on_failure": "warn"}}})
    reports, said = _gate(cluster, warn)
    assert [n.status for n in reports] == ["ok", "fail"]
    assert said[-1].startswith("Health fail: node 1 ")
    off = Task.from_dict({"run": "true", "resources": {"accelerators": "H100:8", "health": "off"}})
    assert _gate(cluster, off) == ([], [])


def test_launcher_health_table_json_and_exit_code(
        gang: tuple[SSHNodeSet, ClusterInfo], capsys: pytest.CaptureFixture[str]) -> None:
    from launcher.cli import main

    nodes, _ = gang
    with pytest.raises(SystemExit) as code:
        main(["health", "hg"])
    out = capsys.readouterr().out
    assert code.value.code == 0
    assert "NODE" in out and "CHECK" in out and "8 x NVIDIA H100 80GB HBM3" in out
    write_config(nodes[1].home / ".fake-gpus.json", ecc_uncorrected={"2": 3})
    with pytest.raises(SystemExit) as code:
        main(["health", "hg", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code.value.code == 1
    assert doc["status"] == "fail"
    ecc = {c["name"]: c for c in doc["nodes"][1]["checks"]}["ecc"]
    assert ecc["status"] == "fail"
    assert ecc["evidence"] == ["GPU 2 (00000000:38:00.0): 3 uncorrected ECC error(s)"]
    assert doc["nodes"][0]["status"] == "ok"


def test_launcher_top_once_and_json(
        gang: tuple[SSHNodeSet, ClusterInfo], capsys: pytest.CaptureFixture[str]) -> None:
    from launcher.cli import main

    nodes, _ = gang
    write_config(nodes[1].home / ".fake-gpus.json", count=2, util={"0": 93},
                 mem_used_mib={"0": 40960}, throttle={"0": "0x0000000000000040"})
    with pytest.raises(SystemExit) as code:
        main(["top", "hg", "--once"])
    out = capsys.readouterr().out.splitlines()
    assert code.value.code == 0
    assert out[0].split() == ["NODE", "HOST", "GPU", "UTIL", "MEMORY", "POWER", "TEMP",
                              "THROTTLE"]
    assert len(out) == 1 + 8 + 2
    row = out[9].split()
    assert row[0] == "1" and row[2:] == ["0", "93%", "40.0/80", "GiB", "70", "W", "34", "C",
                                         "hw", "thermal"]
    with pytest.raises(SystemExit) as code:
        main(["top", "hg", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert [len(n["gpus"]) for n in doc["nodes"]] == [8, 2]
    assert doc["nodes"][1]["gpus"][0]["throttle"] == ["hw thermal"]
