"""End to end on the real local cloud (controller process, agent, checkpoints): in-place
replacement logs and crash safety, preemption accounting, one live cluster per job."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore

from .test_e2e_local import (  # noqa: F401  (fast_controller: autouse fixture)
    TERMINAL,
    _checkpoint,
    _counts,
    _LiveClusters,
    _logs,
    _no_clusters_left,
    _preempt,
    _running_attempt,
    _status,
    _task,
    _wait,
    fast_controller,
)


def _gang_task(tmp_path: Path, count_to: int) -> str:
    task = _task(tmp_path, count_to=count_to, step_s=0.1,
                 run="if [ $LAUNCHER_NODE_RANK = 0 ]; then "
                     "echo $LAUNCHER_ATTEMPT >> $LAUNCHER_CHECKPOINT_DIR/gang-runs; "
                     "python3 count_resumable.py; else sleep 600; fi")
    Path(task).write_text(Path(task).read_text().replace("name: counter",
                                                         "name: gang\nnum_nodes: 3"))
    return task


@pytest.fixture
def watch_live(launcher_home: Path) -> Iterator[list[_LiveClusters]]:
    made: list[_LiveClusters] = []
    yield made
    for w in made:
        w.stop()


def test_logs_keep_every_gang_run_of_an_in_place_replacement(
        tmp_path: Path, launcher_home: Path) -> None:
    job = api.jobs_launch(_gang_task(tmp_path, count_to=20))
    cluster = _running_attempt(job.id, 1)
    _wait(lambda: _checkpoint(launcher_home, job.id) >= 4, what="progress")
    _preempt(cluster, rank=2)
    _wait(lambda: api.jobs_status(job.id).recoveries == 1 and _status(job.id) == "RUNNING",
          what="gang restarted")
    _wait(lambda: _checkpoint(launcher_home, job.id) >= 20, what="count finished")
    api.jobs_cancel(job.id)
    assert api.jobs_wait(job.id, timeout=30).status == "CANCELLED"
    lines = _logs(job.id)
    restart = [i for i, ln in enumerate(lines) if "gang restarted after" in ln]
    assert len(restart) == 1, lines
    before, after = _counts(lines[:restart[0]]), _counts(lines[restart[0]:])
    assert before and before[0] == 1 and before[-1] >= 4  # the first gang run's output
    assert after and 1 < after[0] <= before[-1] + 1  # resumed from the checkpoint
    assert after[-1] == 20
    (a,) = api.jobs_detail(job.id).attempts
    store = JobStore()
    try:
        row = store.attempts(job.id)[0]
    finally:
        store.close()
    assert row.gang_runs == 2 and row.preempted_at is not None
    # the restarted gang can tell: LAUNCHER_ATTEMPT numbers every gang run
    runs = (launcher_home / "checkpoints" / str(job.id) / "gang-runs").read_text().split()
    assert runs == ["1", "2"]
    assert row.work_lost_s is not None and row.work_lost_s < 1.0  # checkpoint every step
    _no_clusters_left(launcher_home)


@pytest.mark.parametrize("point", ["replace_intent_recorded", "nodes_replaced"])
def test_kill9_controller_during_in_place_replacement(
        tmp_path: Path, launcher_home: Path, monkeypatch: pytest.MonkeyPatch, point: str,
        watch_live: list[_LiveClusters]) -> None:
    monkeypatch.setenv("LAUNCHER_CONTROLLER_CRASH_AT", point)
    task = _task(tmp_path, count_to=25, step_s=0.1,
                 run="if [ $LAUNCHER_NODE_RANK = 0 ]; then python3 count_resumable.py; "
                 "else while [ ! -f $LAUNCHER_CHECKPOINT_DIR/count.json ] || "
                 "! grep -q '\"count\": 25' $LAUNCHER_CHECKPOINT_DIR/count.json; do sleep 0.1; "
                 "done; fi")
    Path(task).write_text(Path(task).read_text().replace("name: counter",
                                                         "name: gang\nnum_nodes: 3"))
    job = api.jobs_launch(task)
    monkeypatch.delenv("LAUNCHER_CONTROLLER_CRASH_AT")
    live = _LiveClusters(launcher_home, job.id)
    watch_live.append(live)
    cluster = _running_attempt(job.id, 1)
    _wait(lambda: _checkpoint(launcher_home, job.id) >= 3, what="progress")
    _preempt(cluster, rank=2)
    _wait(lambda: not api.jobs_controller_status().running, what="controller died (exit 137)")
    assert _status(job.id) not in TERMINAL
    api.jobs_controller_start()
    final = api.jobs_wait(job.id, timeout=90)
    detail = api.jobs_detail(job.id)
    assert final.status == "SUCCEEDED", [e.reason for e in detail.events]
    assert final.recoveries == 1
    assert len(detail.attempts) == 2  # the interrupted replacement became a full relaunch
    assert live.stop() == 1, live.seen  # never two clusters of the job at once
    assert _counts(_logs(job.id))[-1] == 25
    _no_clusters_left(launcher_home)


def test_recovery_time_counts_from_the_preemption_not_its_detection(
        tmp_path: Path, launcher_home: Path) -> None:
    job = api.jobs_launch(_task(tmp_path, count_to=60, step_s=0.1))
    cluster = _running_attempt(job.id, 1)
    _wait(lambda: _checkpoint(launcher_home, job.id) >= 3, what="progress")
    api.jobs_controller_stop()
    _preempt(cluster)
    preempted = time.time()
    time.sleep(3)  # the preemption goes unnoticed for 3 s (no controller): elapsed time is the point
    api.jobs_controller_start()
    _wait(lambda: api.jobs_status(job.id).recoveries == 1 and _status(job.id) == "RUNNING",
          what="recovered")
    summary = api.jobs_status(job.id)
    assert summary.last_recovery_s is not None and summary.last_recovery_s >= 3.0
    store = JobStore()
    try:
        first = store.attempts(job.id)[0]
    finally:
        store.close()
    assert first.preempted_at == pytest.approx(preempted, abs=0.5)
    assert first.work_lost_s is not None and first.work_lost_s < 1.0  # checkpoint every 0.1 s
    api.jobs_cancel(job.id)
    api.jobs_wait(job.id, timeout=30)
