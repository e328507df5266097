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
import time
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.launch import launch
from tests import netns
from tests.cloud_e2e import (
    assert_cli_status_up,
    assert_job_logged_ranks,
    assert_setup_ran,
    cli,
    down_all,
    exec_and_queue,
    workdir_task,
)
from tests.nebius_fake import FABRIC, NebiusFake


def test_rdma_dryrun_chooses_nebius(nebius_fake: NebiusFake) -> None:
    t0 = time.monotonic()
    out = json.loads(cli("launch", "task_examples/train-2node-rdma.yaml", "--dryrun",
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
    task = workdir_task(
        tmp_path, {"cloud": "nebius", "accelerators": "H100:8",
                   "network": {"fabric": "infiniband"}},
        'echo "rank=$LAUNCHER_NODE_RANK host=$(hostname) f=$(cat f.txt) '
        'gpus=$LAUNCHER_NUM_GPUS_PER_NODE"', num_nodes=2)
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
        assert_setup_ran(nodes.values())

        jobs = exec_and_queue("nbe2e")
        assert_job_logged_ranks("nbe2e", jobs[0].id)
        assert_cli_status_up("nbe2e")
        check = [ln for ln in cli("check").stdout.splitlines() if ln.startswith("nebius")]
        assert check and "NEBIUS_IAM_TOKEN, project project-e00fake" in check[0], check

        api.down("nbe2e")
        fake.bodies.sync()
        assert fake.inventory() == []
        assert fake.bodies.live_nodes() == {}
        assert api.status() == []
        print(f"nebius 2-node launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s")
    finally:
        down_all()
