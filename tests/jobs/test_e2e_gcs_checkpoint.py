"""A managed spot job on the real local cloud whose checkpoint lives in GCS (the JSON
API fake on 127.0.0.1): saved by the nodes while it runs, the node-local copy destroyed
with the preempted cluster, restored from GCS by the recovery, resumed from the saved
step. The twin of test_e2e_s3_checkpoint.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from launcher.api import jobs as api
from tests.checkpoint_view import committed_now, task_prefixes
from tests.gcs_fake import GCSFake, gcs  # noqa: F401 - the fixture

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


def _saved_count(gcs: GCSFake) -> int:  # noqa: F811
    """The count in the latest committed save (0 before the first)."""
    view = committed_now(lambda: gcs.keys("ckpt-bucket", "run/"),
                         lambda k: gcs.read("ckpt-bucket", k), "run/", per_task=True)
    return int(json.loads(view["count.json"])["count"]) if "count.json" in view else 0


def test_spot_job_resumes_from_the_step_saved_in_gcs(
        tmp_path: Path, launcher_home: Path, gcs: GCSFake) -> None:  # noqa: F811
    (launcher_home / "config.yaml").write_text("jobs:\n  checkpoint_save_interval: 0.5\n")
    task = Path(_task(tmp_path, count_to=30, step_s=0.1))
    task.write_text(task.read_text().replace(
        "name: counter", "name: counter\ncheckpoint: {store: gs://ckpt-bucket/run}"))
    job = api.jobs_launch(str(task))
    first = _running_attempt(job.id, 1)
    _wait(lambda: _saved_count(gcs) >= 5, what="a periodic save in GCS")
    assert "ckpt-bucket" in gcs.buckets  # created by the client (it did not exist)
    api.jobs_controller_stop()  # so the recovery starts only once the disk copy is gone
    _preempt(first)  # no notice: the nodes die without a last save
    saved = _saved_count(gcs)
    local = launcher_home / "checkpoints" / str(job.id)
    assert json.loads((local / "count.json").read_text())["count"] >= saved
    shutil.rmtree(local)  # only GCS remembers the progress now
    api.jobs_controller_start()
    final = api.jobs_wait(job.id, timeout=90)
    assert final.status == "SUCCEEDED" and final.recoveries == 1, _status(job.id)
    lines = _logs(job.id)
    resumed = [int(m.group(1)) for ln in lines if (m := re.search(r"resuming from (\d+)", ln))]
    assert resumed == [saved] and saved >= 5  # the step saved in GCS, not 0
    # count.json only: the job's temporary file (.count.json.PID.tmp) is never saved
    assert any(re.search(r"launcher: restored 1 file\(s\).*GCS", ln)
               for ln in lines), [ln for ln in lines if "launcher:" in ln]
    counts = _counts(lines)
    assert counts[-1] == 30 and set(range(1, 31)) <= set(counts)
    assert _saved_count(gcs) == 30  # the save at exit
    # one prefix per task id, stable across the recovery
    assert len(task_prefixes(gcs.keys("ckpt-bucket"), "run/")) == 1
    _no_clusters_left(launcher_home)
