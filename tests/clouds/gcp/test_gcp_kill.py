"""kill -9 of the client in the middle of a GCP provision, then `down` (terminate from
another process, as `launcher down` or the managed-jobs controller's resume does):
nothing is left. The client is a real process reaching the fake through the
documented settings; the fake holds the chosen API call until the client is dead,
then serves it (GCE finishes what it was asked whether or not the caller lives)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from launcher.clouds.gcp.cloud import GCPCloud, Timeouts
from tests.gcp_fake import GCPFake

CHILD = """
from launcher.clouds.base import ProvisionRequest
from launcher.clouds.gcp.cloud import GCPCloud
GCPCloud(node_waiter=lambda info, d: info).provision(ProvisionRequest(
    cluster_name="k1", cloud="gcp", region="us-central1", zone="us-central1-a",
    instance_type="a2-highgpu-8g", num_nodes=2, use_spot=True, accelerator="A100",
    accelerator_count=8, ports=("8080",), idempotency_token="tok-k1"))
print("PROVISIONED")
"""
EMPTY: dict[str, list[str]] = {"instances": [], "policies": [], "firewalls": []}


def _child() -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def test_kill_9_at_each_provisioning_step_then_down_leaves_nothing(gcp_env: GCPFake) -> None:
    clean = _child()
    out, err = clean.communicate(timeout=120)
    assert "PROVISIONED" in out, err
    steps = [c.kind for c in gcp_env.calls]
    GCPCloud(node_waiter=lambda i, d: i).terminate("k1")
    assert gcp_env.leaks() == EMPTY

    def first(kind: str, after: int = 0) -> int:
        return next(i for i, k in enumerate(steps) if k == kind and i >= after)

    inserts = [i for i, k in enumerate(steps) if k == "instances.insert"]
    chosen = {"firewall insert": first("firewalls.insert"),
              "placement policy insert": first("policies.insert"),
              "first instance insert": inserts[0], "second instance insert": inserts[1],
              "wait on an insert": first("operations.wait", inserts[-1]),
              "last instance get": max(i for i, k in enumerate(steps) if k == "instances.get")}
    for label, index in chosen.items():
        gcp_env.reset()
        from launcher.clouds.gcp import network

        network._known.clear()
        release = gcp_env.hold_call(index)
        child = _child()
        assert gcp_env.held.wait(60), (label, child.communicate(timeout=5))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        release.set()  # GCE serves the request its dead caller sent
        time.sleep(0.1)
        GCPCloud(node_waiter=lambda i, d: i, timeouts=Timeouts(poll=0.05)).terminate("k1")
        assert gcp_env.leaks() == EMPTY, label
    print(f"kill -9 at {len(chosen)} of {len(steps)} provisioning calls: nothing left")
