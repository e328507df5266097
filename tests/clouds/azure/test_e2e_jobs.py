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

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests import netns
from tests.azure_fake import AzureFake
from tests.blob_fake import BlobFake, blob_on_lab  # noqa: F401 - the fixture
from tests.checkpoint_view import committed_now
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        netns.unavailable_reason() is not None,
        reason=f"sshd nodes unavailable: {netns.unavailable_reason()}",
    ),
]


EXAMPLES = Path(__file__).resolve().parents[3] / "task_examples"
CONTAINER = "launcher-test-ckpt"
COUNT_TO = 30


@pytest.fixture
def spot_env(azure_cloud: AzureFake, blob_on_lab: BlobFake, launcher_home: Path,  # noqa: F811
             monkeypatch: pytest.MonkeyPatch) -> Iterator[AzureFake]:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_LOG_SYNC_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    config = launcher_home / "config.yaml"
    config.write_text(config.read_text() + "jobs:\n  checkpoint_save_interval: 1\n")
    try:
        yield azure_cloud
    finally:
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)


def _task(tmp_path: Path, account: str) -> str:
    run = ('if [ "$LAUNCHER_NODE_RANK" = 0 ]; then python3 count_resumable.py; '
           "else echo worker up; fi")
    path = tmp_path / "spot.yaml"
    path.write_text(
        f"name: azspot\nnum_nodes: 2\nworkdir: {EXAMPLES}\n"
        "resources:\n  cloud: azure\n  instance_type: Standard_D2s_v5\n  use_spot: true\n"
        f"checkpoint:\n  path: /root/ckpt\n  store: az://{account}/{CONTAINER}/run\n"
        f"envs:\n  COUNT_TO: '{COUNT_TO}'\n  STEP_S: '0.15'\n  CKPT_EVERY: '1'\n"
        f"run: |\n  {run}\n"
    )
    return str(path)


def _saved_count(blob: BlobFake) -> int:  # noqa: F811
    """The count in the latest save the nodes committed (0 before the first)."""
    view = committed_now(lambda: blob.keys(CONTAINER, "run/"),
                         lambda k: blob.read(CONTAINER, k), "run/", per_task=True)
    return int(json.loads(view["count.json"])["count"]) if "count.json" in view else 0


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
