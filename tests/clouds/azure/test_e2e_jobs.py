"""A managed spot job on Azure (ARM fake + sshd bodies), evicted the way Azure does it.

The controller (its own background process: credentials from the fake `az` login, the
ARM endpoint from config.yaml, like any user's) launches a 2-node spot gang
(`priority: Spot`, `evictionPolicy: Delete`); the test evicts both VMs (the bodies die,
the VMs and their NICs disappear, the resource group stays: what a Spot eviction with
policy Delete leaves). The controller must read PREEMPTED from ARM's own view (query),
block the location (the bundled catalog has no Azure zones), relaunch in another
location, and finish the job, which resumes from the checkpoint the nodes saved to
`az://devacct/launcher-test-ckpt/run` (the Blob REST fake, tests/blob_fake.py, on the
lab's gateway: reached from the host and from inside the node namespaces; the account
key connection string's `BlobEndpoint` names it) with the nodes' stdlib Blob client,
not from 0.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests.azure_fake import AzureFake
from tests.blob_fake import BlobFake, blob_on_lab  # noqa: F401 - the fixture
from tests.cloud_e2e import (
    NETNS_ONLY,
    assert_recovered_once,
    managed_jobs,
    resumable_task,
    saved_count,
)
from tests.waiting import wait_until

pytestmark = NETNS_ONLY

CONTAINER = "launcher-test-ckpt"
COUNT_TO = 30


@pytest.fixture
def spot_env(azure_cloud: AzureFake, blob_on_lab: BlobFake, launcher_home: Path,  # noqa: F811
             monkeypatch: pytest.MonkeyPatch) -> Iterator[AzureFake]:
    with managed_jobs(monkeypatch, log_sync=True, launcher_home=launcher_home):
        yield azure_cloud


def _task(tmp_path: Path, account: str) -> str:
    return resumable_task(
        tmp_path, "azspot", "  cloud: azure\n  instance_type: Standard_D2s_v5\n  use_spot: true\n",
        f"az://{account}/{CONTAINER}/run", COUNT_TO)


def _saved_count(blob: BlobFake) -> int:  # noqa: F811
    return saved_count(blob, CONTAINER)


def test_spot_gang_evicted_relaunches_in_another_location_and_resumes_from_blob(
        spot_env: AzureFake, blob_on_lab: BlobFake, tmp_path: Path) -> None:  # noqa: F811
    fake, blob = spot_env, blob_on_lab
    t0 = time.monotonic()
    job = api.jobs_launch(_task(tmp_path, blob.account))
    store = JobStore()
    try:
        wait_until(lambda: api.jobs_status(job.id).status == "RUNNING", 60, "RUNNING")
        (first,) = store.attempts(job.id)
        assert first.cloud == "azure" and first.use_spot
        vms = [v["id"] for v in fake.vms()]
        assert len(vms) == 2
        assert all(fake.vm(v)["properties"]["priority"] == "Spot" for v in vms)
        wait_until(lambda: _saved_count(blob) >= 5, 20, "a checkpoint saved to Blob")
        assert "127.0.0.1" not in blob.url  # on the lab's gateway: the nodes reached it
        saved = _saved_count(blob)
        fake.evict(vms)  # no notice: the bodies die, the VMs are deleted

        reasons, attempts = assert_recovered_once(job.id, store)
        assert attempts[1].region != first.region, [(a.region, a.outcome) for a in attempts]
        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        resumed = [int(m.group(1)) for ln in lines if (m := re.search(r"resuming from (\d+)", ln))]
        assert resumed and resumed[-1] >= saved >= 5, (saved, resumed, lines[-20:])  # not 0
        assert any(re.search(r"launcher: restored \d+ file\(s\).*Azure Blob", ln)
                   for ln in lines), [ln for ln in lines if "launcher:" in ln]
        assert any(f"done: counted to {COUNT_TO}" in ln for ln in lines), lines[-10:]
        assert _saved_count(blob) == COUNT_TO  # the save at exit
        wait_until(lambda: fake.inventory() == [], 30, "nothing left in the ARM fake")
        print(f"azure spot job with one eviction: {time.monotonic() - t0:.1f}s", *reasons,
              sep="\n")
    finally:
        store.close()
