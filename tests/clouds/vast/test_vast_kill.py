"""kill -9 of the client at each step of a Vast launch that creates something (the rent
call answered late, the boot poll), then `down` from another process (this one): the
records written before each call let it find and terminate everything."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from launcher.clouds.vast.cloud import RECORDS, Timeouts, VastCloud
from tests.vast_fake import VastFake

CLIENT = """
from launcher.clouds.base import ProvisionRequest
from launcher.clouds.vast.cloud import VastCloud, Timeouts
c = VastCloud(node_waiter=lambda info, deadline: info, timeouts=Timeouts(poll=0.01))
c.provision(ProvisionRequest(cluster_name="k", cloud="vast", region="Florida, US, NA",
                             zone=None, instance_type="1x-H100_SXM-32-65536", num_nodes=1,
                             use_spot=True))
"""


@pytest.mark.parametrize("step", [("create", 0), ("instances", 0)])
def test_kill_then_down_leaves_nothing(vast_fake: VastFake, step: tuple[str, int]) -> None:
    vast_fake.hold(*step)
    proc = subprocess.Popen([sys.executable, "-c", CLIENT], env=dict(os.environ))
    try:
        assert vast_fake.arrived.wait(20), "the client never reached the step"
        time.sleep(0.05)
        proc.kill()
        proc.wait(10)
    finally:
        vast_fake.release()
        if proc.poll() is None:
            proc.kill()
    assert vast_fake.live(), "the held call created something"
    VastCloud(timeouts=Timeouts(poll=0.01)).terminate("k")
    assert vast_fake.live() == [] and RECORDS.entries("k") is None
