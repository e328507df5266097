"""A failing or hanging Slurm command at each step of a provision and of a teardown,
on the real slurmctld: the error is typed (SlurmCommandError, SlurmUnreachableError)
and no allocation is left behind.

A clean provision and teardown record the commands they run (tests/clouds/slurm/
faults.py: shims on PATH); then, at each step (by default the first call of each
command before and after the sbatch; every call with LAUNCHER_FULL_SWEEPS=1), each
fault kind is tried on a fresh provision: `fail` (the command errs before it runs),
`hang` (it never answers: the cluster's command_timeout ends it), and for the
commands that change something (sbatch, scancel) also `fail-after`/`hang-after` (it
ran, its answer was lost: an sbatch whose job id never came back). After the failed
provision `squeue` lists no live job of the cluster (provision cancels what its tag
finds); `terminate` (what failover and `down` call) then succeeds and leaves none.
A failed teardown raises the same typed errors, and the next `terminate` finishes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.clouds.base import ProvisionRequest
from launcher.clouds.slurm.client import SlurmCommandError, SlurmUnreachableError
from launcher.clouds.slurm.cloud import SlurmCloud
from tests import sweeps
from tests.clouds.slurm.conftest import LabFactory
from tests.clouds.slurm.faults import KINDS, SlurmShims
from tests.clouds.slurm.lab import LabNode, SlurmLab

MUTATING = ("sbatch", "scancel")
TYPED = (SlurmCommandError, SlurmUnreachableError)
CONFIG = "      command_timeout: 2\n      provision_timeout: 60\n"


def req(name: str) -> ProvisionRequest:
    return ProvisionRequest(cluster_name=name, cloud="slurm", region="lab", zone="gpu",
                            instance_type="a100x2of4", num_nodes=2, use_spot=False)


def live_jobs(lab: SlurmLab, shims: SlurmShims) -> str:
    out = subprocess.run([shims.real("squeue"), "-h", "-t", "pending,running,suspended,completing",
                          "-o", "%i %j %T"], capture_output=True, text=True,
                         env={**os.environ, **lab.env}, check=True)
    return out.stdout.strip()


def points(calls: list[str], mark: str) -> list[tuple[str, int, bool]]:
    """(command, occurrence, after `mark`) of each call, first of each kind by default."""
    seen: dict[str, int] = {}
    out = []
    after = False
    for key in calls:
        seen[key] = seen.get(key, 0) + 1
        out.append((key, seen[key], after))
        after = after or key == mark
    return sweeps.first_of_each(out, lambda p: (p[0], p[2]))


def kinds(key: str) -> tuple[str, ...]:
    """The fault kinds tried at a command (kills are test_slurm_kill.py's)."""
    faults = tuple(k for k in KINDS if not k.startswith("kill"))
    return faults if key in MUTATING else ("fail", "hang")


@pytest.fixture
def shimmed(slurm_lab: LabFactory, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> tuple[SlurmLab, SlurmShims]:
    lab = slurm_lab([LabNode("ltn1", 4, "a100"), LabNode("ltn2", 4, "a100")], config=CONFIG)
    shims = SlurmShims(tmp_path / "shims")
    monkeypatch.setenv("PATH", f"{shims.bin}:{os.environ['PATH']}")
    return lab, shims


def test_a_fault_at_each_provisioning_command_leaves_no_allocation(
        shimmed: tuple[SlurmLab, SlurmShims]) -> None:
    lab, shims = shimmed
    cloud = SlurmCloud()
    shims.reset()
    cloud.provision(req("clean"))
    calls = shims.calls()
    assert {"squeue", "sinfo", "scontrol show node", "sbatch", "scontrol show job",
            "scontrol show hostnames"} <= set(calls), calls
    cloud.terminate("clean")
    assert live_jobs(lab, shims) == ""
    tried = []
    for key, n, after in points(calls, "sbatch"):
        for kind in kinds(key):
            name = f"f{len(tried)}"
            shims.arm(key, n, kind)
            try:
                cloud.provision(req(name))
            except TYPED as exc:
                assert shims.fired(), (key, n, kind, shims.calls())
                if kind.startswith("hang"):
                    assert isinstance(exc, SlurmUnreachableError) and "timed out" in str(exc)
            else:
                # only a later poll (`scontrol show job` while PENDING) may not come at
                # all in this run: the job started sooner; every fault that fires fails
                assert not shims.fired() and key == "scontrol show job" and n > 1, \
                    (key, n, kind, shims.calls())
                shims.reset()  # disarmed: the teardown is not the point tried
                cloud.terminate(name)
                continue
            assert live_jobs(lab, shims) == "", (key, n, kind, after)
            cloud.terminate(name)
            assert live_jobs(lab, shims) == ""
            tried.append((key, n, after, kind))
    print(f"{len(tried)} provisioning faults tried: {tried}")
    assert ("sbatch", 1, False, "fail-after") in tried and ("sbatch", 1, False, "hang-after") in tried
    assert any(k == "scontrol show job" and a for k, _, a, _ in tried)


def test_a_fault_at_each_teardown_command_is_typed_and_the_next_down_finishes(
        shimmed: tuple[SlurmLab, SlurmShims]) -> None:
    lab, shims = shimmed
    cloud = SlurmCloud()
    cloud.provision(req("t0"))
    shims.reset()
    cloud.terminate("t0")
    calls = shims.calls()
    assert "scancel" in calls, calls
    tried = []
    for key, n, after in points(calls, "scancel"):
        for kind in kinds(key):
            name = f"t{len(tried) + 1}"
            cloud.provision(req(name))
            shims.arm(key, n, kind)
            with pytest.raises(TYPED):
                cloud.terminate(name)
            assert shims.fired(), (key, n, kind, shims.calls())
            shims.reset()
            cloud.terminate(name)
            assert live_jobs(lab, shims) == "", (key, n, kind)
            tried.append((key, n, after, kind))
    print(f"{len(tried)} teardown faults tried: {tried}")
    assert ("scancel", 1, False, "fail-after") in tried


# srun steps of a launch, by what they run: setting up the agent, copying a file,
# the health gate, submitting the job (the first steps, probes whose failure only
# means "install afresh", are left out: they are meant to be tolerated)
SRUN_STEPS = ("agent.py setup", ".launcher-put-", "health_checks.py '", "agent submit")


@pytest.mark.parametrize("step", SRUN_STEPS)
def test_a_failing_srun_step_fails_the_launch_clearly_and_down_leaves_nothing(
        shimmed: tuple[SlurmLab, SlurmShims], tmp_path: Path, step: str) -> None:
    """An srun step of a launch fails (srun itself: exit 1 before the step runs): the
    CLI exits non-zero with a clear message and no traceback; `down` then leaves
    squeue empty."""
    lab, shims = shimmed
    task = tmp_path / "task.yaml"
    task.write_text("resources:\n  infra: slurm/lab\n  accelerators: A100:2\nrun: echo hi\n")
    cli = [sys.executable, "-c", "from launcher.cli import main; main()"]
    shims.arm("srun", 0, "fail", containing=step)
    out = subprocess.run([*cli, "launch", "-y", "-c", "sf", str(task)], capture_output=True,
                         text=True, env=dict(os.environ), timeout=240)
    text = out.stdout + out.stderr
    assert shims.fired(), shims.argv()
    assert out.returncode != 0, text
    assert "Traceback" not in text and "(rank 0) hi" not in text, text
    shims.reset()
    down = subprocess.run([*cli, "down", "-y", "sf"], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert live_jobs(lab, shims) == ""


def test_a_hanging_srun_step_times_out_typed_and_the_allocation_goes(
        shimmed: tuple[SlurmLab, SlurmShims]) -> None:
    from launcher.runtime.node_runner import runner_for
    from launcher.runtime.runner import CommandTimeoutError

    lab, shims = shimmed
    cloud = SlurmCloud()
    info = cloud.provision(req("sh"))
    for kind in ("hang", "hang-after"):
        shims.arm("srun", 1, kind)
        with pytest.raises(CommandTimeoutError):
            runner_for(info, info.head).run("echo hi", timeout=2)
        assert shims.fired()
    cloud.terminate("sh")
    assert live_jobs(lab, shims) == ""
