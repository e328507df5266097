"""Nebius end to end, minus the VM: the real launch path through the `nebius` SDK against
the in-process gRPC fake (tests/nebius_fake.py), with sshd bodies at the instances'
private IPs (tests/cloud_bodies.py; the key from the cloud-init user data).

`launch` plans on the bundled catalog (the RDMA task's cheapest placement: 2 x
gpu-h100-sxm_8gpu-128vcpu-1600gb on InfiniBand in eu-north1), provisions through the API
(GPU cluster on the configured fabric, boot disks, instances; every operation polled),
connects to the private IPs (`nebius.use_internal_ips`) as root, syncs the workdir, runs
setup and the 2-node gang; then exec, queue, logs, and down, after which the fake holds
nothing and the bodies are gone. Also: `launcher launch task_examples/train-2node-rdma.yaml
--dryrun` in its own process, with Nebius credentials configured, chooses Nebius.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.exec_job import exec_
from launcher.api.launch import launch
from launcher.task import Task
from tests import netns
from tests.nebius_fake import FABRIC, NebiusFake

REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc
    return proc


def test_rdma_dryrun_chooses_nebius(nebius_fake: NebiusFake) -> None:
    t0 = time.monotonic()
    out = json.loads(_cli("launch", "task_examples/train-2node-rdma.yaml", "--dryrun",
                          "--json").stdout)
    first = out["placements"][0]
    assert (first["cloud"], first["region"], first["fabric"]) == (
        "nebius", "eu-north1", "infiniband")
    assert first["enabled"] is True and first["hourly_cost"] == 47.2
    assert out["chosen"] == 0, out.get("chosen")
    print(f"dry run (own process, check against the fake): {time.monotonic() - t0:.2f}s")


@pytest.mark.netns
@pytest.mark.skipif(netns.unavailable_reason() is not None,
                    reason=f"sshd nodes unavailable: {netns.unavailable_reason()}")
def test_two_node_rdma_launch_exec_logs_down_on_nebius(nebius_cloud: NebiusFake,
                                                       tmp_path: Path) -> None:
    fake = nebius_cloud
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f.txt").write_text("synced")
    task = Task.from_dict({
        "name": "e2e", "num_nodes": 2, "workdir": str(work),
        "resources": {"cloud": "nebius", "accelerators": "H100:8",
                      "network": {"fabric": "infiniband"}},
        "setup": "echo setup on $(hostname) > ~/setup.txt",
        "run": 'echo "rank=$LAUNCHER_NODE_RANK host=$(hostname) f=$(cat f.txt) '
               'gpus=$LAUNCHER_NUM_GPUS_PER_NODE"',
    })
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "nbe2e", on_line=lines.append)
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, lines
        assert result.cloud == "nebius" and result.region == "eu-north1"
        (gc,) = fake.gpu_clusters.values()
        assert gc.spec.infiniband_fabric == FABRIC
        insts = list(fake.instances.values())
        assert len(insts) == 2 and all(i.spec.gpu_cluster.id == gc.metadata.id for i in insts)
        nodes = fake.bodies.wait_for([str(i.metadata.id) for i in insts])
        for rank in (0, 1):
            got = [ln for ln in lines if ln.startswith(f"(rank {rank}) rank={rank} host=")]
            assert len(got) == 1 and "f=synced gpus=8" in got[0], lines
        for node in nodes.values():
            assert (node.home / "setup.txt").read_text().startswith("setup on ")

        out: list[str] = []
        r = exec_("nbe2e", "echo exec on $(hostname)", on_line=out.append)
        assert r.exit_code == 0 and any("exec on " in ln for ln in out), out
        jobs = api.queue("nbe2e")
        assert len(jobs) == 2 and all(j.status.value == "SUCCEEDED" for j in jobs)
        got_logs: list[str] = []
        api.logs("nbe2e", jobs[0].id, follow=False, on_line=got_logs.append)
        assert sum("rank=" in ln for ln in got_logs) == 2, got_logs
        rows = json.loads(_cli("status", "--refresh", "--json").stdout)
        assert [r["name"] for r in rows] == ["nbe2e"] and rows[0]["status"] == "UP", rows
        check = [ln for ln in _cli("check").stdout.splitlines() if ln.startswith("nebius")]
        assert check and "NEBIUS_IAM_TOKEN, project project-e00fake" in check[0], check

        api.down("nbe2e")
        fake.bodies.sync()
        assert fake.inventory() == []
        assert fake.bodies.live_nodes() == {}
        assert api.status() == []
        print(f"nebius 2-node launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s")
    finally:
        for row in api.status():
            api.down(row.name)
