"""A cluster left INIT by a launch killed after provisioning (issue 16, 4.4), on the
local cloud: `status` says its launching process is gone and what to do; a relaunch
with `-c NAME` reuses its nodes when they all answer, and provisions again otherwise.

The launch runs as its own process (`launcher launch`), SIGKILLed when it prints
`Syncing ...`: its nodes are provisioned and recorded, its agent not yet running (the
agent install runs beside the sync), so the cluster is INIT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.launch import launch
from launcher.clouds.local import LocalCloud
from launcher.state.db import ClusterStatus, PlacementRecord, StateDB
from launcher.task.model import Task

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]


@pytest.fixture(autouse=True)
def _cleanup(launcher_home: Path) -> Iterator[None]:
    yield
    root = launcher_home / "local"
    if root.exists():
        for cdir in root.iterdir():
            LocalCloud().terminate(cdir.name)


def _task_file(tmp_path: Path) -> Path:
    work = tmp_path / "wd"
    work.mkdir(exist_ok=True)
    (work / "f.txt").write_text("synced")
    path = tmp_path / "task.yaml"
    path.write_text(f"name: t\nnum_nodes: 2\nworkdir: {work}\nresources:\n  infra: local\n"
                    "setup: echo setup on $LAUNCHER_NODE_RANK\n"
                    'run: echo "rank $LAUNCHER_NODE_RANK $(cat f.txt)"\n')
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})


def _launch_killed_after_provisioning(task: Path, name: str) -> int:
    """`launcher launch TASK -c NAME`, SIGKILLed at its `Syncing` line. Its pid."""
    proc = subprocess.Popen([*CLI, "launch", str(task), "-c", name, "-y"], cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("Syncing"):
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(60)
    assert proc.returncode == -signal.SIGKILL, seen
    with StateDB() as db:
        rec = db.require_cluster(name)
        assert rec.status is ClusterStatus.INIT, "the agent came up before the kill"
        assert len(db.get_nodes(name)) == 2  # provisioned and recorded
    return proc.pid


def test_status_says_the_launch_of_an_init_cluster_is_gone(
        tmp_path: Path, launcher_home: Path) -> None:
    pid = _launch_killed_after_provisioning(_task_file(tmp_path), "half")
    notes: list[str] = []
    (view,) = api.status(notes=notes)
    assert view.status == "INIT"
    assert view.status_reason is not None and f"pid {pid} on " in view.status_reason
    assert view.to_json()["status_reason"] == view.status_reason
    (line,) = [n for n in notes if n.startswith("half: ")]
    assert "is gone" in line and "`launcher launch -c half TASK`" in line
    assert "`launcher down half`" in line
    out = _cli("status")
    assert out.returncode == 0 and f"half: INIT, but the launch that was bringing it up (pid {pid}" \
        in out.stdout + out.stderr, out


def test_a_live_launch_is_not_called_gone() -> None:
    with StateDB() as db:  # recorded by this very (live) process
        db.create_cluster("busy", PlacementRecord("local", "local", None, "local-cpu", 1, False))
    notes: list[str] = []
    (view,) = api.status(notes=notes)
    assert view.status == "INIT" and view.status_reason is None and notes == []


def test_a_managed_jobs_init_cluster_points_at_the_controller() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    with StateDB() as db:
        db.create_cluster("mj-3-2", PlacementRecord("local", "local", None, "local-cpu", 1, False),
                          owner="managed-job:3")
        with db.transaction() as conn:
            conn.execute("UPDATE clusters SET launch_pid=? WHERE name='mj-3-2'", (dead.pid,))
    notes: list[str] = []
    api.status(notes=notes)
    (line,) = notes
    assert "managed-jobs controller that was bringing it up" in line
    assert "`launcher jobs controller start` resumes managed job 3" in line


def test_relaunch_reuses_a_healthy_init_gang(tmp_path: Path, launcher_home: Path) -> None:
    task = _task_file(tmp_path)
    _launch_killed_after_provisioning(task, "half")
    with StateDB() as db:
        before = [n.node_id for n in db.get_nodes("half")]
    marker = launcher_home / "local" / "half" / "node-1" / "survivor-marker"
    marker.write_text("x")
    events: list[str] = []
    out: list[str] = []
    result = launch(Task.from_yaml(str(task)), "half", on_event=events.append,
                    on_line=out.append)
    assert result.exit_code == 0 and result.reused and not result.created, events
    assert any(e.startswith("Resuming cluster half") and "2 node(s) answer" in e
               for e in events), events
    assert not any(e.startswith("Provisioning") for e in events), events
    assert marker.exists()  # the same nodes, not fresh ones
    with StateDB() as db:
        rec = db.require_cluster("half")
        assert rec.status is ClusterStatus.UP and rec.launch_pid == os.getpid()
        assert [n.node_id for n in db.get_nodes("half")] == before
        assert any(e.kind == "resumed" for e in db.events("half"))
    assert sorted(ln for ln in out if "rank" in ln) == [
        "(rank 0) rank 0 synced", "(rank 1) rank 1 synced"]
    api.down("half")


def test_relaunch_provisions_again_when_an_init_gang_lost_a_node(
        tmp_path: Path, launcher_home: Path) -> None:
    task = _task_file(tmp_path)
    _launch_killed_after_provisioning(task, "half")
    LocalCloud().preempt("half", 1)
    events: list[str] = []
    result = launch(Task.from_yaml(str(task)), "half", on_event=events.append)
    assert result.exit_code == 0 and result.created and not result.reused, events
    (why,) = [e for e in events if e.startswith("Cluster half was left INIT")]
    assert "cannot be reused (node(s) half-1 PREEMPTED)" in why
    assert any(e.startswith("Provisioning half") for e in events), events
    api.down("half")
