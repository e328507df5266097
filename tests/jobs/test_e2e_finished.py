"""End to end on the real local cloud: a preemption that comes after the job's exit was
recorded by the head-node agent must not run the job again (issue 8, item 1).

Several managed jobs run at once; each one's node is preempted at a different offset
around the moment its run ends. The ground truth is the agent's own record on the
preempted head (its files stay readable), read right after the preemption: a run the
agent had recorded SUCCEEDED ends the managed job after one attempt; a run that had not
ended is recovered and runs once more."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.clouds.local import LocalCloud
from launcher.errors import ClusterNotFoundError
from launcher.jobs.store import JobStore

from .test_e2e_local import (  # noqa: F401  (fast_controller: autouse fixture)
    _no_clusters_left,
    _running_attempt,
    _task,
    _wait,
    fast_controller,
)

RUN_S = 1.0  # how long each run lasts
# (offset, exit code): seconds after the agent recorded the run's end (>= 0), or before
# its planned end (< 0); runs that fail (exit 3, no restarts) end FAILED by themselves.
CASES = ((-0.5, 0), (-0.2, 0), (0.0, 0), (0.0, 0), (0.05, 0), (0.1, 0), (0.2, 0), (0.4, 0),
         (0.7, 0), (1.0, 0), (-0.3, 3), (0.0, 3), (0.1, 3), (0.4, 3))


def _agent_record(cluster: str) -> tuple[str, float | None] | None:
    """(status, started_at) of cluster job 1 in the head agent's jobs.db; None if unreadable."""
    db = LocalCloud().node_dir(cluster, 0) / ".launcher-agent" / "jobs.db"
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)
        try:
            row = conn.execute("SELECT status, started_at FROM jobs WHERE id = 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return None if row is None else (str(row[0]), row[1])


def _preempt_at(cluster: str, offset: float, truth: dict[str, str]) -> None:
    """Preempt `cluster` at `offset` around its run's end and record what the agent had
    recorded then: "ended" (its end was recorded before the preemption), "gone" (the
    controller had seen the end and taken the cluster down), "killed <status>" (the
    record read after the preemption), or "unknown" (unreadable by then)."""
    deadline = time.monotonic() + 60
    before = None
    while time.monotonic() < deadline:
        rec = _agent_record(cluster)
        if rec is not None and rec[1] is not None:
            before, started = rec
            if offset < 0 and time.time() >= float(started) + RUN_S + offset:
                break
            if offset >= 0 and before in ("SUCCEEDED", "FAILED"):
                time.sleep(offset)
                break
        time.sleep(0.005)
    try:
        LocalCloud().preempt(cluster)
    except ClusterNotFoundError:
        truth[cluster] = "gone"
        return
    except Exception:  # the controller's teardown removed the node under the preemption
        truth[cluster] = "unknown"
        return
    if before in ("SUCCEEDED", "FAILED"):  # a recorded end never changes
        truth[cluster] = "ended"
        return
    rec = _agent_record(cluster)  # unreadable: the controller took the cluster down since
    truth[cluster] = f"killed {rec[0]}" if rec is not None else "unknown"


def test_preemption_around_the_end_never_reruns_a_finished_job(
        tmp_path: Path, launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The controller looks every 2 s: a preemption soon after the end is seen first.
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "2.0")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "2.0")
    ckpt = "$LAUNCHER_CHECKPOINT_DIR"
    tasks = {code: _task(tmp_path, run=f"echo run >> {ckpt}/runs; sleep {RUN_S}; exit {code}")
             for code in {c for _, c in CASES}}
    jobs = [api.jobs_launch(tasks[code]) for _, code in CASES]
    truth: dict[str, str] = {}
    threads = []
    for job, (offset, _) in zip(jobs, CASES, strict=True):
        cluster = _running_attempt(job.id, 1)
        t = threading.Thread(target=_preempt_at, args=(cluster, offset, truth), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(90)
    store = JobStore()
    try:
        clusters = [store.attempts(j.id)[0].cluster_name for j in jobs]
    finally:
        store.close()
    problems = []
    for job, (offset, code), cluster in zip(jobs, CASES, clusters, strict=True):
        final = api.jobs_wait(job.id, timeout=90)
        seen = truth.get(cluster, "?")
        runs = (launcher_home / "checkpoints" / str(job.id) / "runs").read_text().split()
        if seen in ("ended", "gone", "killed SUCCEEDED"):  # a success is never the kill's
            want = {1}
        elif seen == "killed RUNNING" or (seen == "killed FAILED" and code == 0):
            want = {2}  # the run had not ended by itself: recovered
        else:  # unknown, or a failing run that failed about when it was killed
            want = {1, 2}
        status = "SUCCEEDED" if code == 0 else "FAILED"
        if final.status != status or final.attempts not in want or len(runs) != final.attempts:
            problems.append(f"offset {offset:+.2f}, exit {code}: agent record {seen} at the "
                            f"preemption; job {final.status} after {final.attempts} "
                            f"attempt(s), {len(runs)} run(s)")
    assert problems == [], "\n".join(problems)
    # both sides of the race were exercised
    assert any(truth[c] == "ended" for c in clusters), truth
    assert any(truth[c] in ("killed RUNNING", "killed FAILED") for c in clusters), truth
    _wait(lambda: not (launcher_home / "local").exists()
          or list((launcher_home / "local").iterdir()) == [], 30, "clusters gone")
    _no_clusters_left(launcher_home)
