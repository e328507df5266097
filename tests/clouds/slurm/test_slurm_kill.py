"""kill -9 of the client (`launcher launch`) and of the managed-jobs controller at each
step of a Slurm launch and recovery, on the real slurmctld: no allocation is left
behind and none is ever duplicated.

Steps are the Slurm commands the killed process runs (tests/clouds/slurm/faults.py:
the shim SIGKILLs the launcher process that ran it, before the command runs or once it
has acted: an sbatch whose job exists but whose id never reached the client).

Client: at each step (by default the first call of each command before and after the
sbatch, the sbatch both ways, and the srun steps that copy a file, start the health
gate and submit the job; every call with LAUNCHER_FULL_SWEEPS=1), `launcher launch` is
killed; `launch -c NAME` then resumes it, adopting the tagged allocation if one was
made (exactly one holder job of the cluster), and `down` leaves squeue empty.

Controller: a managed job's controller is killed at its first sbatch (before and after),
at the first srun step of the launch, and in the recovery after a preemption at the new
allocation's sbatch (after) and its first srun; it is restarted, the job succeeds, no
launcher cluster ever has two live holder jobs (squeue sampled every 50 ms), and nothing
is left.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from launcher.api import jobs as api
from tests import sweeps
from tests.clouds.slurm.conftest import LabFactory
from tests.clouds.slurm.faults import SlurmShims
from tests.clouds.slurm.lab import LabNode, LabPartition, SlurmLab
from tests.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parents[3] / "task_examples"
CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]
# srun steps of a launch, by what they run (see test_slurm_faults.SRUN_STEPS)
SRUN_STEPS = (".launcher-put-", "health_checks.py '", "agent submit")


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=dict(os.environ),
                          timeout=timeout)


class Holders:
    """Samples `squeue` (the real one) every 50 ms: the most live holder jobs each
    launcher cluster had at once."""

    def __init__(self, lab: SlurmLab, shims: SlurmShims) -> None:
        self.cmd = [shims.real("squeue"), "-h", "-t", "pending,running,suspended,completing",
                    "-o", "%j"]
        self.env = {**os.environ, **lab.env}
        self.peak: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> Counter[str]:
        out = subprocess.run(self.cmd, capture_output=True, text=True, env=self.env, check=False)
        return Counter(out.stdout.split())

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for name, n in self.now().items():
                self.peak[name] = max(self.peak[name], n)

    def stop(self) -> Counter[str]:
        self._stop.set()
        self._thread.join(5)
        return self.peak


@pytest.fixture
def killable(slurm_lab: LabFactory, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> tuple[SlurmLab, SlurmShims]:
    lab = slurm_lab([LabNode("ltn1", 4, "a100"), LabNode("ltn2", 4, "a100")],
                    config="      command_timeout: 10\n")
    shims = SlurmShims(tmp_path / "shims")
    shims.protect(os.getpid())
    monkeypatch.setenv("PATH", f"{shims.bin}:{os.environ['PATH']}")
    return lab, shims


def _client_points() -> list[tuple[str, int, str, str]]:
    """(command, occurrence, containing, kind): see the module docstring. The launch's
    commands before its sbatch: squeue (adopt?), sinfo + scontrol show node (plan and
    shape: twice each), sbatch, then scontrol show job until RUNNING, hostnames, nodes."""
    before = [("squeue", 1), ("sinfo", 1), ("scontrol show node", 1), ("sinfo", 2)]
    after = [("scontrol show job", 1), ("scontrol show hostnames", 1), ("scontrol show node", 3)]
    points = [(k, n, "", "kill") for k, n in before]
    points += [("sbatch", 1, "", "kill"), ("sbatch", 1, "", "kill-after")]
    points += [(k, n, "", "kill") for k, n in after]
    points += [("srun", 0, s, "kill-after") for s in SRUN_STEPS]
    if not sweeps.full_sweeps():
        keep = {("sbatch", "kill"), ("sbatch", "kill-after"), ("scontrol show hostnames", "kill"),
                ("squeue", "kill"), ("srun", "kill-after")}
        points = [p for p in points if (p[0], p[3]) in keep]
    return points


CLIENT_POINTS = _client_points()


@pytest.mark.parametrize("part", range(sweeps.PARTS))
def test_client_kill9_at_each_step_then_resume_and_down_leave_one_or_no_allocation(
        killable: tuple[SlurmLab, SlurmShims], tmp_path: Path, part: int) -> None:
    lab, shims = killable
    task = tmp_path / "task.yaml"
    task.write_text("num_nodes: 2\nresources:\n  infra: slurm/lab\n  accelerators: A100:2\n"
                    "run: echo rank=$LAUNCHER_NODE_RANK\n")
    holders = Holders(lab, shims)
    done = []
    try:
        for i, (key, n, containing, kind) in enumerate(sweeps.part_of(CLIENT_POINTS, part)):
            name = f"k{part}x{i}"
            shims.arm(key, n, kind, containing=containing)
            first = _cli("launch", "-y", "-c", name, str(task))
            assert shims.fired() and first.returncode == -9, (key, n, kind, shims.argv(),
                                                              first.stdout + first.stderr)
            shims.reset()
            again = _cli("launch", "-y", "-c", name, str(task))
            out = again.stdout + again.stderr
            assert again.returncode == 0, (key, n, kind, out)
            assert "rank=0" in out and "rank=1" in out, out
            assert holders.now()[f"launcher-{name}"] == 1, (key, kind, holders.now())
            down = _cli("down", "-y", name)
            assert down.returncode == 0, down.stdout + down.stderr
            assert sum(holders.now().values()) == 0, (key, kind, holders.now())
            rows = json.loads(_cli("status", "--json").stdout)
            assert name not in [r["name"] for r in rows], rows
            done.append((key, n, containing, kind))
    finally:
        peak = holders.stop()
    assert all(v <= 1 for v in peak.values()), peak  # never a duplicate allocation
    print(f"part {part}: {len(done)} client kill points: {done}")


# (stage, command, occurrence, containing, kind); occurrences count from the arming
# (the controller's start for "launch"; the preemption for "recovery")
CONTROLLER_POINTS = [
    ("launch", "sbatch", 1, "", "kill"),
    ("launch", "sbatch", 1, "", "kill-after"),
    ("launch", "srun", 0, "agent submit", "kill-after"),
    ("recovery", "sbatch", 1, "", "kill-after"),
    ("recovery", "srun", 0, "agent submit", "kill"),
]


@pytest.mark.parametrize(("stage", "key", "n", "containing", "kind"), CONTROLLER_POINTS,
                         ids=[f"{p[0]}-{p[1]}-{p[4]}" for p in CONTROLLER_POINTS])
def test_controller_kill9_then_restart_makes_one_allocation_at_a_time_and_leaves_nothing(
        slurm_lab: LabFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        stage: str, key: str, n: int, containing: str, kind: str) -> None:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    lab = slurm_lab([LabNode("ltn1", 4, "a100")], partitions=[
        LabPartition("low", ("ltn1",), default=True, priority_tier=1, preempt_mode="REQUEUE"),
        LabPartition("high", ("ltn1",), priority_tier=10, preempt_mode="OFF")],
        config="      partitions: [low]\n      command_timeout: 10\n")
    shims = SlurmShims(tmp_path / "shims")
    shims.protect(os.getpid())
    monkeypatch.setenv("PATH", f"{shims.bin}:{os.environ['PATH']}")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    ckpt.chmod(0o777)
    task = tmp_path / "count.yaml"
    task.write_text(
        f"name: count\nworkdir: {EXAMPLES}\ncheckpoint: {ckpt}\nresources:\n"
        "  infra: slurm/lab/low\n  accelerators: A100:4\n"
        "envs:\n  COUNT_TO: '25'\n  STEP_S: '0.2'\n  CKPT_EVERY: '1'\n"
        "run: python3 count_resumable.py\n")
    wait = functools.partial(wait_until, timeout=120.0, poll=0.1)
    holders = Holders(lab, shims)
    if stage == "launch":
        shims.arm(key, n, kind, containing=containing)
    job = api.jobs_launch(str(task))
    try:
        if stage == "recovery":
            wait(lambda: api.jobs_status(job.id).status == "RUNNING", what="running")
            wait(lambda: (ckpt / "count.json").exists(), what="a checkpoint")
            shims.arm(key, n, kind, containing=containing)
            out = lab.sh("sbatch --parsable -p high --gres=gpu:a100:4 -o /dev/null --wrap 'sleep 3'")
            assert out.returncode == 0, out.stderr
        wait(shims.fired, what=f"the controller's {key} {containing}")
        wait(lambda: not api.jobs_controller_status().running, what="the controller dead")
        shims.reset()
        api.jobs_controller_start(wait_s=30)
        final = api.jobs_wait(job.id, timeout=180)
        reasons = [e.reason for e in api.jobs_detail(job.id).events]
        assert final.status == "SUCCEEDED", (reasons, shims.fired_at(), api.controller_log_lines(job.id)[-20:])
        wait(lambda: sum(holders.now().values()) == 0, what="no allocation left")
    finally:
        peak = holders.stop()
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)
    # never a duplicate allocation of one launcher cluster (the preempting job is `wrap`)
    assert all(v <= 1 for name, v in peak.items() if name.startswith("launcher-")), peak
    assert lab.sh("squeue -h -t pending,running -o %j").stdout.strip() == ""
