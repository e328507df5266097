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

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests import netns
from tests.checkpoint_view import committed_now
from tests.gcp_fake import GCPFake
from tests.gcs_fake import GCSFake, gcs_on_lab  # noqa: F401 - the fixture
from tests.waiting import wait_until as _wait

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(netns.unavailable_reason() is not None,
                       reason=f"sshd nodes unavailable: {netns.unavailable_reason()}"),
]


EXAMPLES = Path(__file__).resolve().parents[3] / "task_examples"
BUCKET = "launcher-test-ckpt"
COUNT_TO = 30


@pytest.fixture
def spot_env(gcp_cloud: GCPFake, gcs_on_lab: GCSFake, launcher_home: Path,  # noqa: F811
             monkeypatch: pytest.MonkeyPatch) -> Iterator[GCPFake]:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.2")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_LOG_SYNC_S", "0.5")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    config = launcher_home / "config.yaml"
    config.write_text(config.read_text() + "jobs:\n  checkpoint_save_interval: 1\n")
    try:
        yield gcp_cloud
    finally:
        api.jobs_controller_stop()
        from launcher.api import clusters

        for row in clusters.status():
            clusters.down(row.name)




def _saved_count(gcs: GCSFake) -> int:  # noqa: F811
    """The count in the latest save the nodes committed to GCS (0 before the first)."""
    view = committed_now(lambda: gcs.keys(BUCKET, "run/"), lambda k: gcs.read(BUCKET, k),
                         "run/", per_task=True)
    return int(json.loads(view["count.json"])["count"]) if "count.json" in view else 0


def _names(fake: GCPFake, cluster: str) -> list[str]:
    return [i["name"] for i in fake.live() if i["labels"]["launcher-cluster"] == cluster]


def test_spot_gang_preempted_by_gce_relaunches_in_another_zone_and_resumes_from_gcs(
        spot_env: GCPFake, gcs_on_lab: GCSFake, tmp_path: Path) -> None:  # noqa: F811
    fake, gcs = spot_env, gcs_on_lab
    run = ('if [ "$LAUNCHER_NODE_RANK" = 0 ]; then python3 count_resumable.py; '
           "else echo worker up; fi")
    task = tmp_path / "spot.yaml"
    task.write_text(
        f"name: spot\nnum_nodes: 2\nworkdir: {EXAMPLES}\n"
        "resources:\n  cloud: gcp\n  region: us-central1\n  instance_type: n2-standard-2\n"
        "  use_spot: true\n"
        f"checkpoint:\n  path: /root/ckpt\n  store: gs://{BUCKET}/run\n"
        f"envs:\n  COUNT_TO: '{COUNT_TO}'\n  STEP_S: '0.15'\n  CKPT_EVERY: '1'\n"
        f"run: |\n  {run}\n")
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
        _wait(lambda: _saved_count(gcs) >= 5, 20, "a checkpoint saved to GCS")
        assert "127.0.0.1" not in gcs.url  # on the lab's gateway: the nodes reached it
        saved = _saved_count(gcs)

        fake.preempt(names)  # no notice: the bodies die without a last save
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
