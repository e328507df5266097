"""`launcher launch` as a user runs it (a real CLI subprocess), on the local cloud and on
sshd nodes in network namespaces (each with its own /root), for what setup does on the
nodes:

- SkyPilot's task files run the same: ~/.bashrc written by setup reaches run
  (tests/task_files/env_check.yaml), a worker's failed setup fails the launch at once
  and stops the others (failed_worker_setup.yaml);
- Ctrl-C (SIGINT to the launch process) during setup stops it on every node, and a
  relaunch then runs setup once;
- a launch whose client was killed leaves its setup running: a relaunch refuses, naming
  it, until it has ended (or was killed: a stale lock).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tests" / "task_files"
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; main(sys.argv[1:])"]


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (init may reap those late)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class _Launch:
    """A `launcher launch` subprocess whose output is read line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([*CLI, "launch", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, cwd=REPO)
        self.lines: list[str] = []

    def read_until(self, cond: Callable[[list[str]], bool], timeout: float = 90) -> None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while not cond(self.lines):
            assert time.monotonic() < deadline, self.lines
            line = self.proc.stdout.readline()
            assert line, f"launch ended early: {self.lines}"
            self.lines.append(line.rstrip("\n"))

    def finish(self, timeout: float = 60) -> int:
        out, _ = self.proc.communicate(timeout=timeout)
        self.lines += out.splitlines()
        return self.proc.returncode


def _slow_setup_task(tmp_path: Path, nodes: int, infra: str) -> Path:
    path = tmp_path / "slow-setup.yaml"
    path.write_text(
        f"num_nodes: {nodes}\nresources:\n  infra: {infra}\n"
        "setup: |\n"
        "  echo \"setup $SKYPILOT_SETUP_NODE_RANK starts\" >> ~/setup-runs\n"
        "  sleep 300 &\n  echo $! > ~/sleeper.pid\n"
        "  echo \"started $SKYPILOT_SETUP_NODE_RANK\"\n"
        "  wait\n  touch ~/setup-finished\n"
        "run: echo ran on $SKYPILOT_NODE_RANK\n")
    return path


def _started(nodes: int) -> Callable[[list[str]], bool]:
    return lambda lines: all(any(f"started {r}" in ln for ln in lines) for r in range(nodes))


def _sleepers(homes: list[Path]) -> list[int]:
    return [int((h / "sleeper.pid").read_text()) for h in homes]


def _interrupt_stops_setup_everywhere(task: Path, name: str, homes: list[Path]) -> None:
    launch = _Launch(str(task), "-c", name, "-y")
    launch.read_until(_started(len(homes)))
    sleepers = _sleepers(homes)
    assert all(_alive(p) for p in sleepers)
    launch.proc.send_signal(signal.SIGINT)
    rc = launch.finish()
    out = "\n".join(launch.lines)
    assert rc in (130, -signal.SIGINT), out
    assert f"Interrupted: setup stopped on all {len(homes)} node(s)" in out
    assert f"cluster {name} is UP" in out
    wait_until(lambda: not any(_alive(p) for p in sleepers), timeout=10,
               what="every node's setup stopped")
    assert not any((h / "setup-finished").exists() for h in homes)
    # a relaunch runs setup once on each node, alone
    for h in homes:
        (h / "setup-runs").unlink()
    again = _Launch(str(task), "-c", name, "-y", "--detach-run")
    again.read_until(_started(len(homes)))
    for p in _sleepers(homes):
        os.kill(p, signal.SIGKILL)  # lets this setup end now
    assert again.finish() == 0, again.lines
    assert all((h / "setup-runs").read_text().count("starts") == 1 for h in homes)


def _killed_client_leaves_setup_and_relaunch_refuses(task: Path, name: str,
                                                      homes: list[Path]) -> None:
    launch = _Launch(str(task), "-c", name, "-y")
    launch.read_until(_started(len(homes)))
    launch.proc.kill()  # the client dies without a word (kill -9, laptop lid, lost network)
    launch.finish()
    sleepers = _sleepers(homes)
    assert all(_alive(p) for p in sleepers)  # nobody stopped the setup
    p = _cli("launch", str(task), "-c", name, "-y")
    assert p.returncode == 5, p.stdout + p.stderr
    err = p.stderr
    assert "Setup of an earlier launch is still running on node" in err
    assert "process group" in err and "kill -- -" in err, err
    assert all(_alive(s) for s in sleepers)  # refused: the running setup was left alone
    assert all((h / "setup-runs").read_text().count("starts") == 1 for h in homes)
    # it ends (killed here): its lock is stale, the relaunch goes ahead
    owner_pgids = {int((h / ".launcher-setup" / "owner").read_text().split()[0]) for h in homes}
    for g in owner_pgids:
        os.killpg(g, signal.SIGKILL)
    again = _Launch(str(task), "-c", name, "-y", "--detach-run")
    again.read_until(_started(len(homes)))
    for s in _sleepers(homes):
        os.kill(s, signal.SIGKILL)
    assert again.finish() == 0, again.lines


# ------------------------------------------------------------------ local cloud


@pytest.fixture
def local_homes(launcher_home: Path) -> Callable[[str, int], list[Path]]:
    return lambda name, n: [launcher_home / "local" / name / f"node-{r}" for r in range(n)]


def test_env_check_bashrc_from_setup_reaches_run_on_local(local_homes: object) -> None:
    p = _cli("launch", str(TASKS / "env_check.yaml"), "--infra", "local", "-c", "envc", "-y")
    assert p.returncode == 0, p.stdout + p.stderr
    for rank in (0, 1):
        assert f"(setup {rank}) here on setup rank {rank}" in p.stdout
        assert f"(rank {rank}) TEST_VAR is set to test" in p.stdout
        assert f"(rank {rank}) unbuffered=1" in p.stdout


def test_failed_worker_setup_fails_at_once_on_local(local_homes: Callable[[str, int], list[Path]]
                                                    ) -> None:
    t0 = time.monotonic()
    p = _cli("launch", str(TASKS / "failed_worker_setup.yaml"), "--infra", "local", "-c", "fws",
             "-y")
    assert time.monotonic() - t0 < 60  # before: it hung for as long as the others slept
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "Setup failed on node 1 of cluster 'fws' (exit code 1)" in p.stderr
    assert "worker 1: setup fails here" in p.stderr  # that node's log tail
    assert "Should not get here" not in out
    homes = local_homes("fws", 3)
    sleepers = [int((homes[r] / "sleeper.pid").read_text()) for r in (0, 2)
                if (homes[r] / "sleeper.pid").exists()]
    wait_until(lambda: not any(_alive(s) for s in sleepers), timeout=10,
               what="the other nodes' setup stopped")


def test_ctrl_c_during_setup_stops_it_on_every_local_node(
        tmp_path: Path, local_homes: Callable[[str, int], list[Path]]) -> None:
    _interrupt_stops_setup_everywhere(_slow_setup_task(tmp_path, 2, "local"), "cc",
                                      local_homes("cc", 2))


def test_relaunch_refuses_while_a_killed_launch_setup_runs_on_local(
        tmp_path: Path, local_homes: Callable[[str, int], list[Path]]) -> None:
    _killed_client_leaves_setup_and_relaunch_refuses(_slow_setup_task(tmp_path, 2, "local"), "kc",
                                                     local_homes("kc", 2))


# ------------------------------------------------------------------ sshd nodes


@pytest.fixture
def pool(ssh_nodes: Callable[[int], object], launcher_home: Path) -> Iterator[object]:
    nodes = ssh_nodes(2)
    hosts = "\n".join(
        f'      - {{host: {n.host}, port: {n.port}, host_key: "{n.host_key}"}}'  # type: ignore[attr-defined]
        for n in nodes  # type: ignore[attr-defined]
    )
    (launcher_home / "config.yaml").write_text(
        "ssh_node_pools:\n  lab:\n    user: root\n"
        f"    identity_file: {nodes.client_key_path}\n    hosts:\n{hosts}\n"  # type: ignore[attr-defined]
    )
    yield nodes
    from launcher.api import clusters as api

    for row in api.status():
        api.down(row.name)
    nodes.close()  # type: ignore[attr-defined]


def _homes(pool: object) -> list[Path]:
    return [n.home for n in pool]  # type: ignore[attr-defined]


@pytest.mark.netns
def test_env_check_bashrc_from_setup_reaches_run_on_ssh_nodes(pool: object) -> None:
    p = _cli("launch", str(TASKS / "env_check.yaml"), "--infra", "ssh/lab", "-c", "envs", "-y")
    assert p.returncode == 0, p.stdout + p.stderr
    for rank in (0, 1):
        assert f"(rank {rank}) TEST_VAR is set to test" in p.stdout
    for home in _homes(pool):  # each node wrote its own ~/.bashrc
        assert (home / ".bashrc").read_text().count("export TEST_VAR=test") == 1


@pytest.mark.netns
def test_ctrl_c_during_setup_stops_it_on_every_ssh_node(pool: object, tmp_path: Path) -> None:
    _interrupt_stops_setup_everywhere(_slow_setup_task(tmp_path, 2, "ssh/lab"), "ccs",
                                      _homes(pool))


@pytest.mark.netns
def test_relaunch_refuses_while_a_killed_launch_setup_runs_on_ssh_nodes(
        pool: object, tmp_path: Path) -> None:
    _killed_client_leaves_setup_and_relaunch_refuses(_slow_setup_task(tmp_path, 2, "ssh/lab"),
                                                     "kcs", _homes(pool))
