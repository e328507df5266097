"""kill -9 of the client in the middle of a launch: while the VMs' creation operations
are still running, and while waiting for SSH. `launcher down` (terminate) then finds the
resource group from the record written before it was created and deletes it: nothing
is left in the ARM fake."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.clouds.azure import records
from launcher.clouds.azure.cloud import AzureCloud
from tests.azure_fake import AzureFake
from tests.waiting import wait_until

CHILD = textwrap.dedent("""
    import time
    from launcher.clouds.azure.cloud import AzureCloud
    from launcher.clouds.base import ProvisionRequest
    def hang(info, deadline):
        print("WAITING", flush=True)
        time.sleep(3600)
    AzureCloud(node_waiter=hang).provision(ProvisionRequest(
        cluster_name="k", cloud="azure", region="eastus", zone=None,
        instance_type="Standard_D2s_v5", num_nodes=2, use_spot=False))
""")
REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("step", ["vm-operations-running", "waiting-for-ssh"])
def test_kill_9_mid_launch_then_down_leaves_nothing(azure_fake: AzureFake, step: str) -> None:
    if step == "vm-operations-running":
        azure_fake.vm_op_polls = 10**9  # the VMs' creations stay InProgress
    proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if step == "vm-operations-running":
            wait_until(lambda: len(azure_fake.vms()) == 2 or proc.poll() is not None, 30,
                       "both VM PUTs")
        else:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "WAITING", proc.stderr
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert azure_fake.inventory(), "the killed launch had created resources"
    azure_fake.vm_op_polls = None
    for op in azure_fake.ops.values():
        op.polls_left = min(op.polls_left, 1)
    assert records.groups("k") == {"launcher-k-eastus": "eastus"}
    t0 = time.monotonic()
    AzureCloud().terminate("k")
    assert azure_fake.inventory() == []
    assert records.groups("k") is None
    assert time.monotonic() - t0 < 20
