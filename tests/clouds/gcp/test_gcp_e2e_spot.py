"""A managed spot job on GCP (the Compute REST fake + sshd bodies), preempted the way
GCE does it for `instanceTerminationAction: DELETE`: the bodies die (no notice), the
instances are deleted and the zone records a `compute.instances.preempted` operation.
The controller (its own process, reaching the fake through the same documented
settings) must see PREEMPTED in GCE's view, block the zone, relaunch in another zone
of us-central1 and finish the job, which resumes from the checkpoint the nodes saved
to `gs://launcher-test-ckpt/run` (the GCS JSON API fake, tests/gcs_fake.py, on the
lab's gateway: reached from the host and from inside the node namespaces, through the
documented `STORAGE_EMULATOR_HOST` and `LAUNCHER_GCS_TOKEN`) with the nodes' stdlib
GCS client, not from 0.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests.cloud_e2e import (
    NETNS_ONLY,
    assert_recovered_once,
    managed_jobs,
    resumable_task,
    saved_count,
)
from tests.gcp_fake import GCPFake
from tests.gcs_fake import GCSFake, gcs_on_lab  # noqa: F401 - the fixture
from tests.waiting import wait_until as _wait

pytestmark = NETNS_ONLY

BUCKET = "launcher-test-ckpt"
COUNT_TO = 30


@pytest.fixture
def spot_env(gcp_cloud: GCPFake, gcs_on_lab: GCSFake, launcher_home: Path,  # noqa: F811
             monkeypatch: pytest.MonkeyPatch) -> Iterator[GCPFake]:
    with managed_jobs(monkeypatch, log_sync=True, launcher_home=launcher_home):
        yield gcp_cloud


def _saved_count(gcs: GCSFake) -> int:  # noqa: F811
    return saved_count(gcs, BUCKET)


def _names(fake: GCPFake, cluster: str) -> list[str]:
    return [i["name"] for i in fake.live() if i["labels"]["launcher-cluster"] == cluster]


def test_spot_gang_preempted_by_gce_relaunches_in_another_zone_and_resumes_from_gcs(
        spot_env: GCPFake, gcs_on_lab: GCSFake, tmp_path: Path) -> None:  # noqa: F811
    fake, gcs = spot_env, gcs_on_lab
    task = resumable_task(
        tmp_path, "spot",
        "  cloud: gcp\n  region: us-central1\n  instance_type: n2-standard-2\n  use_spot: true\n",
        f"gs://{BUCKET}/run", COUNT_TO)
    t0 = time.monotonic()
    job = api.jobs_launch(task)
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
        _wait(lambda: _saved_count(gcs) >= 5, 20, "a checkpoint saved to GCS")
        assert "127.0.0.1" not in gcs.url  # on the lab's gateway: the nodes reached it
        saved = _saved_count(gcs)

        fake.preempt(names)  # no notice: the bodies die without a last save
        reasons, attempts = assert_recovered_once(job.id, store)
        assert attempts[1].region == "us-central1" and attempts[1].zone != first.zone
        preempted_ops = [o for o in fake.state.operations.values()
                         if o["operationType"] == "compute.instances.preempted"]
        assert len(preempted_ops) == 2

        lines: list[str] = []
        api.jobs_logs(job.id, lines.append, follow=False)
        resumed = [int(m.group(1)) for ln in lines if (m := re.search(r"resuming from (\d+)", ln))]
        assert resumed and resumed[-1] >= saved >= 5, (saved, resumed, lines[-20:])  # not 0
        assert any(re.search(r"launcher: restored \d+ file\(s\).*GCS", ln) for ln in lines), \
            [ln for ln in lines if "launcher:" in ln]
        assert _saved_count(gcs) == COUNT_TO  # the save at exit
        _wait(lambda: fake.leaks()["instances"] == [], 30, "no instance left")
        print(f"spot job with one preemption: {time.monotonic() - t0:.1f}s", *reasons, sep="\n")
    finally:
        store.close()
