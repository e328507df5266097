"""The cluster lifecycle on real sshd nodes in network namespaces (an `ssh` node pool).

Placement comes from the real optimizer over the pool's offers (`ssh_offers()`),
so these tests exercise launch -> failover loop -> SSHCloud.provision -> sync ->
parallel setup -> agent over SSH -> gang run -> exec -> down, end to end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.exec_job import exec_
from launcher.api.launch import launch
from launcher.optimizer.ranking import Blocked, Placement
from launcher.task.model import Task

pytestmark = pytest.mark.netns


@dataclass
class _Plan:
    placements: list[Placement]
    enabled: list[bool]


def _pool_plan(task: object, blocked: Blocked) -> _Plan:
    from launcher.clouds.ssh import ssh_offers
    from launcher.optimizer.ranking import rank

    placements = rank(task, ssh_offers(), blocked).placements  # type: ignore[arg-type]
    return _Plan(placements, [True] * len(placements))


@pytest.fixture
def pool(ssh_nodes: Callable[[int], object], launcher_home: Path) -> Iterator[object]:
    nodes = ssh_nodes(3)
    hosts = "\n".join(
        f'      - {{host: {n.host}, port: {n.port}, host_key: "{n.host_key}"}}'  # type: ignore[attr-defined]
        for n in nodes  # type: ignore[attr-defined]
    )
    (launcher_home / "config.yaml").write_text(
        "ssh_node_pools:\n  lab:\n    user: root\n"
        f"    identity_file: {nodes.client_key_path}\n    hosts:\n{hosts}\n"  # type: ignore[attr-defined]
    )
    yield nodes
    for row in api.status():
        api.down(row.name)
    nodes.close()  # type: ignore[attr-defined]


def _task(run: str, **extra: object) -> Task:
    return Task.from_dict({"name": "s", "num_nodes": 3, "resources": {"infra": "ssh/lab"}, "run": run, **extra})


def test_three_node_gang_over_ssh_sync_setup_ranks_ips(pool: object, tmp_path: Path) -> None:
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f.txt").write_text("synced")
    lines: list[str] = []
    setup_lines: list[str] = []
    task = _task(
        'echo "rank=$LAUNCHER_NODE_RANK host=$(hostname) ips=$(echo $LAUNCHER_NODE_IPS) f=$(cat f.txt)"',
        workdir=str(work), setup="echo setup on $(hostname)",
    )
    t0 = time.monotonic()
    result = launch(task, "sshc", plan_fn=_pool_plan, on_line=lines.append, on_setup_line=setup_lines.append)
    assert time.monotonic() - t0 < 30
    assert result.exit_code == 0 and result.cloud == "ssh" and result.region == "lab"
    ips = " ".join(n.host for n in pool)  # type: ignore[attr-defined]
    for rank, node in enumerate(pool):  # type: ignore[arg-type]
        assert f"(rank {rank}) rank={rank} host={node.hostname} ips={ips} f=synced" in lines
        assert f"(setup {rank}) setup on {node.hostname}" in setup_lines
    r = exec_("sshc", "echo hi from $(hostname)")
    assert r.exit_code == 0
    api.down("sshc")
    assert api.status() == []
    from launcher.clouds.ssh import SSHCloud

    assert SSHCloud().query("sshc") == {}


def test_node_lost_mid_job_fails_the_gang_quickly(pool: object) -> None:
    launch(_task("echo up; sleep 60"), "lost", plan_fn=_pool_plan, detach_run=True)
    deadline = time.monotonic() + 20
    while api.queue("lost")[-1].status.value != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    pool[2].kill()  # type: ignore[index]
    t0 = time.monotonic()
    record = api.logs("lost", follow=True)
    assert time.monotonic() - t0 < 20
    assert record.status.value == "FAILED" and record.failed_rank == 2


def _procs(pool: object, pattern: str) -> list[str]:
    """Command lines of the processes inside the pool's nodes matching regex `pattern`."""
    import re
    import subprocess

    out = []
    for node in pool:  # type: ignore[attr-defined]
        pids = subprocess.run(["ip", "netns", "pids", node.netns], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode().strip()
            except OSError:
                continue
            if re.search(pattern, cmd):
                out.append(cmd)
    return out


def test_autostop_without_down_is_refused_on_ssh(pool: object) -> None:
    from launcher.api.clusters import StopNotSupportedError

    with pytest.raises(StopNotSupportedError, match="--down"):
        launch(_task("true"), "nostop", plan_fn=_pool_plan, idle_minutes=5)
    assert api.status() == []  # refused before anything was provisioned
    launch(_task("true"), "nostop", plan_fn=_pool_plan)
    with pytest.raises(StopNotSupportedError, match="--down"):
        api.autostop("nostop", 5)


def test_autostop_down_on_ssh_takes_the_cluster_down(pool: object) -> None:
    from launcher.clouds.ssh import SSHCloud
    from launcher.state.db import StateDB

    launch(_task("sleep 1000$LAUNCHER_NODE_RANK & echo bg"), "idle", plan_fn=_pool_plan)
    api.autostop("idle", 0.01, down=True)  # 0.6 s idle
    notes: list[str] = []
    deadline = time.monotonic() + 30
    while [r.name for r in api.status(notes=notes)] == ["idle"]:
        assert time.monotonic() < deadline, "autostop --down never happened"
        time.sleep(0.2)  # the agent acts on the node; nothing here to wait on
    assert any("autodowned" in n for n in notes), notes
    assert SSHCloud().query("idle") == {}  # the pool hosts were released
    with StateDB() as db:
        assert any(e.kind == "deleted" and "autodowned" in e.message for e in db.events("idle"))
    assert not _procs(pool, "sleep 1000[0-2]$")
    assert not _procs(pool, "launcher-agent.*daemon")


def test_network_cut_worker_is_cleaned_up_and_status_shows_degraded(
        pool: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_SSH_LOST_CONFIRM_S", "0.5")
    launch(_task("echo up; sleep 3000$LAUNCHER_NODE_RANK"), "cut", plan_fn=_pool_plan,
           detach_run=True)
    deadline = time.monotonic() + 20
    while not _procs(pool, "sleep 30002$"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    pool[2].cut_network()  # type: ignore[index]
    try:
        record = api.logs("cut", follow=True)
        assert record.status.value == "FAILED" and record.failed_rank == 2
        notes: list[str] = []
        rows = api.status(refresh=True, notes=notes)
        assert [r.status for r in rows] == ["DEGRADED"], notes
        assert any("DEGRADED" in n for n in notes)
        assert _procs(pool, "sleep 30002$")  # out of reach: still running on the cut node
    finally:
        pool[2].restore_network()  # type: ignore[index]
    assert [r.status for r in api.status(refresh=True)] == ["UP"]
    # The next job kills what the cut left behind before it starts, and its own
    # background processes die with it when it ends (on every node).
    lines: list[str] = []
    r = exec_("cut", _task("sleep 4000$LAUNCHER_NODE_RANK & echo started"), on_line=lines.append)
    assert r.exit_code == 0 and len([x for x in lines if x.endswith("started")]) == 3
    assert not _procs(pool, "sleep 3000[0-2]$")
    assert not _procs(pool, "sleep 4000[0-2]$")


def test_pool_gpus_accept_the_task_yaml_form(launcher_home: Path) -> None:
    from launcher.config.settings import load_config
    from launcher.errors import ConfigError

    cfg = launcher_home / "config.yaml"
    cfg.write_text("ssh_node_pools:\n  lab:\n    user: root\n    gpus: H100:8\n    hosts: [h1]\n")
    assert load_config().ssh_node_pools["lab"].gpus == {"H100": 8}
    cfg.write_text("ssh_node_pools:\n  lab:\n    user: root\n    gpus: H100:x\n    hosts: [h1]\n")
    with pytest.raises(ConfigError, match="H100:8"):
        load_config()
