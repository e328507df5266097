"""RunPod end to end, minus the machine: the real launch path against the GraphQL fake
(tests/runpod_fake.py), with an sshd body per running pod at the pod's IP, listening on
the public port RunPod mapped port 22 to, with the deploy's PUBLIC_KEY authorized.

1. `launch` plans on the bundled catalog, deploys a pod, waits for SSH on the mapped
   port, syncs the workdir, runs setup and the task; exec, queue, logs, `status
   --refresh` and `check` through the CLI in its own process; `down` leaves nothing.
2. A managed spot job: an interruptible pod (`podRentInterruptable` with a bid) that the
   fake interrupts (EXITED, the body dies): the controller reads PREEMPTED from RunPod's
   own view, blocks that data center, relaunches elsewhere and finishes the job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api import jobs as jobs_api
from launcher.api.exec_job import exec_
from launcher.api.launch import launch
from launcher.jobs.store import JobStore
from launcher.task import Task
from tests import netns
from tests.runpod_fake import EMAIL, RunPodFake
from tests.waiting import wait_until as _wait

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(netns.unavailable_reason() is not None,
                       reason=f"sshd nodes unavailable: {netns.unavailable_reason()}"),
]

REPO = Path(__file__).resolve().parents[3]
RESOURCES = {"cloud": "runpod", "instance_type": "1x_A100-80GB_SECURE"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc
    return proc




def test_launch_exec_logs_down_on_runpod(runpod_cloud: RunPodFake, tmp_path: Path) -> None:
    fake = runpod_cloud
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f.txt").write_text("synced")
    task = Task.from_dict({
        "name": "e2e", "workdir": str(work), "resources": RESOURCES,
        "setup": "echo setup on $(hostname) > ~/setup.txt",
        "run": 'echo "rank=$LAUNCHER_NODE_RANK f=$(cat f.txt)"',
    })
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "rpe2e", on_line=lines.append)
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, lines
        assert result.cloud == "runpod"
        (pod_id,) = fake.inventory()
        pod = fake.pods[pod_id]
        assert pod["_op"] == "podFindAndDeployOnDemand" and pod["name"] == "launcher-rpe2e-0"
        node = fake.bodies.wait_for([pod_id])[pod_id]
        assert node.port == pod["_port"] != 22
        assert any(ln.endswith("rank=0 f=synced") for ln in lines), lines
        assert (node.home / "setup.txt").read_text().startswith("setup on ")

        out: list[str] = []
        r = exec_("rpe2e", "echo exec on $(hostname)", on_line=out.append)
        assert r.exit_code == 0 and any("exec on " in ln for ln in out), out
        jobs = api.queue("rpe2e")
        assert len(jobs) == 2 and all(j.status.value == "SUCCEEDED" for j in jobs)
        assert "exec on " in _cli("logs", "rpe2e", str(jobs[1].id)).stdout
        rows = json.loads(_cli("status", "--refresh", "--json").stdout)
        assert [r["name"] for r in rows] == ["rpe2e"] and rows[0]["status"] == "UP", rows
        assert EMAIL in _cli("check").stdout

        api.down("rpe2e")
        fake.bodies.sync()
        assert fake.inventory() == [] and fake.bodies.live_nodes() == {}
        assert api.status() == []
        print(f"runpod launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s")
    finally:
        for row in api.status():
            api.down(row.name)


@pytest.fixture
def spot_env(runpod_cloud: RunPodFake, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunPodFake]:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    try:
        yield runpod_cloud
    finally:
        jobs_api.jobs_controller_stop()
        for row in api.status():
            api.down(row.name)


def test_interrupted_spot_pod_recovers_elsewhere(spot_env: RunPodFake, tmp_path: Path) -> None:
    fake = spot_env
    path = tmp_path / "spot.yaml"
    path.write_text(
        "name: rpspot\nresources:\n  cloud: runpod\n  instance_type: 1x_A100-80GB_SECURE\n"
        "  use_spot: true\nrun: |\n  for i in $(seq 1 20); do echo step $i; sleep 0.2; done\n")
    t0 = time.monotonic()
    job = jobs_api.jobs_launch(str(path))
    store = JobStore()
    try:
        _wait(lambda: jobs_api.jobs_status(job.id).status == "RUNNING", 60, "RUNNING")
        (first,) = store.attempts(job.id)
        assert first.cloud == "runpod" and first.use_spot
        (pod_id,) = fake.inventory()
        assert fake.pods[pod_id]["_op"] == "podRentInterruptable"
        first_dc = fake.pods[pod_id]["dataCenterId"]
        fake.interrupt(pod_id)

        final = jobs_api.jobs_wait(job.id, timeout=90)
        reasons = [e.reason for e in jobs_api.jobs_detail(job.id).events]
        assert final.status == "SUCCEEDED" and final.recoveries == 1, reasons
        attempts = store.attempts(job.id)
        assert len(attempts) == 2 and attempts[1].cause == "preemption", attempts
        assert attempts[0].outcome and "PREEMPT" in attempts[0].outcome.upper(), attempts[0]
        assert attempts[1].zone != first_dc, [(a.zone, a.outcome) for a in attempts]
        lines: list[str] = []
        jobs_api.jobs_logs(job.id, lines.append, follow=False)
        assert any("step 20" in ln for ln in lines), lines[-10:]
        _wait(lambda: fake.inventory() == [], 30, "no pod left in the fake")
        print(f"runpod spot job with one interruption: {time.monotonic() - t0:.1f}s")
    finally:
        store.close()
