"""The local cloud on its own: provision, query, stop/start, preempt, terminate, GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.clouds.base import (
    CapacityError,
    InvalidRequestError,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.local import LocalCloud, notice_path
from launcher.errors import ClusterNotFoundError


def _req(name: str, nodes: int = 2, gpus: float = 0) -> ProvisionRequest:
    return ProvisionRequest(
        cluster_name=name,
        cloud="local",
        region="local",
        zone=None,
        instance_type="local",
        num_nodes=nodes,
        use_spot=True,
        accelerator="T4" if gpus else None,
        accelerator_count=gpus,
    )


def _start_on_node(node_dir: str, script: str = "import time; time.sleep(60)") -> subprocess.Popen[bytes]:
    """A process that belongs to the node the way runner-started processes do (HOME).
    Returns once it runs: before its exec, /proc shows the parent's environment, so the
    cloud would not see it as the node's yet (it says so on stdout, an event to wait on)."""
    env = {**os.environ, "HOME": node_dir}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdout.write('up\\n'); sys.stdout.flush(); "
         + script], env=env, start_new_session=True, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    proc.stdout.close()
    return proc


def test_provision_query_terminate(launcher_home: Path) -> None:
    cloud = LocalCloud()
    assert cloud.check().enabled
    info = cloud.provision(_req("c", 3))
    assert [n.rank for n in info.nodes] == [0, 1, 2]
    assert {n.internal_ip for n in info.nodes} == {"127.0.0.1"}
    assert all(n.ssh_user is None and Path(n.local_root or "").is_dir() for n in info.nodes)
    assert info.nodes[1].local_root == str(launcher_home / "local" / "c" / "node-1")
    assert cloud.query("c") == {"c-0": NodeState.RUNNING, "c-1": NodeState.RUNNING, "c-2": NodeState.RUNNING}
    procs = [_start_on_node(n.local_root or "") for n in info.nodes]
    # a process whose cwd is inside a node belongs to it too
    deep = Path(info.nodes[0].local_root or "") / "work"
    deep.mkdir()
    procs.append(
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=deep)
    )
    cloud.terminate("c")
    for p in procs:
        assert p.wait(timeout=5) == -9
    assert not (launcher_home / "local" / "c").exists()
    assert cloud.query("c") == {}
    cloud.terminate("c")  # idempotent


def test_stop_start_keeps_files_and_kills_processes() -> None:
    cloud = LocalCloud()
    info = cloud.provision(_req("s", 2))
    marker = Path(info.nodes[1].local_root or "") / "data.txt"
    marker.write_text("kept")
    proc = _start_on_node(info.nodes[1].local_root or "")
    cloud.stop("s")
    assert proc.wait(timeout=5) == -9
    assert set(cloud.query("s").values()) == {NodeState.STOPPED}
    cloud.stop("s")  # idempotent
    again = cloud.start("s")
    assert again.nodes == info.nodes
    assert marker.read_text() == "kept"
    assert set(cloud.query("s").values()) == {NodeState.RUNNING}
    with pytest.raises(ClusterNotFoundError):
        cloud.stop("missing")


def test_preempt_one_node_without_notice() -> None:
    cloud = LocalCloud()
    info = cloud.provision(_req("p", 3))
    procs = [_start_on_node(n.local_root or "") for n in info.nodes]
    assert cloud.preempt("p", rank=1) == [1]
    assert procs[1].wait(timeout=5) == -9
    assert procs[0].poll() is None and procs[2].poll() is None
    assert cloud.query("p") == {"p-0": NodeState.RUNNING, "p-1": NodeState.PREEMPTED, "p-2": NodeState.RUNNING}
    with pytest.raises(InvalidRequestError, match="preempted"):
        cloud.start("p")
    with pytest.raises(InvalidRequestError, match="no node 7"):
        cloud.preempt("p", rank=7)
    # the lost node is marked, so the agent starts no rank there (tests/runtime/test_agent.py)
    from launcher.runtime.local_runner import PREEMPTED_MARKER

    marked = [(Path(n.local_root or "") / PREEMPTED_MARKER).exists() for n in info.nodes]
    assert marked == [False, True, False]
    # relaunching replaces the lost node with a fresh, empty one
    (Path(info.nodes[1].local_root or "") / "old").write_text("x")
    info2 = cloud.provision(_req("p", 3))
    assert set(cloud.query("p").values()) == {NodeState.RUNNING}
    assert not (Path(info2.nodes[1].local_root or "") / "old").exists()
    assert not (Path(info2.nodes[1].local_root or "") / PREEMPTED_MARKER).exists()
    cloud.terminate("p")
    for p in procs:
        p.wait(timeout=5)


