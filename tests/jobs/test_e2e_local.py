"""End to end on the real local cloud: the controller process, the cluster runtime, the
head-node agent, `launcher local preempt`-style preemptions, real checkpoints."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import jobs as api
from launcher.jobs.store import JobStore
from tests.waiting import wait_until as _wait

EXAMPLES = Path(__file__).resolve().parents[2] / "task_examples"
CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]
TERMINAL = ("SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_NO_RESOURCE", "CANCELLED")


@pytest.fixture(autouse=True)
def fast_controller(launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MIN_S", "0.1")
    monkeypatch.setenv("LAUNCHER_JOBS_POLL_MAX_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_CONFIRM_S", "0.3")
    monkeypatch.setenv("LAUNCHER_JOBS_IDLE_EXIT_S", "120")
    monkeypatch.setenv("LAUNCHER_AGENT_KILL_GRACE", "1")
    yield launcher_home
    api.jobs_controller_stop()
    log = (launcher_home / "managed_jobs" / "controller.log")
    errors = [ln for ln in log.read_text().splitlines() if " ERROR " in ln] if log.exists() else []
    from launcher.clouds.local import LocalCloud, local_root

    root = local_root()
    leftovers = sorted(p.name for p in root.iterdir()) if root.exists() else []
    for name in leftovers:  # never leave processes behind, even when a test failed
        LocalCloud().terminate(name)
    assert errors == []  # the controller met nothing it did not expect


def _task(tmp_path: Path, *, count_to: int = 30, step_s: float = 0.1, ckpt_every: int = 1,
          extra: str = "", setup: str | None = None, run: str | None = None) -> str:
    lines = [
        "name: counter",
        f"workdir: {EXAMPLES}",
        "resources:",
        "  infra: local",
        "  use_spot: true",
    ]
    if extra:
        lines += ["  " + x for x in extra.strip().splitlines()]
    lines += ["envs:", f"  COUNT_TO: '{count_to}'", f"  STEP_S: '{step_s}'",
              f"  CKPT_EVERY: '{ckpt_every}'"]
    if setup:
        lines += ["setup: |", *("  " + x for x in setup.strip().splitlines())]
    lines += ["run: |", "  " + (run or "python3 count_resumable.py")]
    path = tmp_path / f"task-{time.monotonic_ns()}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)




def _status(job_id: int) -> str:
    return api.jobs_status(job_id).status


def _running_attempt(job_id: int, n: int) -> str:
    store = JobStore()
    try:
        _wait(lambda: _status(job_id) == "RUNNING" and len(store.attempts(job_id)) >= n,
              what=f"attempt {n} running")
        return store.attempts(job_id)[n - 1].cluster_name
    finally:
        store.close()


def _checkpoint(home: Path, job_id: int) -> int:
    try:
        return int(json.loads((home / "checkpoints" / str(job_id) / "count.json").read_text())[
            "count"])
    except (FileNotFoundError, ValueError):
        return 0


def _logs(job_id: int) -> list[str]:
    out: list[str] = []
    api.jobs_logs(job_id, out.append, follow=False)
    return out


def _counts(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for ln in lines if (m := re.search(r"\) count (\d+)$", ln))]


def _no_clusters_left(home: Path) -> None:
    from launcher.state.db import StateDB

    with StateDB() as db:
        assert [c.name for c in db.list_clusters()] == []
    local = home / "local"
    assert not local.exists() or list(local.iterdir()) == []


def _preempt(cluster: str, rank: int | None = None, notice: float = 0) -> None:
    from launcher.clouds.local import LocalCloud

    LocalCloud().preempt(cluster, rank, notice_seconds=notice)


class _LiveClusters:
    """Watches the local cloud's listing: the most clusters of job `job_id` alive at once."""

    def __init__(self, home: Path, job_id: int) -> None:
        self.root = home / "local"
        self.prefix = f"mj-{job_id}-"
        self.most = 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                live = [p.name for p in self.root.iterdir() if p.name.startswith(self.prefix)
                        and (p / "machines.json").exists()]
            except OSError:
                continue
            self.seen.update(live)
            self.most = max(self.most, len(live))

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        return self.most


