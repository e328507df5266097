"""A managed job on a real Slurm cluster recovers when a higher-priority job preempts
its allocation, and resumes from its checkpoint (a directory every node shares)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from launcher.api import jobs as api
from tests.clouds.slurm.conftest import LabFactory
from tests.clouds.slurm.lab import LabNode, LabPartition
from tests.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parents[3] / "task_examples"
_wait = functools.partial(wait_until, timeout=120.0, poll=0.1)  # a loaded CI machine


def _count(ckpt: Path) -> int:
    try:
        return int(json.loads((ckpt / "count.json").read_text())["count"])
    except (FileNotFoundError, ValueError, KeyError):
        return 0


def test_preempted_managed_job_recovers_and_resumes(
        slurm_lab: LabFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    lab = slurm_lab([LabNode("ltn1", 4, "a100")], partitions=[
        LabPartition("low", ("ltn1",), default=True, priority_tier=1, preempt_mode="REQUEUE"),
        LabPartition("high", ("ltn1",), priority_tier=10, preempt_mode="OFF")],
        config="      partitions: [low]\n")
    ckpt = tmp_path / "ckpt"  # the namespaces share this machine's /tmp
    ckpt.mkdir()
    ckpt.chmod(0o777)
    task = tmp_path / "count.yaml"
    task.write_text(
        f"name: count\nworkdir: {EXAMPLES}\ncheckpoint: {ckpt}\nresources:\n"
        "  infra: slurm/lab/low\n  accelerators: A100:4\n"
        "envs:\n  COUNT_TO: '30'\n  STEP_S: '0.2'\n  CKPT_EVERY: '1'\n"
        "run: python3 count_resumable.py\n")
    job = api.jobs_launch(str(task))
    try:
        _wait(lambda: api.jobs_status(job.id).status == "RUNNING", what="running")
        _wait(lambda: _count(ckpt) >= 5, what="progress")
        out = lab.sh("sbatch --parsable -p high --gres=gpu:a100:4 -o /dev/null --wrap 'sleep 3'")
        assert out.returncode == 0, out.stderr
        final = api.jobs_wait(job.id, timeout=180)
        detail = api.jobs_detail(job.id)
        assert final.status == "SUCCEEDED", [e.reason for e in detail.events]
        assert final.recoveries >= 1
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        assert any("resum" in ln.lower() for ln in lines), lines[-20:]
        assert _count(ckpt) == 30
    finally:
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)
    assert lab.sh("squeue -h -t pending,running -o %j").stdout.strip() == ""


def test_node_failure_recovers_the_managed_job_on_another_node(
        slurm_lab: LabFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killing the slurmd under the job (NODE_FAIL once SlurmdTimeout passes) ends the
    allocation; the job is relaunched on the other node and resumes."""
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    lab = slurm_lab([LabNode("ltn1", 4, "a100"), LabNode("ltn2", 4, "a100")])
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    ckpt.chmod(0o777)
    task = tmp_path / "count.yaml"
    task.write_text(
        f"name: count\nworkdir: {EXAMPLES}\ncheckpoint: {ckpt}\nresources:\n"
        "  infra: slurm/lab\n  accelerators: A100:4\n"
        "envs:\n  COUNT_TO: '60'\n  STEP_S: '0.2'\n  CKPT_EVERY: '1'\n"
        "run: python3 count_resumable.py\n")
    job = api.jobs_launch(str(task))
    try:
        _wait(lambda: api.jobs_status(job.id).status == "RUNNING", what="running")
        _wait(lambda: _count(ckpt) >= 5, what="progress")
        node = lab.sh("squeue -h -t running -o %N").stdout.split()[0]
        lab.kill_slurmd(node)
        final = api.jobs_wait(job.id, timeout=180)
        detail = api.jobs_detail(job.id)
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        assert final.status == "SUCCEEDED", ([e.reason for e in detail.events], lines[-15:])
        assert final.recoveries >= 1
        assert _count(ckpt) == 60
    finally:
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)
    assert lab.sh("squeue -h -t pending,running -o %j").stdout.strip() == ""
