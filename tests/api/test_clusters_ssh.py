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
from launcher.optimizer import Blocked, Placement
from launcher.task import Task

pytestmark = pytest.mark.netns


@dataclass
class _Plan:
    placements: list[Placement]
    enabled: list[bool]


def _pool_plan(task: object, blocked: Blocked) -> _Plan:
    from launcher.clouds.ssh import ssh_offers
    from launcher.optimizer import rank

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
