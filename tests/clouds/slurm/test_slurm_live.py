"""The `slurm` cloud against a real slurmctld + slurmds (Debian's slurm-wlm)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.clouds.base import (
    CapacityError,
    InvalidRequestError,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.slurm.cloud import SlurmCloud
from launcher.clouds.slurm.offers import slurm_offers
from launcher.runtime.node_runner import runner_for
from tests.clouds.slurm.conftest import LabFactory
from tests.clouds.slurm.lab import LabNode, LabPartition

TYPED = [LabNode("ltn1", 4, "a100"), LabNode("ltn2", 4, "a100")]


def req(cluster: str, itype: str, nodes: int, zone: str | None = "gpu") -> ProvisionRequest:
    return ProvisionRequest(cluster_name=cluster, cloud="slurm", region="lab", zone=zone,
                            instance_type=itype, num_nodes=nodes, use_spot=False)


def squeue(lab) -> str:  # type: ignore[no-untyped-def]
    return lab.sh("squeue -h -o '%i %j %T'").stdout.strip()


def test_offers_come_from_the_live_cluster_typed(slurm_lab: LabFactory) -> None:
    slurm_lab(TYPED, config="      pricing: 2.0\n      fabric: {gpu: {fabric: infiniband, gbps: 400}}\n")
    offers = {o.instance_type: o for o in slurm_offers()}
    assert set(offers) == {"a100x1of4", "a100x2of4", "a100x3of4", "a100x4of4"}
    o = offers["a100x4of4"]
    assert (o.cloud, o.region, o.zone, o.accelerator, o.accelerator_count) == ("slurm", "lab", "gpu", "A100", 4)
    assert o.max_nodes == 2 and o.vcpus == 4 and o.price == 8.0
    assert (o.fabric, o.fabric_gbps) == ("infiniband", 400)
    assert offers["a100x2of4"].price == 4.0 and offers["a100x2of4"].vcpus == 2


def test_untyped_gres_plans_and_launches(slurm_lab: LabFactory) -> None:
    lab = slurm_lab([LabNode("ltn1", 2, None)])
    offers = {o.instance_type: o for o in slurm_offers()}
    assert set(offers) == {"gpux1of2", "gpux2of2"}
    assert offers["gpux2of2"].accelerator == "GPU"
    cloud = SlurmCloud()
    info = cloud.provision(req("u1", "gpux1of2", 1))
    try:
        out = runner_for(info, info.head).run("echo gpus=$CUDA_VISIBLE_DEVICES").check()
        assert out.stdout.strip() == "gpus=0"
        assert "--gres" not in squeue(lab)
    finally:
        cloud.terminate("u1")
    assert squeue(lab) == ""


def test_two_node_gang_runs_on_both_nodes_and_down_empties_squeue(slurm_lab: LabFactory) -> None:
    lab = slurm_lab(TYPED)
    cloud = SlurmCloud()
    info = cloud.provision(req("g2", "a100x2of4", 2))
    try:
        assert [n.node_id.split(":")[1] for n in info.nodes] == ["ltn1", "ltn2"]
        # the allocation holds the vCPUs the offer promised: half of each node's 4
        shown = lab.sh(f"scontrol show job -o {info.head.node_id.split(':')[0]}").stdout
        assert "NumCPUs=4 " in shown and "CPUs/Task=2 " in shown, shown
        assert info.nodes[1].internal_ip == lab.addr(1)
        seen = [runner_for(info, n).run("hostname; echo $CUDA_VISIBLE_DEVICES").check().stdout.split()
                for n in info.nodes]
        assert seen == [["ltn1", "0,1"], ["ltn2", "0,1"]]
        r = runner_for(info, info.nodes[1])
        r.put_text("hello\n", "launcher-test/x.txt", 0o600)
        assert r.run("cat launcher-test/x.txt; stat -c %a launcher-test/x.txt").check().stdout.split() \
            == ["hello", "600"]
        assert set(cloud.query("g2").values()) == {NodeState.RUNNING}
        assert cloud.list_tagged_clusters() == {"g2": [info.head.node_id.split(":")[0]]}
        # a second cluster shares a node: it gets its other two GPUs
        info2 = cloud.provision(req("g2b", "a100x2of4", 1))
        assert runner_for(info2, info2.head).run("echo $CUDA_VISIBLE_DEVICES").check().stdout.strip() == "2,3"
        cloud.terminate("g2b")
        # a retried provision adopts the held job instead of submitting another
        again = cloud.provision(req("g2", "a100x2of4", 2))
        assert again.nodes == info.nodes
    finally:
        cloud.terminate("g2")
    assert squeue(lab) == ""
    assert set(cloud.query("g2").values()) == {NodeState.TERMINATED}
    cloud.terminate("g2")  # idempotent


def test_a_request_no_partition_holds_is_invalid_at_once(slurm_lab: LabFactory) -> None:
    lab = slurm_lab(TYPED)
    cloud = SlurmCloud()
    t0 = time.monotonic()
    with pytest.raises(InvalidRequestError, match="at most 2 node"):
        cloud.provision(req("big", "a100x1of4", 3))
    with pytest.raises(InvalidRequestError, match="no nodes with 8"):
        cloud.provision(req("big", "a100x8of8", 1))
    assert time.monotonic() - t0 < 5
    assert squeue(lab) == ""


def test_pending_past_the_timeout_is_capacity_and_cancelled(
        slurm_lab: LabFactory, launcher_home: Path) -> None:
    lab = slurm_lab([LabNode("ltn1", 4, "a100")], config="      provision_timeout: 60\n")
    cloud = SlurmCloud()
    info = cloud.provision(req("first", "a100x4of4", 1))  # room to start on a loaded machine
    config = launcher_home / "config.yaml"
    config.write_text(config.read_text().replace("provision_timeout: 60", "provision_timeout: 2"))
    try:
        with pytest.raises(CapacityError, match="PENDING"):
            cloud.provision(req("second", "a100x4of4", 1))
        assert "second" not in squeue(lab) and cloud.query("second") in ({}, {
            k: NodeState.TERMINATED for k in cloud.query("second")})
    finally:
        cloud.terminate(info.cluster_name)
    assert squeue(lab) == ""


def test_preemption_is_reported_as_preempted(slurm_lab: LabFactory) -> None:
    nodes = ("ltn1",)
    lab = slurm_lab([LabNode("ltn1", 4, "a100")], partitions=[
        LabPartition("low", nodes, default=True, priority_tier=1, preempt_mode="REQUEUE"),
        LabPartition("high", nodes, priority_tier=10, preempt_mode="OFF")])
    cloud = SlurmCloud()
    cloud.provision(req("victim", "a100x4of4", 1, zone="low"))
    out = lab.sh("sbatch --parsable -p high --gres=gpu:a100:4 -o /dev/null --wrap 'sleep 60'")
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 30
    while set(cloud.query("victim").values()) != {NodeState.PREEMPTED}:
        assert time.monotonic() < deadline, cloud.query("victim")
        time.sleep(0.3)
    assert "PREEMPTED" in (cloud.describe("victim") or "")
    # --no-requeue: Slurm never brings the gang back on its own
    assert "victim" not in lab.sh("squeue -h -t pending,running -o %j").stdout
    lab.sh(f"scancel {out.stdout.strip()}")


def test_node_failure_is_reported(slurm_lab: LabFactory) -> None:
    lab = slurm_lab(TYPED)
    cloud = SlurmCloud()
    cloud.provision(req("nf", "a100x1of4", 2))
    lab.kill_slurmd("ltn2")
    deadline = time.monotonic() + 60
    while NodeState.TERMINATED not in set(cloud.query("nf").values()):
        assert time.monotonic() < deadline, cloud.query("nf")
        time.sleep(0.5)
    assert "NODE_FAIL" in (cloud.describe("nf") or "")
    cloud.terminate("nf")


def test_launcher_check_lists_the_cluster_and_version(slurm_lab: LabFactory) -> None:
    slurm_lab(TYPED)
    out = subprocess.run([sys.executable, "-c", "from launcher.cli import main; main()", "check"], capture_output=True,
                         text=True, env=dict(os.environ), timeout=60)
    assert "slurm" in out.stdout
    assert "lab: Slurm 2" in out.stdout.replace("\n", " "), out.stdout + out.stderr


@pytest.mark.parametrize(("gpu_type", "accel"), [("a100", "A100"), (None, "H100")])
def test_a_task_on_slurm_plans_on_the_live_cluster(slurm_lab: LabFactory, gpu_type: str | None,
                                                  accel: str) -> None:
    """`infra: slurm/lab` (and `cloud: slurm` + `region: lab`) plan onto the cluster's
    partitions, typed and untyped GRES alike, and the placement is enabled."""
    from launcher.api.planning import plan
    from launcher.task.model import Task

    # an untyped partition's GPU model comes from config (Slurm does not say)
    slurm_lab([LabNode("ltn1", 4, gpu_type), LabNode("ltn2", 4, gpu_type)],
              config="" if gpu_type else "      gpu_models: {gpu: H100}\n")
    for where in ("infra: slurm/lab", "cloud: slurm\n  region: lab", "infra: slurm/lab/gpu"):
        task = Task.from_yaml_str(f"num_nodes: 2\nresources:\n  {where}\n  accelerators: {accel}:2\nrun: x\n")
        p = plan(task)
        assert p.placements, where
        best = p.placements[0]
        assert (best.offer.cloud, best.offer.region, best.offer.zone) == ("slurm", "lab", "gpu")
        assert best.offer.instance_type == f"{gpu_type or 'gpu'}x2of4" and p.enabled[0], p.reasons


def test_cli_launch_runs_each_rank_on_its_own_node_and_down_cleans_up(
        slurm_lab: LabFactory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`launcher launch` end to end: the head agent runs inside the allocation and
    starts each rank as an srun step on its node; `down` leaves squeue empty."""
    lab = slurm_lab(TYPED)
    task = tmp_path / "task.yaml"
    task.write_text("num_nodes: 2\nresources:\n  infra: slurm/lab\n  accelerators: A100:2\nrun: |\n"
                    "  echo rank=$LAUNCHER_NODE_RANK host=$(hostname) ips=$LAUNCHER_NODE_IPS\n")
    cli = [sys.executable, "-c", "from launcher.cli import main; main()"]
    out = subprocess.run([*cli, "launch", "-y", "-c", "sl", str(task)], capture_output=True,
                         text=True, env=dict(os.environ), timeout=180)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        ips = f"{lab.addr(0)} {lab.addr(1)}"
        assert f"rank=0 host=ltn1 ips={ips}" in out.stdout
        assert f"rank=1 host=ltn2 ips={ips}" in out.stdout
    finally:
        down = subprocess.run([*cli, "down", "-y", "sl"], capture_output=True, text=True,
                              env=dict(os.environ), timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert squeue(lab) == ""


def test_a_client_killed_mid_provision_leaves_nothing_behind(slurm_lab: LabFactory) -> None:
    """kill -9 of the client while its job pends: the job is tagged from submission, so
    the orphan scan lists it and `terminate` removes it."""
    lab = slurm_lab([LabNode("ltn1", 4, "a100")], config="      provision_timeout: 120\n")
    cloud = SlurmCloud()
    cloud.provision(req("holder", "a100x4of4", 1))
    code = ("from launcher.clouds.slurm.cloud import SlurmCloud\n"
            "from launcher.clouds.base import ProvisionRequest\n"
            "SlurmCloud().provision(ProvisionRequest(cluster_name='orphan', cloud='slurm', "
            "region='lab', zone='gpu', instance_type='a100x4of4', num_nodes=1, use_spot=False))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ))
    try:
        deadline = time.monotonic() + 30
        while "orphan" not in cloud.list_tagged_clusters():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
    assert set(cloud.query("orphan").values()) == {NodeState.PENDING}
    cloud.terminate("orphan")
    cloud.terminate("holder")
    assert squeue(lab) == "" and cloud.list_tagged_clusters() == {}


def test_a_new_allocation_clears_runtime_dirs_an_ended_one_left_in_the_shared_home(
        slurm_lab: LabFactory, caplog: pytest.LogCaptureFixture) -> None:
    """The lab's nodes share one home (like NFS): the agent's records of an ended
    allocation must not be read as a new one's; a live one's are left alone."""
    lab = slurm_lab(TYPED)
    cloud = SlurmCloud()
    old = cloud.provision(req("h1", "a100x1of4", 1))
    runner_for(old, old.head).run("mkdir -p ~/.launcher-agent/jobs && touch ~/.launcher-agent/jobs/1").check()
    cloud.terminate("h1")
    new = cloud.provision(req("h2", "a100x1of4", 2))
    try:
        r = runner_for(new, new.nodes[1])
        assert r.run("ls ~/.launcher-agent/jobs 2>&1; cat ~/.launcher-slurm-job").stdout.split()[-1] \
            == new.head.node_id.split(":")[0]
        assert r.run("test -e ~/.launcher-agent/jobs/1").returncode != 0
        r.run("mkdir -p ~/.launcher-agent/jobs && touch ~/.launcher-agent/jobs/7").check()
        with caplog.at_level(logging.WARNING, logger="launcher.clouds.slurm"):
            third = cloud.provision(req("h3", "a100x1of4", 1))
        assert "also used by live launcher job" in caplog.text
        assert runner_for(third, third.head).run("test -e ~/.launcher-agent/jobs/7").returncode == 0
    finally:
        cloud.terminate("h2")
        cloud.terminate("h3")
    assert squeue(lab) == ""


def test_cli_launch_on_a_proctrack_cgroup_site(slurm_lab: LabFactory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ProctrackType=proctrack/cgroup (cgroup v1 freezer here): Slurm kills whatever a
    step leaves behind when the step ends, so the head agent's daemon runs in the
    holder's batch step; each rank runs in a step cgroup of the allocation, on its node,
    and a second job on the same cluster runs too (the daemon outlived every step)."""
    lab = slurm_lab(TYPED, proctrack="cgroup")
    assert "proctrack/cgroup" in lab.sh("scontrol show config").stdout
    task = tmp_path / "task.yaml"
    task.write_text("num_nodes: 2\nresources:\n  infra: slurm/lab\n  accelerators: A100:2\nrun: |\n"
                    "  sleep 1; echo rank=$LAUNCHER_NODE_RANK cg=$(grep freezer /proc/self/cgroup)\n")
    cli = [sys.executable, "-c", "from launcher.cli import main; main()"]
    out = subprocess.run([*cli, "launch", "-y", "-c", "cg", str(task)], capture_output=True,
                         text=True, env=dict(os.environ), timeout=180)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        jid = lab.sh("squeue -h -o %i").stdout.split()[0]
        for rank, node in ((0, "ltn1"), (1, "ltn2")):
            assert re.search(rf"rank={rank} cg=\S*:freezer:/slurm_{node}/uid_0/job_{jid}/step_\d+",
                             out.stdout), out.stdout
        again = subprocess.run([*cli, "exec", "cg", "echo second=$LAUNCHER_NODE_RANK"],
                               capture_output=True, text=True, env=dict(os.environ), timeout=120)
        assert again.returncode == 0 and "second=0" in again.stdout, again.stdout + again.stderr
    finally:
        down = subprocess.run([*cli, "down", "-y", "cg"], capture_output=True, text=True,
                              env=dict(os.environ), timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert squeue(lab) == ""
