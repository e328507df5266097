"""kill -9 of the client in the middle of provisioning, then `down` from another process:
nothing is left. The client (its own process, configured like any user: token in
NEBIUS_IAM_TOKEN, endpoint in config.yaml) provisions a 2-node InfiniBand gang; the fake
carries out the chosen call and holds its answer, the test kills the client there (the
resource exists, the client never learned its id), then terminates the cluster from
this process: found by the record written before the first create and the labels."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.clouds.nebius import records
from launcher.clouds.nebius.cloud import NebiusCloud
from tests.clouds.nebius.test_nebius_provision import FAST
from tests.nebius_fake import NebiusFake

REPO = Path(__file__).resolve().parents[3]
CLIENT = """
from launcher.clouds.base import ProvisionRequest
from launcher.clouds.nebius.cloud import NebiusCloud, Timeouts
NebiusCloud(node_waiter=lambda info, deadline: info, timeouts=Timeouts(poll=0.02)).provision(
    ProvisionRequest(cluster_name="k", cloud="nebius", region="eu-north1", zone=None,
                     instance_type="gpu-h100-sxm_8gpu-128vcpu-1600gb", num_nodes=2,
                     use_spot=True, fabric="infiniband", ssh_public_key="ssh-ed25519 AAAA k"))
"""


@pytest.mark.parametrize("step", [("GpuClusterService.Create", 0), ("DiskService.Create", 1),
                                  ("InstanceService.Create", 0), ("InstanceService.Create", 1),
                                  ("OperationService.Get", 4)],
                         ids=lambda s: f"{s[0]}#{s[1]}")
def test_kill_at_a_step_then_down_leaves_nothing(nebius_fake: NebiusFake,
                                                 step: tuple[str, int]) -> None:
    nebius_fake.hold = step
    proc = subprocess.Popen([sys.executable, "-c", CLIENT], cwd=REPO, env=dict(os.environ),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert nebius_fake.held.wait(30), f"the client ended first: rc={proc.poll()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        nebius_fake.release.set()
        if proc.poll() is None:
            proc.kill()
    assert nebius_fake.inventory() != []  # the client left something behind
    assert records.read("k") is not None
    NebiusCloud(timeouts=FAST).terminate("k")
    assert nebius_fake.inventory() == []
    assert records.read("k") is None
