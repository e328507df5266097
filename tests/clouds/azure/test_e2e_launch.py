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
import time
from pathlib import Path

from launcher.api import clusters as api
from launcher.api.launch import launch
from tests.azure_fake import AzureFake
from tests.cloud_e2e import (
    GANG_RUN,
    NETNS_ONLY,
    assert_cli_status_up,
    assert_job_logged_ranks,
    assert_ranks_ran,
    assert_setup_ran,
    cli,
    down_all,
    exec_and_queue,
    workdir_task,
)

pytestmark = NETNS_ONLY

RESOURCES = {"cloud": "azure", "region": "eastus", "instance_type": "Standard_D2s_v5"}


def test_two_node_launch_exec_logs_down_on_azure(azure_cloud: AzureFake, tmp_path: Path) -> None:
    fake = azure_cloud
    task = workdir_task(tmp_path, RESOURCES, GANG_RUN, num_nodes=2,
                        setup="echo setup on $(hostname) > ~/setup.txt; echo setup on $(hostname)")
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
        assert_ranks_ran(lines, {n.hostname for n in nodes.values()})
        assert_setup_ran(nodes.values())

        jobs = exec_and_queue("aze2e")
        assert_job_logged_ranks("aze2e", jobs[0].id)

        assert len(json.loads(cli("queue", "aze2e", "--json").stdout)) == 2
        assert "exec on " in cli("logs", "aze2e", str(jobs[1].id)).stdout
        assert_cli_status_up("aze2e")
        check = cli("check").stdout
        assert "tester@example.com" in check, check

        api.down("aze2e")
        fake.bodies.sync()
        assert fake.inventory() == []
        assert fake.bodies.live_nodes() == {}
        assert all(n.destroyed for n in nodes.values())
        assert api.status() == []
        print(f"launch {launch_s:.2f}s, whole test {time.monotonic() - t0:.2f}s", *events, sep="\n")
    finally:
        down_all()
