"""kill -9 of the client in the middle of a provisioning: after RunPod applied the deploy
but before its answer arrived (only the pod's name is recorded), while the pod is
starting (its id recorded), and while waiting for SSH. `terminate` from another process
then finds the pod (by recorded id, or by name among the account's pods) and
terminates it: nothing is left in the fake, and the record is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.clouds.runpod import records
from launcher.clouds.runpod.cloud import RunPodCloud, Timeouts
from tests.runpod_fake import RunPodFake

CHILD = textwrap.dedent("""
    import time
    from launcher.clouds.runpod.cloud import RunPodCloud, Timeouts
    from launcher.clouds.base import ProvisionRequest
    def hang(info, deadline):
        print("WAITING", flush=True)
        time.sleep(3600)
    RunPodCloud(node_waiter=hang, timeouts=Timeouts(poll=0.02)).provision(ProvisionRequest(
        cluster_name="k", cloud="runpod", region="US", zone="US-KS-2",
        instance_type="1x_A100-80GB_SECURE", num_nodes=1, use_spot=True,
        ssh_public_key="ssh-ed25519 AAAAkill k"))
""")
REPO = Path(__file__).resolve().parents[3]


def _until(cond: object, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("step", ["deploy-answer-held", "pod-starting", "waiting-for-ssh"])
def test_kill_9_mid_provision_then_terminate_leaves_nothing(runpod_fake: RunPodFake,
                                                            step: str) -> None:
    if step == "deploy-answer-held":
        runpod_fake.hold_answers.clear()
    if step == "pod-starting":
        runpod_fake.start_polls = 10**9
    proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        if step == "waiting-for-ssh":
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "WAITING", proc.communicate()
        elif step == "pod-starting":
            _until(lambda: runpod_fake.calls.count("pod") >= 3 or proc.poll() is not None, 30,
                   "the pod polled while starting")
        else:
            _until(lambda: runpod_fake.inventory() or proc.poll() is not None, 30, "the deploy")
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    runpod_fake.hold_answers.set()
    assert len(runpod_fake.inventory()) == 1, "the killed provisioning had deployed a pod"
    recorded = (records.read("k") or {}).get("pods")
    expected_id = "" if step == "deploy-answer-held" else runpod_fake.inventory()[0]
    assert recorded == {"launcher-k-0": expected_id}, recorded
    RunPodCloud(timeouts=Timeouts(poll=0.02)).terminate("k")
    assert runpod_fake.inventory() == [] and records.read("k") is None
