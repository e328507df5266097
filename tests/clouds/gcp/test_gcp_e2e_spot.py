"""A managed spot job on GCP (the Compute REST fake + sshd bodies), preempted the way
GCE does it for `instanceTerminationAction: DELETE`: the bodies die (no notice), the
instances are deleted and the zone records a `compute.instances.preempted` operation.
The controller (its own process, reaching the fake through the same documented
settings) must see PREEMPTED in GCE's view, block the zone, relaunch in another zone
of us-central1 and finish the job. GCS checkpoints are not built (docs/gcp.md): the
job restarts from its start, so this test checks recovery, not resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests import netns
from tests.gcp_fake import GCPFake

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(netns.unavailable_reason() is not None,
                       reason=f"sshd nodes unavailable: {netns.unavailable_reason()}"),
]


@pytest.fixture
def spot_env(gcp_cloud: GCPFake, monkeypatch: pytest.MonkeyPatch) -> Iterator[GCPFake]:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    try:
        yield gcp_cloud
    finally:
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _names(fake: GCPFake, cluster: str) -> list[str]:
    return [i["name"] for i in fake.live() if i["labels"]["launcher-cluster"] == cluster]


def test_spot_gang_preempted_by_gce_relaunches_in_another_zone(spot_env: GCPFake,
                                                               tmp_path: Path) -> None:
    fake = spot_env
    task = tmp_path / "spot.yaml"
    task.write_text(
        "name: spot\nnum_nodes: 2\n"
        "resources:\n  cloud: gcp\n  region: us-central1\n  instance_type: n2-standard-2\n"
        "  use_spot: true\n"
        "run: |\n  for i in $(seq 1 30); do echo step $i; sleep 0.1; done\n")
    t0 = time.monotonic()
    job = api.jobs_launch(str(task))
    store = JobStore()
    try:
        _wait(lambda: api.jobs_status(job.id).status == "RUNNING", 40, "RUNNING")
        (first,) = store.attempts(job.id)
        assert first.cloud == "gcp" and first.region == "us-central1" and first.use_spot
        names = _names(fake, first.cluster_name)
        assert len(names) == 2
        for inst in fake.live():
            assert inst["scheduling"]["provisioningModel"] == "SPOT"
            assert inst["scheduling"]["instanceTerminationAction"] == "DELETE"

        fake.preempt(names)
        final = api.jobs_wait(job.id, timeout=90)
        reasons = [e.reason for e in api.jobs_detail(job.id).events]
        assert final.status == "SUCCEEDED", reasons
        assert final.recoveries == 1, reasons
        attempts = store.attempts(job.id)
        assert len(attempts) == 2
        assert attempts[0].outcome and "PREEMPT" in attempts[0].outcome.upper(), attempts[0]
        assert attempts[1].cause == "preemption"
        assert attempts[1].region == "us-central1" and attempts[1].zone != first.zone
        preempted_ops = [o for o in fake.state.operations.values()
                         if o["operationType"] == "compute.instances.preempted"]
        assert len(preempted_ops) == 2
        _wait(lambda: fake.leaks()["instances"] == [], 30, "no instance left")
        print(f"spot job with one preemption: {time.monotonic() - t0:.1f}s", *reasons, sep="\n")
    finally:
        store.close()
