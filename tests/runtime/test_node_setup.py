"""One setup per node at a time, on real local-cloud nodes: a second setup is refused
naming the first, a dead first one (stale) is replaced, an abort stops the whole
process group and also a setup that has not started yet."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.clouds.base import ClusterInfo, ProvisionRequest
from launcher.clouds.local import LocalCloud
from launcher.runtime import execution
from launcher.runtime.execution import check_no_setup_running, node_env, open_runners, run_setup
from launcher.runtime.node_setup import (
    BUSY_EXIT,
    CANCELLED_EXIT,
    SETUP_DIR,
    SetupBusyError,
    abort_command,
    setup_command,
)
from tests.waiting import wait_until


@pytest.fixture
def cluster(launcher_home: Path) -> Iterator[ClusterInfo]:
    info = LocalCloud().provision(ProvisionRequest("ns", "local", "local", None, "local", 2, False))
    yield info
    LocalCloud().terminate("ns")


def _home(cluster: ClusterInfo, rank: int) -> Path:
    return Path(cluster.nodes[rank].local_root or "")


def _group_alive(pgid: int) -> bool:
    """A process of group `pgid` that is not a zombie (init may reap those late)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


class _Background:
    """A setup started on node 0 as a killed client would leave it: running, nobody
    waiting for it in this process's main thread."""

    def __init__(self, cluster: ClusterInfo, script: str, token: str = "aa11bb22cc33dd44") -> None:
        self.token = token
        self.runner = open_runners(cluster)[0]
        self.runner.put_text(script + "\n", f"~/{SETUP_DIR}/{token}.sh", mode=0o600)
        self.result: list[int] = []
        self.output: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        owner = _home(cluster, 0) / SETUP_DIR / "owner"
        wait_until(lambda: owner.exists() and (_home(cluster, 0) / "started").exists(),
                   what="the first setup running")
        self.pgid = int(owner.read_text().split()[0])

    def _run(self) -> None:
        res = self.runner.run(setup_command(self.token, [], None), stdin="",
                              on_output=self.output.append)
        self.result.append(res.returncode)


def test_a_second_setup_is_refused_naming_the_running_one(cluster: ClusterInfo) -> None:
    first = _Background(cluster, "touch ~/started; sleep 60")
    runners = open_runners(cluster)
    with pytest.raises(SetupBusyError) as err:
        check_no_setup_running(cluster, runners)
    assert err.value.rank == 0 and err.value.running.pgid == str(first.pgid)
    t0 = time.monotonic()
    with pytest.raises(SetupBusyError) as err2:
        run_setup(cluster, runners, "touch ~/second-ran", envs=[{}, {}],
                  log_dir=execution.setup_log_dir("ns"))
    assert time.monotonic() - t0 < 10
    msg = str(err2.value)
    assert f"process group {first.pgid}" in msg and "node 0 of cluster 'ns'" in msg
    assert f"kill -- -{first.pgid}" in msg and "launcher down ns" in msg
    assert not (_home(cluster, 0) / "second-ran").exists()
    assert first.thread.is_alive() and _group_alive(first.pgid)  # the first one untouched
    first.runner.run(abort_command(first.token))
    first.thread.join(10)
    assert first.result and first.result[0] != 0 and not _group_alive(first.pgid)
    # the lock is free again: a new setup runs on both nodes
    run_setup(cluster, runners, "touch ~/third-ran", envs=[{}, {}],
              log_dir=execution.setup_log_dir("ns"))
    assert all((_home(cluster, r) / "third-ran").exists() for r in (0, 1))


def test_a_dead_setup_is_a_stale_lock_and_is_replaced(cluster: ClusterInfo) -> None:
    first = _Background(cluster, "touch ~/started; sleep 60")
    os.killpg(first.pgid, signal.SIGKILL)  # its node crashed / was killed: owner file stays
    first.thread.join(10)
    assert (_home(cluster, 0) / SETUP_DIR / "owner").exists()
    runners = open_runners(cluster)
    check_no_setup_running(cluster, runners)  # stale: nothing to report
    run_setup(cluster, runners, "touch ~/second-ran", envs=[{}, {}],
              log_dir=execution.setup_log_dir("ns"))
    assert (_home(cluster, 0) / "second-ran").exists()


