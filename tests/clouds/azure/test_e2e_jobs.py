"""A managed spot job on Azure (ARM fake + sshd bodies), evicted the way Azure does it.

The controller (its own background process: credentials from the fake `az` login, the
ARM endpoint from config.yaml, like any user's) launches a 2-node spot gang
(`priority: Spot`, `evictionPolicy: Delete`); the test evicts both VMs (the bodies die,
the VMs and their NICs disappear, the resource group stays: what a Spot eviction with
policy Delete leaves). The controller must read PREEMPTED from ARM's own view (query),
block the location (the bundled catalog has no Azure zones), relaunch in another
location, and finish the job. This job keeps no checkpoint (a resume from an `az://`
store is tested on the local cloud against the Blob fake, tests/jobs/
test_e2e_blob_checkpoint.py): it restarts from step 0, and the test asserts the
relaunch, not a resume.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests import netns
from tests.azure_fake import AzureFake, wait_until

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        netns.unavailable_reason() is not None,
        reason=f"sshd nodes unavailable: {netns.unavailable_reason()}",
    ),
]


@pytest.fixture
def spot_env(azure_cloud: AzureFake, monkeypatch: pytest.MonkeyPatch) -> Iterator[AzureFake]:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    try:
        yield azure_cloud
    finally:
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)


def _task(tmp_path: Path) -> str:
    path = tmp_path / "spot.yaml"
    path.write_text(
        "name: azspot\nnum_nodes: 2\n"
        "resources:\n  cloud: azure\n  instance_type: Standard_D2s_v5\n  use_spot: true\n"
        "run: |\n"
        '  if [ "$LAUNCHER_NODE_RANK" = 0 ]; then for i in $(seq 1 25); do echo step $i; '
        "sleep 0.2; done; else echo worker up; fi\n"
    )
    return str(path)


def test_spot_gang_evicted_relaunches_in_another_location(spot_env: AzureFake,
                                                          tmp_path: Path) -> None:
    fake = spot_env
    t0 = time.monotonic()
    job = api.jobs_launch(_task(tmp_path))
    store = JobStore()
    try:
        wait_until(lambda: api.jobs_status(job.id).status == "RUNNING", 60, "RUNNING")
        (first,) = store.attempts(job.id)
        assert first.cloud == "azure" and first.use_spot
        vms = [v["id"] for v in fake.vms()]
        assert len(vms) == 2
        assert all(fake.vm(v)["properties"]["priority"] == "Spot" for v in vms)
        fake.evict(vms)  # no notice: the bodies die, the VMs are deleted

        final = api.jobs_wait(job.id, timeout=90)
        reasons = [e.reason for e in api.jobs_detail(job.id).events]
        assert final.status == "SUCCEEDED", reasons
        assert final.recoveries == 1, reasons
        attempts = store.attempts(job.id)
        assert len(attempts) == 2
        assert attempts[0].outcome and "PREEMPT" in attempts[0].outcome.upper(), attempts[0]
        assert attempts[1].cause == "preemption"
        assert attempts[1].region != first.region, [(a.region, a.outcome) for a in attempts]
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        assert any("step 25" in ln for ln in lines), lines[-10:]
        wait_until(lambda: fake.inventory() == [], 30, "nothing left in the ARM fake")
        print(f"azure spot job with one eviction: {time.monotonic() - t0:.1f}s", *reasons,
              sep="\n")
    finally:
        store.close()