_TRAPPER = """
import signal, sys, time, pathlib
def bye(*_):
    pathlib.Path("sigterm.txt").write_text("got SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(60)
"""


def test_preempt_with_notice_writes_notice_and_waits_for_job_exit() -> None:
    """The notice file appears; preempt returns as soon as the node's job exits (no full wait)."""
    cloud = LocalCloud()
    info = cloud.provision(_req("n", 2))
    node1 = info.nodes[1].local_root or ""
    job = subprocess.Popen(
        [sys.executable, "-c", _TRAPPER],
        env={**os.environ, "HOME": node1},
        cwd=node1,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert job.stdout is not None and job.stdout.readline().strip() == b"ready"
    head = Path(info.nodes[0].local_root or "")
    notice = notice_path(head, 1)

    # stand-in for the agent: relay the notice to the job as SIGTERM
    import threading

    def relay() -> None:
        while not notice.exists():
            time.sleep(0.01)
        job.terminate()

    threading.Thread(target=relay, daemon=True).start()
    t0 = time.monotonic()
    cloud.preempt("n", rank=1, notice_seconds=20)
    elapsed = time.monotonic() - t0
    assert elapsed < 5, elapsed
    doc = json.loads(notice.read_text())
    assert doc["rank"] == 1 and doc["grace_seconds"] == 20
    assert job.wait(timeout=5) == 0
    assert (Path(node1) / "sigterm.txt").read_text() == "got SIGTERM"
    assert cloud.query("n")["n-1"] is NodeState.PREEMPTED


def test_preempt_notice_expires_then_kills() -> None:
    cloud = LocalCloud()
    info = cloud.provision(_req("e", 1))
    proc = _start_on_node(info.nodes[0].local_root or "")
    t0 = time.monotonic()
    cloud.preempt("e", notice_seconds=0.5)
    assert 0.45 <= time.monotonic() - t0 < 5
    assert proc.wait(timeout=5) == -9
    assert cloud.query("e") == {"e-0": NodeState.PREEMPTED}


def test_gpus_are_split_between_nodes_and_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_LOCAL_GPUS", "T4:5")
    cloud = LocalCloud()
    cloud.provision(_req("g1", 2, gpus=2))
    assert cloud.gpu_ids("g1") == {0: [0, 1], 1: [2, 3]}
    with pytest.raises(CapacityError, match="1 free GPU"):
        cloud.provision(_req("g2", 1, gpus=2))
    assert cloud.query("g2") == {}  # all-or-nothing: nothing left behind
    cloud.provision(_req("g3", 1, gpus=1))
    assert cloud.gpu_ids("g3") == {0: [4]}
    cloud.stop("g1")  # stopped machines release their GPUs
    cloud.provision(_req("g4", 1, gpus=2))
    assert cloud.gpu_ids("g4") == {0: [0, 1]}
    with pytest.raises(InvalidRequestError, match="whole GPUs"):
        cloud.provision(_req("g5", 1, gpus=0.5))


def test_bad_sizes_are_invalid_requests() -> None:
    cloud = LocalCloud()
    with pytest.raises(InvalidRequestError):
        cloud.provision(_req("big", 1000))
    cloud.provision(_req("two", 2))
    with pytest.raises(InvalidRequestError, match="already has 2 nodes"):
        cloud.provision(_req("two", 3))
