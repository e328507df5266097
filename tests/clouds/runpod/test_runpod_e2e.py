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

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api import jobs as jobs_api
from launcher.api.launch import launch
from launcher.jobs.store import JobStore
from tests.cloud_e2e import (
    NETNS_ONLY,
    assert_cli_status_up,
    assert_recovered_once,
    assert_setup_ran,
    cli,
    down_all,
    exec_and_queue,
    managed_jobs,
    workdir_task,
)
from tests.runpod_fake import EMAIL, RunPodFake
from tests.waiting import wait_until as _wait

pytestmark = NETNS_ONLY

RESOURCES = {"cloud": "runpod", "instance_type": "1x_A100-80GB_SECURE"}


def test_launch_exec_logs_down_on_runpod(runpod_cloud: RunPodFake, tmp_path: Path) -> None:
    fake = runpod_cloud
    task = workdir_task(tmp_path, RESOURCES, 'echo "rank=$LAUNCHER_NODE_RANK f=$(cat f.txt)"')
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
        assert_setup_ran([node])

        jobs = exec_and_queue("rpe2e")
        assert "exec on " in cli("logs", "rpe2e", str(jobs[1].id)).stdout
        assert_cli_status_up("rpe2e")
        assert EMAIL in cli("check").stdout

        api.down("rpe2e")
        fake.bodies.sync()
        assert fake.inventory() == [] and fake.bodies.live_nodes() == {}
        assert api.status() == []
        print(f"runpod launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s")
    finally:
        down_all()


@pytest.fixture
def spot_env(runpod_cloud: RunPodFake, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunPodFake]:
    with managed_jobs(monkeypatch):
        yield runpod_cloud


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

        _, attempts = assert_recovered_once(job.id, store)
        assert attempts[1].zone != first_dc, [(a.zone, a.outcome) for a in attempts]
        lines: list[str] = []
        jobs_api.jobs_logs(job.id, lines.append, follow=False)
        assert any("step 20" in ln for ln in lines), lines[-10:]
        _wait(lambda: fake.inventory() == [], 30, "no pod left in the fake")
        print(f"runpod spot job with one interruption: {time.monotonic() - t0:.1f}s")
    finally:
        store.close()