def test_a_leader_killed_alone_still_holds_the_node_while_its_children_run(
        cluster: ClusterInfo) -> None:
    first = _Background(cluster, "touch ~/started; sleep 60")
    os.kill(first.pgid, signal.SIGKILL)  # only the leader: the flock goes, the setup lives on
    first.thread.join(10)
    assert _group_alive(first.pgid)
    with pytest.raises(SetupBusyError):
        run_setup(cluster, open_runners(cluster), "touch ~/second-ran", envs=[{}, {}],
                  log_dir=execution.setup_log_dir("ns"))
    assert not (_home(cluster, 0) / "second-ran").exists()
    os.killpg(first.pgid, signal.SIGKILL)


def test_an_abort_before_the_setup_started_keeps_it_from_running(cluster: ClusterInfo) -> None:
    runner = open_runners(cluster)[0]
    token = "0123456789abcdef"
    runner.run(f"mkdir -p ~/{SETUP_DIR}")
    runner.run(abort_command(token))  # Ctrl-C came before the command reached the node
    runner.put_text("touch ~/ran\n", f"~/{SETUP_DIR}/{token}.sh")
    res = runner.run(setup_command(token, [], None), stdin="")
    assert res.returncode == CANCELLED_EXIT and res.stdout == ""
    assert not (_home(cluster, 0) / "ran").exists()
    assert list((_home(cluster, 0) / SETUP_DIR).glob(f"{token}.*")) == []


def test_abort_stops_the_whole_group_term_first(cluster: ClusterInfo) -> None:
    first = _Background(cluster, "trap 'echo got-term; exit 3' TERM; touch ~/started; "
                                 "sleep 60 & sleep 60 & wait")
    t0 = time.monotonic()
    first.runner.run(abort_command(first.token))
    first.thread.join(10)
    assert time.monotonic() - t0 < 5
    assert not _group_alive(first.pgid)
    assert "got-term" in first.output  # SIGTERM first: the script could clean up
    assert first.result == [3]
    setup_dir = _home(cluster, 0) / SETUP_DIR
    assert not (setup_dir / "owner").exists()  # the leader cleaned up after its script


def test_busy_exit_code_is_distinct(cluster: ClusterInfo) -> None:
    first = _Background(cluster, "touch ~/started; sleep 60")
    runner = open_runners(cluster)[0]
    token = "fedcba9876543210"
    runner.put_text("touch ~/ran\n", f"~/{SETUP_DIR}/{token}.sh")
    res = runner.run(setup_command(token, [], None), stdin="")
    assert res.returncode == BUSY_EXIT
    assert res.stdout.startswith(f"LAUNCHER_SETUP_BUSY {first.pgid} ")
    first.runner.run(abort_command(first.token))


def test_setup_env_has_the_skypilot_setup_variables(cluster: ClusterInfo) -> None:
    env = node_env(cluster, 1, gpus_per_node=0.5, task_id="mj-3-abc")
    for prefix in ("LAUNCHER_", "SKYPILOT_"):
        assert env[prefix + "SETUP_NODE_RANK"] == env[prefix + "NODE_RANK"] == "1"
        assert env[prefix + "SETUP_NODE_IPS"] == "127.0.0.1\n127.0.0.1"
        assert env[prefix + "NUM_NODES"] == "2"
        assert env[prefix + "TASK_ID"] == "mj-3-abc"
        assert json.loads(env[prefix + "CLUSTER_INFO"])["cluster_name"] == "ns"
    # a fraction of a GPU: kept as given for LAUNCHER_*, rounded up as SkyPilot does
    assert env["LAUNCHER_SETUP_NUM_GPUS_PER_NODE"] == env["LAUNCHER_NUM_GPUS_PER_NODE"] == "0.5"
    assert env["SKYPILOT_SETUP_NUM_GPUS_PER_NODE"] == env["SKYPILOT_NUM_GPUS_PER_NODE"] == "1"
    assert "SKYPILOT_TASK_ID" not in node_env(cluster, 0)  # a plain launch: only at submit