def test_preempted_twice_resumes_from_checkpoint(tmp_path: Path, launcher_home: Path) -> None:
    job = api.jobs_launch(_task(tmp_path, count_to=40, step_s=0.1))
    first = _running_attempt(job.id, 1)
    _wait(lambda: _checkpoint(launcher_home, job.id) >= 5, what="progress")
    _preempt(first)
    second = _running_attempt(job.id, 2)
    at = _checkpoint(launcher_home, job.id)
    _wait(lambda: _checkpoint(launcher_home, job.id) >= at + 5, what="progress after recovery")
    _preempt(second)
    _running_attempt(job.id, 3)
    final = api.jobs_wait(job.id, timeout=60)
    assert final.status == "SUCCEEDED"
    assert final.recoveries == 2 and final.restarts_on_errors == 0
    assert final.last_recovery_s is not None and final.last_recovery_s < 10
    lines = _logs(job.id)
    resumed = [int(m.group(1)) for ln in lines if (m := re.search(r"resuming from (\d+)", ln))]
    assert len(resumed) == 2 and all(r > 0 for r in resumed)  # not from 0
    # every step exactly once across attempts; the job prints a step only after saving it,
    # so a preemption landing between the save and the print loses that one line - and
    # only a step an attempt then resumed from may be missing
    counts = _counts(lines)
    assert counts == sorted(set(counts)), "a step ran twice"
    assert set(range(1, 41)) - set(counts) <= set(resumed)
    assert sum("=== attempt" in ln and "on local/local" in ln for ln in lines) == 3
    assert _checkpoint(launcher_home, job.id) == 40
    assert any("done: counted to 40" in ln for ln in lines)
    _no_clusters_left(launcher_home)
    # the cost ledger has every attempt, closed, at its launch price (local: $0/h)
    from launcher.api.cost_report import cost_report

    mine = [ln for ln in cost_report(days=1).lines if ln.job_id == job.id]
    assert sorted(ln.attempt for ln in mine if ln.attempt is not None) == [1, 2, 3]
    assert {ln.owner for ln in mine} == {f"managed-job:{job.id}"}
    assert not any(ln.running for ln in mine) and all(ln.hours > 0 for ln in mine)
    assert [ln.cost for ln in mine] == [0.0, 0.0, 0.0]


def test_notice_sigterm_checkpoint_loses_no_step(tmp_path: Path, launcher_home: Path) -> None:
    # Checkpoints only on SIGTERM (and at the end): the notice is what saves the work.
    job = api.jobs_launch(_task(tmp_path, count_to=30, step_s=0.1, ckpt_every=10_000))
    first = _running_attempt(job.id, 1)
    time.sleep(1.0)
    _preempt(first, notice=5)  # blocks until the job has exited (or the notice expired)
    final = api.jobs_wait(job.id, timeout=60)
    assert final.status == "SUCCEEDED" and final.recoveries == 1
    lines = _logs(job.id)
    saved = [int(m.group(1)) for ln in lines if (m := re.search(r"SIGTERM: checkpoint at (\d+)", ln))]
    resumed = [int(m.group(1)) for ln in lines if (m := re.search(r"resuming from (\d+)", ln))]
    assert saved and saved == resumed and saved[0] > 0
    assert _counts(lines) == list(range(1, 31))  # no step lost, none repeated
    events = api.jobs_detail(job.id).events
    assert any("interruption notice" in e.reason for e in events)
    _no_clusters_left(launcher_home)


