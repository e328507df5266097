"""kill -9 of the client at each step of a Lambda launch that creates something (each
launch answered late, the boot poll), then `down` from another process (this one): the
records written before each call let it find and terminate everything."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from launcher.clouds.lambda_.cloud import RECORDS, LambdaCloud, Timeouts
from tests.lambda_fake import LambdaFake

CLIENT = """
from launcher.clouds.base import ProvisionRequest
from launcher.clouds.lambda_.cloud import LambdaCloud, Timeouts
c = LambdaCloud(node_waiter=lambda info, deadline: info, timeouts=Timeouts(poll=0.01))
c.provision(ProvisionRequest(cluster_name="k", cloud="lambda", region="us-east-1", zone=None,
                             instance_type="gpu_1x_a10", num_nodes=2, use_spot=False))
"""


@pytest.mark.parametrize("step", [("launch", 0), ("launch", 1), ("instances", 0)])
def test_kill_then_down_leaves_nothing(lambda_fake: LambdaFake, step: tuple[str, int]) -> None:
    lambda_fake.hold(*step)
    proc = subprocess.Popen([sys.executable, "-c", CLIENT], env=dict(os.environ))
    try:
        assert lambda_fake.arrived.wait(20), "the client never reached the step"
        time.sleep(0.05)
        proc.kill()
        proc.wait(10)
    finally:
        lambda_fake.release()
        if proc.poll() is None:
            proc.kill()
    assert lambda_fake.live(), "the held call created something"
    LambdaCloud(timeouts=Timeouts(poll=0.01)).terminate("k")
    assert lambda_fake.live() == [] and RECORDS.entries("k") is None
