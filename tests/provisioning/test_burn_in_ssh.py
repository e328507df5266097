"""The NCCL burn-in (launcher/provisioning/burn_in.py) through the health gate on real
sshd nodes (tests/netns.py) whose image puts the fake `mpirun` / `all_reduce_perf`
(tests/fakes/bin, nccl-tests' real output format) first on PATH: one slow link names the
right node. Also the parser on nccl-tests' output and the skip/warn paths."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.clouds.base import ClusterInfo
from launcher.provisioning.burn_in import parse_all_reduce, run_burn_in
from launcher.provisioning.health_gate import HealthGateError, gate
from launcher.runtime.execution import close_runners, open_runners
from launcher.runtime.runner import CommandResult
from launcher.state.db import ClusterStatus, PlacementRecord, StateDB
from launcher.task.model import Task
from tests.fakes import BIN_DIR, write_config
from tests.netns import SSHNodeSet

NODE_ENV = {"PATH": f"{BIN_DIR}:/usr/local/bin:/usr/bin:/bin",
            "LAUNCHER_HEALTH_KMSG_PATH": "/root/kern.log"}
TASK = Task.from_dict({"run": "true", "num_nodes": 3, "resources": {
    "accelerators": "H100:8", "health": {"burn_in": "nccl"}}})
NCCL_TESTS_OUTPUT = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
   536870912     134217728     float     sum      -1   2876.1  186.67  350.00      0   2871.3  186.98  350.59      0
  1073741824     268435456     float     sum      -1   5634.2  190.58  357.33      0   5621.0  191.02  358.17      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 353.98
#
"""


@pytest.fixture
def gang(ssh_nodes: Callable[..., SSHNodeSet], launcher_home: Path
         ) -> Iterator[tuple[SSHNodeSet, ClusterInfo]]:
    """Three healthy 8 x H100 nodes, recorded UP as an AWS p5.48xlarge cluster 'bi' (the
    catalog gives it EFA at 3200 Gb/s per node: the burn-in's bar is 1920)."""
    nodes = ssh_nodes(3, envs=[NODE_ENV] * 3)
    for node in nodes:
        (node.home / "kern.log").write_text("[    0.000000] Linux version 5.15.0\n")
    cluster = nodes.cluster_info("bi", cloud="aws")
    with StateDB() as db:
        db.create_cluster("bi", PlacementRecord(
            cloud="aws", region="us-east-1", zone=None, instance_type="p5.48xlarge",
            num_nodes=3, use_spot=False, accelerator="H100", accelerator_count=8,
            resources="3x H100:8"), ssh_key_path=nodes.client_key_path)
        db.set_nodes("bi", cluster.nodes)
        db.set_status("bi", ClusterStatus.UP)
    try:
        yield nodes, cluster
    finally:
        nodes.close()


def _gate(cluster: ClusterInfo) -> tuple[list, list[str]]:
    said: list[str] = []
    runners = open_runners(cluster)
    try:
        with StateDB() as db:
            return gate(db, cluster, runners, TASK, said.append), said
    finally:
        close_runners(runners)


def _events() -> list[tuple[str, str]]:
    with StateDB() as db:
        return [(e.kind, e.message) for e in db.events("bi") if e.kind.startswith("health-burn")]


def test_a_fast_fabric_passes_the_burn_in(gang: tuple[SSHNodeSet, ClusterInfo]) -> None:
    _, cluster = gang
    reports, said = _gate(cluster)
    assert [r.status for r in reports] == ["ok", "ok", "ok"]
    assert "NCCL burn-in: all_reduce_perf across 3 node(s)" in said
    ((kind, text),) = _events()
    assert kind == "health-burn-in-ok"
    assert text.startswith("burn-in: bus bandwidth 2976 Gb/s (fabric 3200 Gb/s, bar 1920)")


def test_one_slow_link_names_the_right_node(gang: tuple[SSHNodeSet, ClusterInfo]) -> None:
    nodes, cluster = gang
    write_config(nodes[0].home / ".fake-gpus.json",  # the head runs mpirun
                 nccl_gbps={nodes[2].host: 400})
    with pytest.raises(HealthGateError) as err:
        _gate(cluster)
    assert err.value.rank == 2
    assert [n.status for n in err.value.nodes] == ["ok", "ok", "fail"]
    nccl = {c.name: c for c in err.value.nodes[2].checks}["nccl"]
    assert nccl.summary == ("burn-in: bus bandwidth 372 Gb/s is below 1920 (60% of the "
                            "fabric's 3200 Gb/s); slow: node 2")
    assert "nodes 0-1: 2976 Gb/s" in nccl.evidence
    assert "nodes 1-2: 372 Gb/s" in nccl.evidence and "nodes 2-0: 372 Gb/s" in nccl.evidence
    ((kind, _),) = _events()
    assert kind == "health-burn-in-fail"


def test_parse_all_reduce_takes_the_largest_message() -> None:
    bw, lines = parse_all_reduce(NCCL_TESTS_OUTPUT)
    assert bw == 357.33 and lines[0].startswith("1073741824")
    assert parse_all_reduce("# Avg bus bandwidth    : 12.5 \n")[0] == 12.5
    assert parse_all_reduce("mpirun: command not found")[0] is None


class _Head:
    def __init__(self, stdout: str, returncode: int = 0) -> None:
        self.stdout, self.returncode = stdout, returncode

    def run(self, command: str, timeout: float | None = None) -> CommandResult:
        assert "all_reduce_perf" in command and "mpirun --allow-run-as-root" in command
        return CommandResult(self.returncode, self.stdout, "")


def test_no_nccl_tests_or_no_catalog_figure_only_warns(gang: tuple[SSHNodeSet, ClusterInfo]
                                                       ) -> None:
    _, cluster = gang
    skipped = run_burn_in(cluster, _Head("LAUNCHER_BURN_IN_SKIP: mpirun not found\n"),  # type: ignore[arg-type]
                          8, 3200.0)
    assert skipped.status == "warn" and skipped.summary == "burn-in skipped: mpirun not found"
    unknown = run_burn_in(cluster, _Head(NCCL_TESTS_OUTPUT), 8, None)  # type: ignore[arg-type]
    assert unknown.status == "warn" and "no fabric figure" in unknown.summary
    broken = run_burn_in(cluster, _Head("NCCL error", 1), 8, 3200.0)  # type: ignore[arg-type]
    assert broken.status == "warn" and "no bus bandwidth" in broken.summary
