"""A managed spot job on the real local cloud whose checkpoint lives in a bucket: S3
(moto's server on 127.0.0.1), GCS (the JSON API fake on 127.0.0.1) or Azure Blob (the
REST fake on 127.0.0.1, SAS-checked). Saved by the nodes while it runs, the node-local
copy destroyed with the preempted cluster, restored from the bucket by the recovery,
resumed from the saved step."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launcher.api import jobs as api
from tests.blob_fake import blob  # noqa: F401 - the fixture
from tests.checkpoint_view import committed_now, task_prefixes
from tests.gcs_fake import gcs  # noqa: F401 - the fixture
from tests.moto_s3 import s3  # noqa: F401 - the fixture

from .test_e2e_local import (  # noqa: F401  (fast_controller: autouse fixture)
    _counts,
    _logs,
    _no_clusters_left,
    _preempt,
    _running_attempt,
    _status,
    _task,
    _wait,
    fast_controller,
)


@dataclass(frozen=True)
class Store:
    fixture: str  # the fake's fixture
    uri: str  # the task's checkpoint store
    label: str  # how the restore line names the store ("" for S3: not checked)
    created: str | None  # the fake's attribute listing buckets the client created


STORES = {
    "s3": Store("s3", "s3://ckpt-bucket/run", "", None),
    "gcs": Store("gcs", "gs://ckpt-bucket/run", "GCS", "buckets"),
    "blob": Store("blob", "az://devacct/ckpt-bucket/run", "Azure Blob", "blobs"),
}


def _saved_count(fake: Any) -> int:
    """The count in the latest committed save (0 before the first)."""
    view = committed_now(lambda: fake.keys("ckpt-bucket", "run/"),
                         lambda k: fake.read("ckpt-bucket", k), "run/", per_task=True)
    return int(json.loads(view["count.json"])["count"]) if "count.json" in view else 0


@pytest.mark.parametrize("store", list(STORES.values()), ids=list(STORES))
def test_spot_job_resumes_from_the_step_saved_in_the_bucket(
        tmp_path: Path, launcher_home: Path, request: pytest.FixtureRequest,
        store: Store) -> None:
    fake = request.getfixturevalue(store.fixture)
    where = store.label or "S3"
    (launcher_home / "config.yaml").write_text("jobs:\n  checkpoint_save_interval: 0.5\n")
    task = Path(_task(tmp_path, count_to=30, step_s=0.1))
    task.write_text(task.read_text().replace(
        "name: counter", f"name: counter\ncheckpoint: {{store: {store.uri}}}"))
    job = api.jobs_launch(str(task))
    first = _running_attempt(job.id, 1)
    _wait(lambda: _saved_count(fake) >= 5, what=f"a periodic save in {where}")
    if store.created:
        assert "ckpt-bucket" in getattr(fake, store.created)  # created by the client
    api.jobs_controller_stop()  # so the recovery starts only once the disk copy is gone
    _preempt(first)  # no notice: the nodes die without a last save
    saved = _saved_count(fake)
    local = launcher_home / "checkpoints" / str(job.id)
    assert json.loads((local / "count.json").read_text())["count"] >= saved
    shutil.rmtree(local)  # only the bucket remembers the progress now
    api.jobs_controller_start()
    final = api.jobs_wait(job.id, timeout=90)
    assert final.status == "SUCCEEDED" and final.recoveries == 1, _status(job.id)
    lines = _logs(job.id)
    resumed = [int(m.group(1)) for ln in lines if (m := re.search(r"resuming from (\d+)", ln))]
    assert resumed == [saved] and saved >= 5  # the step saved in the bucket, not 0
    # count.json only: the job's temporary file (.count.json.PID.tmp) is never saved
    restored = r"launcher: restored 1 file\(s\)" + (f".*{store.label}" if store.label else "")
    assert any(re.search(restored, ln) for ln in lines), (
        [ln for ln in lines if "launcher:" in ln] if store.label else lines[:20])
    counts = _counts(lines)
    assert counts[-1] == 30 and set(range(1, 31)) <= set(counts)
    assert _saved_count(fake) == 30  # the save at exit
    # one prefix per task id, stable across the recovery
    assert len(task_prefixes(fake.keys("ckpt-bucket"), "run/")) == 1
    _no_clusters_left(launcher_home)
