"""Azure end to end, minus the VM: the real launch path through the Azure SDKs against
the local ARM fake (tests/azure_fake.py), with sshd bodies at the NICs' private IPs.

`launch` plans on the bundled catalog, provisions through ARM (resource group, NSG, vnet,
NICs, VMs; every long-running operation polled), connects to the private IPs the fake
handed out inside the lab (`azure.use_internal_ips`) where tests/cloud_bodies.py started
an sshd node with the osProfile's SSH key authorized for root, syncs the workdir, runs
setup and the 2-node gang; then exec, queue, logs (also through the CLI in its own
process: credentials come from the fake `az` login, the endpoint from config.yaml), and
down, after which the fake holds nothing and the bodies are gone.
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
from tests.azure_fake import AzureFake

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        netns.unavailable_reason() is not None,
        reason=f"sshd nodes unavailable: {netns.unavailable_reason()}",
    ),
]

RESOURCES = {"cloud": "azure", "region": "eastus", "instance_type": "Standard_D2s_v5"}
REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc
    return proc


def test_two_node_launch_exec_logs_down_on_azure(azure_cloud: AzureFake, tmp_path: Path) -> None:
    fake = azure_cloud
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f.txt").write_text("synced")
    task = Task.from_dict({
        "name": "e2e", "num_nodes": 2, "workdir": str(work), "resources": RESOURCES,
        "setup": "echo setup on $(hostname) > ~/setup.txt; echo setup on $(hostname)",
        "run": 'echo "rank=$LAUNCHER_NODE_RANK host=$(hostname) f=$(cat f.txt)"',
    })
    lines: list[str] = []
    events: list[str] = []
    t0 = time.monotonic()
    try:
        result = launch(task, "aze2e", on_line=lines.append,
                        on_event=lambda e: events.append(f"{time.monotonic() - t0:.2f} {e}"))
        launch_s = time.monotonic() - t0
        assert result.exit_code == 0, (lines, events)
        assert result.cloud == "azure" and result.region == "eastus"

        vms = fake.vms()
        assert len(vms) == 2
        assert {v["location"] for v in vms} == {"eastus"}
        assert all(v["properties"]["hardwareProfile"]["vmSize"] == "Standard_D2s_v5" for v in vms)
        nodes = fake.bodies.wait_for([v["properties"]["vmId"] for v in vms])
        hostnames = {n.hostname for n in nodes.values()}
        for rank in (0, 1):
            got = [ln for ln in lines if ln.startswith(f"(rank {rank}) rank={rank} host=")]
            assert len(got) == 1, lines
            assert got[0].split("host=")[1].split()[0] in hostnames and got[0].endswith("f=synced")
        for node in nodes.values():
            assert (node.home / "setup.txt").read_text().startswith("setup on ")

        out: list[str] = []
        r = exec_("aze2e", "echo exec on $(hostname)", on_line=out.append)
        assert r.exit_code == 0 and any("exec on " in ln for ln in out), out
        jobs = api.queue("aze2e")
        assert len(jobs) == 2 and all(j.status.value == "SUCCEEDED" for j in jobs)
        first: list[str] = []
        api.logs("aze2e", jobs[0].id, follow=False, on_line=first.append)
        assert sum("rank=" in ln for ln in first) == 2, first

        assert len(json.loads(_cli("queue", "aze2e", "--json").stdout)) == 2
        assert "exec on " in _cli("logs", "aze2e", str(jobs[1].id)).stdout
        rows = json.loads(_cli("status", "--refresh", "--json").stdout)
        assert [r["name"] for r in rows] == ["aze2e"] and rows[0]["status"] == "UP", rows
        check = _cli("check").stdout
        assert "tester@example.com" in check, check

        api.down("aze2e")
        fake.bodies.sync()
        assert fake.inventory() == []
        assert fake.bodies.live_nodes() == {}
        assert all(n.destroyed for n in nodes.values())
        assert api.status() == []
        print(f"launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s", *events, sep="\n")
    finally:
        for row in api.status():
            api.down(row.name)
