"""A managed spot job on Nebius (gRPC fake + sshd bodies), preempted the way Nebius does.

The controller (its own background process: the IAM token from NEBIUS_IAM_TOKEN, the
endpoint from config.yaml, like any user's) launches a 2-node preemptible gang
(`preemptible: {on_preemption: STOP}`); the test preempts one instance (its body dies and
the instance becomes STOPPED: what Nebius does to a preempted instance). The controller
must read PREEMPTED from the API's own view (query), relaunch (eu-north1 is the only
region with Nebius spot H100s in the catalog: the preempted region comes back as the last
tier) and finish the job; the preempted cluster is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests.cloud_e2e import NETNS_ONLY, assert_recovered_once, managed_jobs
from tests.nebius_fake import NebiusFake
from tests.waiting import wait_until

pytestmark = NETNS_ONLY


@pytest.fixture
def spot_env(nebius_cloud: NebiusFake, monkeypatch: pytest.MonkeyPatch) -> Iterator[NebiusFake]:
    with managed_jobs(monkeypatch):
        yield nebius_cloud


def _task(tmp_path: Path) -> str:
    path = tmp_path / "spot.yaml"
    path.write_text(
        "name: nbspot\nnum_nodes: 2\n"
        "resources:\n  cloud: nebius\n  instance_type: gpu-h100-sxm_1gpu-16vcpu-200gb\n"
        "  use_spot: true\n"
        "run: |\n"
        '  if [ "$LAUNCHER_NODE_RANK" = 0 ]; then for i in $(seq 1 25); do echo step $i; '
        "sleep 0.2; done; else echo worker up; fi\n"
    )
    return str(path)


def test_preempted_spot_gang_recovers(spot_env: NebiusFake, tmp_path: Path) -> None:
    fake = spot_env
    t0 = time.monotonic()
    job = api.jobs_launch(_task(tmp_path))
    store = JobStore()
    try:
        wait_until(lambda: api.jobs_status(job.id).status == "RUNNING", 60, "RUNNING")
        (first,) = store.attempts(job.id)
        assert first.cloud == "nebius" and first.use_spot
        ids = sorted(fake.instances)
        assert len(ids) == 2
        assert all(fake.instances[i].spec.check_presence("preemptible") for i in ids)
        fake.preempt(ids[1])  # no notice: the body dies, the instance is STOPPED

        reasons, attempts = assert_recovered_once(job.id, store)
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        assert any("step 25" in ln for ln in lines), lines[-10:]
        wait_until(lambda: not set(ids) & set(fake.instances), 30,
                   "the preempted gang deleted")
        print(f"nebius spot job with one preemption: {time.monotonic() - t0:.1f}s", *reasons,
              sep="\n")
    finally:
        store.close()
    wait_until(lambda: fake.inventory() == [], 30, "nothing left in the Nebius fake")
