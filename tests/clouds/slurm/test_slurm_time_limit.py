"""Time limits on a real slurmctld: `time_limit` becomes `sbatch --time`, a partition
whose MaxTime is shorter is refused (never silently shortened), and an allocation that
reaches its limit ends TIMEOUT and is reported as such (cloud, managed job).

Slurm counts limits in whole minutes, so instead of waiting one out, each test moves
the running job's end to now (`scontrol update EndTime=now`, as an admin can): slurmctld's
own periodic time-limit check (every 30 s) then kills it as TIMEOUT, the same path as a
job whose minutes ran out.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.clouds.base import InvalidRequestError, NodeState, ProvisionRequest
from launcher.clouds.slurm.cloud import SlurmCloud
from tests.clouds.slurm.conftest import LabFactory
from tests.clouds.slurm.lab import LabNode, LabPartition, SlurmLab
from tests.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parents[3] / "task_examples"
PARTS = [LabPartition("short", ("ltn1",), default=True, max_time="30"),
         LabPartition("long", ("ltn1",))]


def req(cluster: str, zone: str | None, limit: int | None = None) -> ProvisionRequest:
    return ProvisionRequest(cluster_name=cluster, cloud="slurm", region="lab", zone=zone,
                            instance_type="a100x1of4", num_nodes=1, use_spot=False,
                            settings={"slurm": {"time_limit": limit}} if limit else {})


def job_field(lab: SlurmLab, job_id: str, key: str) -> str:
    out = lab.sh(f"scontrol show job -o {job_id}").stdout
    return out.split(f" {key}=", 1)[1].split()[0]


def end_now(lab: SlurmLab, job_id: str) -> None:
    out = lab.sh(f"scontrol update jobid={job_id} EndTime=now")
    assert out.returncode == 0, out.stderr


def test_time_limit_is_sbatch_time_and_a_short_maxtime_is_refused(
        slurm_lab: LabFactory, caplog: pytest.LogCaptureFixture) -> None:
    lab = slurm_lab([LabNode("ltn1", 4, "a100")], PARTS)
    cloud = SlurmCloud()
    try:
        # 45 min: the default partition allows 30, so the one that allows it is used
        info = cloud.provision(req("t45", None, 45))
        jid = info.head.node_id.split(":")[0]
        assert (job_field(lab, jid, "Partition"), job_field(lab, jid, "TimeLimit")) == ("long", "00:45:00")
        # naming the short partition: refused before anything is submitted
        with pytest.raises(InvalidRequestError, match=r"time_limit 45m .*MaxTime 30m"):
            cloud.provision(req("t45s", "short", 45))
        assert "t45s" not in lab.sh("squeue -h -o %j").stdout
        # no limit: the partition's MaxTime, with a warning saying so
        with caplog.at_level(logging.WARNING, logger="launcher.clouds.slurm"):
            info2 = cloud.provision(req("tmax", "short"))
        assert job_field(lab, info2.head.node_id.split(":")[0], "TimeLimit") == "00:30:00"
        assert "no time_limit set" in caplog.text and "MaxTime (30m)" in caplog.text
    finally:
        for c in ("t45", "tmax"):
            cloud.terminate(c)
    assert lab.sh("squeue -h").stdout.strip() == ""


def test_an_allocation_at_its_time_limit_ends_timeout(slurm_lab: LabFactory) -> None:
    """TIMEOUT is reported with the limit; it is final (`final_loss`) only when the
    limit was set for the job, not when it was a partition MaxTime it inherited."""
    lab = slurm_lab([LabNode("ltn1", 4, "a100")], PARTS)
    cloud = SlurmCloud()
    set_ = cloud.provision(req("tset", "long", 1))
    inherited = cloud.provision(req("tinh", "short"))
    for info in (set_, inherited):
        end_now(lab, info.head.node_id.split(":")[0])
    wait_until(lambda: set(cloud.query("tset").values()) == {NodeState.TERMINATED}
               and set(cloud.query("tinh").values()) == {NodeState.TERMINATED},
               timeout=90, poll=0.5, what="TIMEOUT")
    jid = set_.head.node_id.split(":")[0]
    assert cloud.describe("tset") == f"Slurm job {jid} TIMEOUT: killed at its time limit (1 min)"
    # (moving EndTime also rewrites TimeLimit to the minutes run: no "(30 min)" here)
    assert "TIMEOUT: killed at its time limit" in (cloud.describe("tinh") or "")
    assert "the time_limit set for it ran out" in (cloud.final_loss("tset") or "")
    assert cloud.final_loss("tinh") is None  # a site limit: a managed job recovers
    assert lab.sh("squeue -h -t pending,running").stdout.strip() == ""


def test_a_managed_job_at_its_time_limit_fails_with_timeout(
        slurm_lab: LabFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    lab = slurm_lab([LabNode("ltn1", 4, "a100")])
    task = tmp_path / "count.yaml"
    task.write_text(
        f"name: count\nworkdir: {EXAMPLES}\nresources:\n  infra: slurm/lab\n  accelerators: A100:4\n"
        "config:\n  slurm:\n    time_limit: 1m\n"
        "envs:\n  COUNT_TO: '100000'\n  STEP_S: '0.2'\n  CKPT_EVERY: '1'\n"
        "run: python3 count_resumable.py\n")
    job = api.jobs_launch(str(task))
    try:
        wait = functools.partial(wait_until, timeout=120.0, poll=0.1)
        wait(lambda: api.jobs_status(job.id).status == "RUNNING", what="running")
        jid = lab.sh("squeue -h -t running -o %i").stdout.split()[0]
        assert job_field(lab, jid, "TimeLimit") == "00:01:00"
        t0 = time.monotonic()
        end_now(lab, jid)
        final = api.jobs_wait(job.id, timeout=180)
        reasons = [e.reason for e in api.jobs_detail(job.id).events]
        assert final.status == "FAILED", reasons
        assert final.recoveries == 0
        assert any(f"Slurm job {jid} TIMEOUT: killed at its time limit (1 min)" in (r or "")
                   for r in reasons), reasons
        assert time.monotonic() - t0 < 120
    finally:
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)
    assert lab.sh("squeue -h -t pending,running -o %j").stdout.strip() == ""
