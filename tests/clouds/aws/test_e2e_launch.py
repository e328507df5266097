"""AWS end to end, minus the VM: the real launch path against moto, with sshd bodies.

`launch` plans on the bundled catalog, provisions through EC2 (moto's server, reached
through AWS_ENDPOINT_URL only), connects to the instances' private IPs (the config's
`use_internal_ips`) where tests/cloud_bodies.py started an sshd node with the imported
key pair as root's authorized key, syncs the workdir, runs setup and the 2-node gang;
then exec, queue, logs, and down, after which moto has no pending/running instance
and the bodies are gone. Nothing is reached but loopback and the lab's bridge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.exec_job import exec_
from launcher.api.launch import launch
from launcher.task import Task
from tests import netns
from tests.aws_moto import AWSFake

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        netns.unavailable_reason() is not None,
        reason=f"sshd nodes unavailable: {netns.unavailable_reason()}",
    ),
]

RESOURCES = {"cloud": "aws", "region": "us-east-1", "instance_type": "m6i.large"}
REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc
    return proc


def test_two_node_launch_exec_queue_logs_down_on_aws(aws_cloud: AWSFake, tmp_path: Path) -> None:
    assert aws_cloud.bodies is not None
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f.txt").write_text("synced")
    task = Task.from_dict(
        {
            "name": "e2e",
            "num_nodes": 2,
            "workdir": str(work),
            "resources": RESOURCES,
            "setup": "echo setup on $(hostname) > ~/setup.txt; echo setup on $(hostname)",
            "run": 'echo "rank=$LAUNCHER_NODE_RANK host=$(hostname) f=$(cat f.txt)"',
        }
    )
    lines: list[str] = []
    setup_lines: list[str] = []
    events: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(
            task, "awse2e", on_line=lines.append, on_setup_line=setup_lines.append,
            on_event=lambda e: events.append(f"{time.monotonic() - t0:.2f} {e}"),
        )
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, (lines, events)
        assert result.cloud == "aws" and result.region == "us-east-1"

        # two instances in one AZ of the test VPC, each with a body at its private IP
        live = sorted(aws_cloud.instances(), key=lambda i: i.private_ip)
        # moto's Instance: `placement` is an InstancePlacement object (its str() is a repr
        # unique per instance); `availability_zone` is the zone name
        zones = {i.availability_zone for i in live}
        assert len(live) == 2 and len(zones) == 1 and None not in zones, zones
        nodes = aws_cloud.bodies.wait_for([i.id for i in live])
        hostnames = {nodes[i.id].hostname for i in live}
        for rank in (0, 1):
            got = [ln for ln in lines if ln.startswith(f"(rank {rank}) rank={rank} host=")]
            assert len(got) == 1, lines
            host = got[0].split("host=")[1].split()[0]
            assert host in hostnames and got[0].endswith("f=synced")
        assert {ln.split(" on ")[1] for ln in setup_lines if "setup on" in ln} == hostnames
        for inst in live:  # workdir and setup reached every body's own /root
            assert (nodes[inst.id].home / "setup.txt").read_text().startswith("setup on ip-")

        out: list[str] = []
        r = exec_("awse2e", "echo exec on $(hostname)", on_line=out.append)
        assert r.exit_code == 0 and any("exec on ip-" in ln for ln in out), out
        jobs = api.queue("awse2e")
        assert len(jobs) == 2 and all(j.status.value == "SUCCEEDED" for j in jobs)
        first: list[str] = []
        api.logs("awse2e", jobs[0].id, follow=False, on_line=first.append)
        assert sum("rank=" in ln for ln in first) == 2, first

        # the CLI, as its own process (standard AWS variables only): queue, logs, and a
        # status refresh that asks EC2 (moto) for the cluster's instances
        queue = json.loads(_cli("queue", "awse2e", "--json").stdout)
        assert len(queue) == 2, queue
        assert "exec on ip-" in _cli("logs", "awse2e", str(jobs[1].id)).stdout
        rows = json.loads(_cli("status", "--refresh", "--json").stdout)
        assert [r["name"] for r in rows] == ["awse2e"] and rows[0]["status"] == "UP", rows

        api.down("awse2e")
        aws_cloud.bodies.sync()
        leaks = aws_cloud.leaks()
        assert leaks.empty(), leaks
        assert all(n.destroyed for n in nodes.values())
        assert api.status() == []
        total_s = time.monotonic() - t0
        # ~10 s alone; a generous bound (a loaded CI machine runs 4 test workers, and this
        # path starts 3 CLI processes): it catches a hang or a timeout waited out, not jitter
        assert total_s < 90, (launch_s, total_s)
        print(f"launch {launch_s:.2f}s, whole test path {total_s:.2f}s", *events, sep="\n")
    finally:
        for row in api.status():
            api.down(row.name)
