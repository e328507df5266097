"""The DEADLINE strategy's records: the deadline log, progress (wall / reported), the
restart-overhead estimate from the job's own history."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from launcher.jobs import deadline_store as dl
from launcher.jobs import paths
from launcher.jobs.controller.deadline import restart_overhead_s
from launcher.jobs.deadline_store import DeadlineSpec
from launcher.jobs.store import JobRow, JobStore
from launcher.task.policies import DEFAULT_RESTART_OVERHEAD_S

# every test runs on both engines (tests/conftest.py, db_engine)
pytestmark = pytest.mark.usefixtures("db_engine")


def _job(store: JobStore, *, overhead: float | None, progress: str = "wall") -> JobRow:
    return store.add_job(name="d", task_yaml="run: x", task_source=None, strategy="DEADLINE",
                         max_restarts_on_errors=0, recover_on_exit_codes=(),
                         deadline=DeadlineSpec(time.time() + 1000.0, 500.0, overhead, progress))


def test_spec_round_trips_and_other_jobs_have_none(launcher_home: Path) -> None:
    store = JobStore()
    job = _job(store, overhead=30.0, progress="reported")
    assert store.job(job.id).deadline == job.deadline and job.deadline is not None
    assert job.deadline.restart_overhead_s == 30.0 and job.deadline.progress == "reported"
    plain = store.add_job(name="p", task_yaml="run: x", task_source=None, strategy="FAILOVER",
                          max_restarts_on_errors=0, recover_on_exit_codes=())
    assert plain.deadline is None


def test_wall_progress_counts_each_gang_from_its_start_to_its_stop(launcher_home: Path) -> None:
    store = JobStore()
    job = _job(store, overhead=10.0)
    dl.add_log(store, job.id, 100.0, "running", "up", mode="spot", attempt=1)
    dl.add_log(store, job.id, 160.0, "stopped", "PREEMPTED: x", mode="spot", attempt=1)
    dl.add_log(store, job.id, 200.0, "running", "up", mode="on_demand", attempt=3)
    rows = dl.log_rows(store, job.id)
    assert [r.kind for r in rows] == ["running", "stopped", "running"]
    assert dl.wall_progress_s(rows, 150.0) == 50.0  # the open gang counts until now
    assert dl.wall_progress_s(rows, 190.0) == 60.0  # a start in the future counts nothing
    assert dl.wall_progress_s(rows, 230.0) == 90.0
    assert dl.progress_s(job, rows, 1e9) == 500.0 - dl.UNFINISHED_S  # capped below the work


def test_reported_progress_is_the_largest_fraction_printed(launcher_home: Path) -> None:
    store = JobStore()
    job = _job(store, overhead=10.0, progress="reported")
    assert dl.reported_fraction(job.id) == 0.0
    log1 = paths.attempt_log_path(job.id, 1)
    log1.parent.mkdir(parents=True, exist_ok=True)
    log1.write_text("(rank 0) step 1\n(rank 0) LAUNCHER_PROGRESS=0.25\n"
                    "(rank 0) LAUNCHER_PROGRESS=0.4\nLAUNCHER_PROGRESS=oops\n")
    paths.attempt_log_path(job.id, 2).write_text("LAUNCHER_PROGRESS=0.35\n")
    other = paths.attempt_log_path(job.id + 1, 1)
    other.parent.mkdir(parents=True, exist_ok=True)
    other.write_text("LAUNCHER_PROGRESS=0.9\n")  # another job's: not counted
    assert dl.reported_fraction(job.id) == 0.4
    assert dl.progress_s(job, [], 0.0) == 0.4 * 500.0


def test_restart_overhead_is_given_or_estimated_from_the_jobs_history(launcher_home: Path
                                                                      ) -> None:
    store = JobStore()
    given = _job(store, overhead=42.0)
    assert restart_overhead_s(given, []) == 42.0
    job = _job(store, overhead=None)
    assert restart_overhead_s(job, []) == DEFAULT_RESTART_OVERHEAD_S  # no history yet
    a1 = store.add_attempt(job.id, 1, "mj-x-1", "initial", market="spot")
    store.update_attempt(job.id, 1, running_at=a1.created_at + 20.0, work_lost_s=6.0)
    a2 = store.add_attempt(job.id, 2, "mj-x-2", "preemption", market="on_demand")
    store.update_attempt(job.id, 2, running_at=a2.created_at + 40.0)
    store.add_attempt(job.id, 3, "mj-x-3", "preemption", market="spot")  # never ran
    # mean provisioning + setup (30 s) + mean work lost since the last checkpoint (6 s)
    assert abs(restart_overhead_s(job, store.attempts(job.id)) - 36.0) < 1e-6


def test_reported_progress_from_a_progress_file_in_a_local_checkpoint_dir(
        launcher_home: Path, tmp_path: Path) -> None:
    store = JobStore()
    job = _job(store, overhead=10.0, progress="reported")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "progress").write_text("0.6\n")
    store.add_attempt(job.id, 1, "mj-y-1", "initial", market="spot")
    store.update_attempt(job.id, 1, cloud="local", checkpoint_dir=str(ckpt))
    elsewhere = tmp_path / "node-path"  # another cloud's node path that happens to exist here
    elsewhere.mkdir()
    (elsewhere / "progress").write_text("0.9\n")
    store.add_attempt(job.id, 2, "mj-y-2", "preemption", market="spot")
    store.update_attempt(job.id, 2, cloud="aws", checkpoint_dir=str(elsewhere))
    dirs = dl.local_checkpoint_dirs(store.attempts(job.id))
    assert dirs == [str(ckpt)]
    assert dl.progress_s(job, [], 0.0, dirs) == 0.6 * 500.0
    (ckpt / "progress").write_text("garbage")
    assert dl.reported_fraction(job.id, dirs) == 0.0
