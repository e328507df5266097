"""Lambda end to end, minus the VM: the real launch path against the Lambda API fake
(tests/lambda_fake.py), with sshd bodies at the private IPs the fake hands out.

`launch` plans on the bundled catalog (cpu_4x_general in us-east-1), registers the
user's key, launches one instance per node, waits for `active`, connects to the private
IPs (`lambda.use_internal_ips`) where an sshd node runs with the registered key, syncs the
workdir, runs setup and the 2-node gang; then exec, queue, logs (also through the CLI in
its own process), status --refresh, and down, after which the fake holds nothing.
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
from tests.lambda_fake import LambdaFake

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        netns.unavailable_reason() is not None,
        reason=f"sshd nodes unavailable: {netns.unavailable_reason()}",
    ),
]

REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc
    return proc


def test_two_node_launch_exec_logs_down_on_lambda(lambda_cloud: LambdaFake,
                                                  tmp_path: Path) -> None:
    fake = lambda_cloud
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f.txt").write_text("synced")
    task = Task.from_dict({
        "name": "e2e", "num_nodes": 2, "workdir": str(work),
        "resources": {"cloud": "lambda", "region": "us-east-1",
                      "instance_type": "cpu_4x_general"},
        "setup": "echo setup on $(hostname) > ~/setup.txt",
        "run": 'echo "rank=$LAUNCHER_NODE_RANK host=$(hostname) f=$(cat f.txt)"',
    })
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "lme2e", on_line=lines.append)
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, lines
        assert result.cloud == "lambda" and result.region == "us-east-1"
        live = fake.live()
        assert sorted(i["name"] for i in live) == ["launcher-lme2e-0", "launcher-lme2e-1"]
        nodes = fake.bodies.wait_for([i["id"] for i in live])
        hostnames = {n.hostname for n in nodes.values()}
        for rank in (0, 1):
            got = [ln for ln in lines if ln.startswith(f"(rank {rank}) rank={rank} host=")]
            assert len(got) == 1, lines
            assert got[0].split("host=")[1].split()[0] in hostnames and got[0].endswith("f=synced")
        for node in nodes.values():
            assert (node.home / "setup.txt").read_text().startswith("setup on ")

        out: list[str] = []
        r = exec_("lme2e", "echo exec on $(hostname)", on_line=out.append)
        assert r.exit_code == 0 and any("exec on " in ln for ln in out), out
        jobs = api.queue("lme2e")
        assert len(jobs) == 2 and all(j.status.value == "SUCCEEDED" for j in jobs)
        first: list[str] = []
        api.logs("lme2e", jobs[0].id, follow=False, on_line=first.append)
        assert sum("rank=" in ln for ln in first) == 2, first
        assert "exec on " in _cli("logs", "lme2e", str(jobs[1].id)).stdout
        rows = json.loads(_cli("status", "--refresh", "--json").stdout)
        assert [r["name"] for r in rows] == ["lme2e"] and rows[0]["status"] == "UP", rows
        assert "LAMBDA_API_KEY" in _cli("check").stdout

        api.down("lme2e")
        fake.bodies.sync()
        assert fake.live() == [] and fake.bodies.live_nodes() == {}
        assert all(n.destroyed for n in nodes.values())
        assert api.status() == []
        print(f"launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s")
    finally:
        for row in api.status():
            api.down(row.name)