def test_user_code_failure_restarts_once_then_fails_and_cli_exit_code(
        tmp_path: Path, launcher_home: Path) -> None:
    task = _task(tmp_path, extra="job_recovery:\n  max_restarts_on_errors: 1",
                 run="echo failing; exit 3")
    proc = subprocess.run([*CLI, "jobs", "launch", task, "-y"],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.count("(rank 0) failing") == 2
    (row,) = api.jobs_queue()
    assert row.status == "FAILED" and row.restarts_on_errors == 1 and row.recoveries == 0
    assert row.attempts == 2
    _no_clusters_left(launcher_home)


def test_preemption_during_setup_recovers(tmp_path: Path, launcher_home: Path) -> None:
    marker = tmp_path / "setup-started"
    task = _task(tmp_path, count_to=5, step_s=0.05,
                 setup=f"if [ -e {marker} ]; then exit 0; fi\ntouch {marker}\nsleep 30")
    job = api.jobs_launch(task)
    _wait(marker.exists, what="setup started")
    store = JobStore()
    cluster = store.attempts(job.id)[0].cluster_name
    store.close()
    _preempt(cluster)
    final = api.jobs_wait(job.id, timeout=60)
    assert final.status == "SUCCEEDED" and final.recoveries == 1
    a1 = api.jobs_detail(job.id).attempts[0]
    assert a1.outcome == "PREEMPTED" and "setup" in (a1.reason or "")
    _no_clusters_left(launcher_home)


def test_cancel_during_recovery(tmp_path: Path, launcher_home: Path) -> None:
    marker = tmp_path / "first-setup-done"
    # The first setup is instant; the recovery's setup hangs, so the job sits in RECOVERING.
    task = _task(tmp_path, count_to=1000, step_s=0.1,
                 setup=f"if [ -e {marker} ]; then sleep 60; fi\ntouch {marker}")
    job = api.jobs_launch(task)
    first = _running_attempt(job.id, 1)
    _preempt(first)
    _wait(lambda: _status(job.id) == "RECOVERING", what="RECOVERING")
    store = JobStore()
    _wait(lambda: len(store.attempts(job.id)) == 2
          and store.attempts(job.id)[1].running_at is None
          and (launcher_home / "local" / store.attempts(job.id)[1].cluster_name).exists(),
          what="recovery provisioning")
    store.close()
    t0 = time.monotonic()
    api.jobs_cancel(job.id)
    final = api.jobs_wait(job.id, timeout=30)
    assert final.status == "CANCELLED"
    assert time.monotonic() - t0 < 15  # not waiting for the hanging setup
    _wait(lambda: not (launcher_home / "local").exists()
          or list((launcher_home / "local").iterdir()) == [], 15, "clusters gone")
    _no_clusters_left(launcher_home)
    second = api.jobs_detail(job.id).attempts[1]  # cancelled during setup: still billed
    assert second.node_price is not None and second.node_hours > 0


def _move_back(moved: Path, agent: Path) -> None:
    """Put the agent's directory back. The still-running agent may have written into a
    fresh `.launcher-agent` meanwhile: merge that into the moved one first."""
    import shutil

    for _ in range(20):
        if agent.exists():
            shutil.copytree(agent, moved, dirs_exist_ok=True)
            shutil.rmtree(agent, ignore_errors=True)
        try:
            moved.rename(agent)
            return
        except OSError:  # written to again between the two steps: merge once more
            continue
    raise AssertionError(f"could not put {agent} back")


def test_transient_query_failures_do_not_start_a_recovery(tmp_path: Path,
                                                          launcher_home: Path) -> None:
    job = api.jobs_launch(_task(tmp_path, count_to=30, step_s=0.1))
    cluster = _running_attempt(job.id, 1)
    machines = launcher_home / "local" / cluster / "machines.json"
    agent = launcher_home / "local" / cluster / "node-0" / ".launcher-agent"
    good = machines.read_text()
    # The rank must have started (read its run file) before its agent's program goes away.
    _wait(lambda: _checkpoint(launcher_home, job.id) >= 1, what="progress")
    # The cloud API "times out" (unparsable answer) and the head's agent is unreachable
    # (its program is gone) for ~1.5 s: neither is a preemption.
    moved = agent.with_name(".agent-away")
    machines.write_text("{not json")
    agent.rename(moved)
    time.sleep(1.5)
    _move_back(moved, agent)
    machines.write_text(good)
    final = api.jobs_wait(job.id, timeout=60)
    assert final.status == "SUCCEEDED"
    assert final.recoveries == 0 and final.attempts == 1
    assert _counts(_logs(job.id)) == list(range(1, 31))
    seen = "\n".join(api.controller_log_lines(job.id))
    assert "not a preemption" in seen  # the failures were hit, and judged transient
    _no_clusters_left(launcher_home)


def test_multi_node_replaces_only_the_lost_node(tmp_path: Path, launcher_home: Path) -> None:
    task = _task(tmp_path, count_to=20, step_s=0.1,
                 run="if [ $LAUNCHER_NODE_RANK = 0 ]; then python3 count_resumable.py; "
                     "else sleep 600; fi")
    text = Path(task).read_text().replace("name: counter", "name: gang\nnum_nodes: 3")
    Path(task).write_text(text)
    job = api.jobs_launch(task)
    cluster = _running_attempt(job.id, 1)
    survivor = launcher_home / "local" / cluster / "node-0" / "survivor-marker"
    survivor.write_text("x")
    _wait(lambda: _checkpoint(launcher_home, job.id) >= 3, what="progress")
    _preempt(cluster, rank=2)
    _wait(lambda: api.jobs_status(job.id).recoveries == 1 and _status(job.id) == "RUNNING",
          what="gang restarted")
    assert survivor.exists()  # node 0 was not re-provisioned
    detail = api.jobs_detail(job.id)
    assert len(detail.attempts) == 1 and detail.attempts[0].cluster == cluster
    assert any("replaced 1 node" in e.reason for e in detail.events)
    # the sleeping ranks never end by themselves: stop the job
    _wait(lambda: _checkpoint(launcher_home, job.id) >= 20, what="count finished")
    api.jobs_cancel(job.id)
    assert api.jobs_wait(job.id, timeout=30).status == "CANCELLED"
    _no_clusters_left(launcher_home)


@pytest.mark.parametrize(
    "point",
    ["attempt_recorded", "provisioned", "running_recorded", "preemption_recorded",
     "job_finished", "teardown_done"],
)
def test_kill9_controller_at_crash_point_then_restart(
        tmp_path: Path, launcher_home: Path, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    monkeypatch.setenv("LAUNCHER_CONTROLLER_CRASH_AT", point)
    job = api.jobs_launch(_task(tmp_path, count_to=15, step_s=0.1))
    monkeypatch.delenv("LAUNCHER_CONTROLLER_CRASH_AT")
    live = _LiveClusters(launcher_home, job.id)
    if point == "preemption_recorded":
        _preempt(_running_attempt(job.id, 1))
    _wait(lambda: not api.jobs_controller_status().running, what="controller died (exit 137)")
    assert _status(job.id) not in TERMINAL
    api.jobs_controller_start()
    final = api.jobs_wait(job.id, timeout=60)
    assert final.status == "SUCCEEDED", api.jobs_detail(job.id).events
    detail = api.jobs_detail(job.id)
    clusters = [a.cluster for a in detail.attempts]
    # Never two clusters of the job alive at once - except a preempted one (every node
    # lost: nothing runs there) still being torn down in the background meanwhile.
    assert live.stop() <= (2 if point == "preemption_recorded" else 1), live.seen
    assert len(clusters) == (2 if point == "preemption_recorded" else 1)
    assert _counts(_logs(job.id))[-1] == 15
    _no_clusters_left(launcher_home)


def test_kill9_controller_during_a_recoverys_setup_is_said_in_the_logs(
        tmp_path: Path, launcher_home: Path) -> None:
    """Issue 16 (4.3): kill -9 of the controller while the recovery's attempt 2 runs its
    setup; the restarted controller tears the half-built mj-1-2 down and builds it again.
    `jobs logs` shows attempt 2's first provisioning, then one line saying the
    controller restarted and rebuilt the half-built cluster, then the second one."""
    import os
    import signal

    marker = tmp_path / "attempt-2-setup-started"
    setup = (f'if [ -e "{marker}.armed" ]; then touch "{marker}"; sleep 30; fi; '
             "echo setup done")
    job = api.jobs_launch(_task(tmp_path, count_to=10, step_s=0.1, setup=setup))
    first = _running_attempt(job.id, 1)
    (tmp_path / "attempt-2-setup-started.armed").touch()  # attempt 2's setup hangs
    _preempt(first)
    _wait(marker.exists, what="attempt 2's setup running")
    pid = api.jobs_controller_status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _wait(lambda: not api.jobs_controller_status().running, what="controller dead")
    (tmp_path / "attempt-2-setup-started.armed").unlink()
    api.jobs_controller_start()
    final = api.jobs_wait(job.id, timeout=60)
    assert final.status == "SUCCEEDED", api.jobs_detail(job.id).events
    lines = _logs(job.id)
    start = lines.index(next(ln for ln in lines if ln.startswith("=== attempt 2 ")))
    second = lines[start:]
    provisioning = [i for i, ln in enumerate(second) if ln.startswith("(setup) Provisioning mj-1-2")]
    restarted = [i for i, ln in enumerate(second)
                 if "the controller restarted while mj-1-2 was being provisioned or set up" in ln]
    assert len(provisioning) == 2 and len(restarted) == 1, second
    assert provisioning[0] < restarted[0] < provisioning[1], second
    assert second[restarted[0]].startswith("(setup) === ")
    assert "torn down and built again" in second[restarted[0]]
    assert _counts(lines)[-1] == 10
    _no_clusters_left(launcher_home)


def test_queue_json_shape_and_controller_status(tmp_path: Path) -> None:
    job = api.jobs_launch(_task(tmp_path, count_to=3, step_s=0.05))
    api.jobs_wait(job.id, timeout=60)
    out = subprocess.run([*CLI, "jobs", "queue", "--json"],
                         capture_output=True, text=True, timeout=30, check=True)
    (row,) = json.loads(out.stdout)
    for key in ("id", "name", "status", "cluster", "cloud", "region", "recoveries",
                "restarts_on_errors", "submitted_at", "duration_s", "cost_so_far",
                "last_recovery_s"):
        assert key in row
    assert row["status"] == "SUCCEEDED" and row["cloud"] == "local"
    info = api.jobs_controller_status()
    assert info.running and info.pid
    second = threading.Thread(target=api.jobs_controller_start)  # a second start is a no-op
    second.start()
    second.join()
    assert api.jobs_controller_status().pid == info.pid
