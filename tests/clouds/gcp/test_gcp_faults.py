"""A fault at every API call of the GCP provisioning path: nothing is left running.

A clean provision of a 2-node compact-placement GPU gang with a ports rule, on a fresh
fake (so the network's firewall rules are created too), records its calls; then, for
each call index in turn (by default the first and the last call of each kind; every call
with LAUNCHER_FULL_SWEEPS=1, see tests/README.md) and each fault kind, a fresh provision
meets the fault there:
- `http`: the call's HTTP error (500 backendError, the API's error body);
- `operation`: for mutating calls, an error inside its DONE operation;
- `waiter`: the node waiter (SSH) fails after every API call succeeded;
- `interrupt`: KeyboardInterrupt (Ctrl-C) raised from the node waiter.
After the failed provision, and again after `terminate`, the fake must list no
instance, no placement policy and no per-cluster firewall rule. The count of
steps x faults tried is printed (`-s`).
"""

from __future__ import annotations

import pytest

from launcher.clouds.base import CloudError, ClusterInfo, ProvisionRequest
from launcher.clouds.gcp import network
from launcher.clouds.gcp.cloud import GCPCloud, Timeouts
from launcher.clouds.gcp.session import Clients
from tests import sweeps
from tests.clouds.gcp.test_gcp_provision import SETTINGS
from tests.gcp_fake import Fault, GCPFake

MUTATING = ("instances.insert", "firewalls.insert", "policies.insert")
EMPTY: dict[str, list[str]] = {"instances": [], "policies": [], "firewalls": []}


def _cloud(fake: GCPFake, waiter: object = None) -> GCPCloud:
    from google.auth.credentials import AnonymousCredentials

    clients = Clients(SETTINGS, credentials=AnonymousCredentials(), endpoint=fake.endpoint)
    return GCPCloud(clients=clients, settings=SETTINGS,
                    node_waiter=waiter or (lambda info, _d: info),  # type: ignore[arg-type]
                    timeouts=Timeouts(poll=0.01, running=5, teardown=5), sleep=lambda _s: None)


def _req(name: str) -> ProvisionRequest:
    return ProvisionRequest(cluster_name=name, cloud="gcp", region="us-central1",
                            zone="us-central1-a", instance_type="a2-highgpu-8g", num_nodes=2,
                            use_spot=True, accelerator="A100", accelerator_count=8,
                            ports=("8080",), idempotency_token=f"tok-{name}")


def _fresh(fake: GCPFake) -> None:
    fake.reset()
    network._known.clear()  # a fresh project: the firewall rules are created again


def test_fault_at_every_provisioning_call_leaves_nothing(gcp_env: GCPFake) -> None:
    _fresh(gcp_env)
    _cloud(gcp_env).provision(_req("clean"))
    steps = [c.kind for c in gcp_env.calls]
    assert "instances.insert" in steps and "policies.insert" in steps
    assert "firewalls.insert" in steps and "operations.wait" in steps

    tried: list[tuple[int, str, str]] = []
    # by default the first and the last call of each kind (the last insert fails with the
    # first node made); every call with LAUNCHER_FULL_SWEEPS=1 (tests/sweeps.py)
    last = {kind: i for i, kind in enumerate(steps)}
    chosen = sweeps.first_of_each(
        list(enumerate(steps)), lambda ik: (ik[1], ik[0] == last[ik[1]]))
    for index, kind in chosen:
        # 500: the SDK retries a 503 of a read call itself (its default retry policy)
        faults = [("http", Fault(500, "backendError", f"injected at {kind}"))]
        if kind in MUTATING:
            faults.append(("operation", Fault(503, "ZONE_RESOURCE_POOL_EXHAUSTED",
                                              f"injected in the operation of {kind}",
                                              in_operation=True)))
        for label, fault in faults:
            _fresh(gcp_env)
            gcp_env.fail_call(index, fault)
            cloud = _cloud(gcp_env)
            name = f"f{index}{label[0]}"
            with pytest.raises(CloudError):
                cloud.provision(_req(name))
            assert gcp_env.leaks() == EMPTY, (index, kind, label)
            cloud.terminate(name)
            assert gcp_env.leaks() == EMPTY, (index, kind, label)
            tried.append((index, kind, label))

    def failing(info: ClusterInfo, _deadline: float) -> ClusterInfo:
        raise CloudError("ssh never came up", cloud="gcp")

    def interrupted(info: ClusterInfo, _deadline: float) -> ClusterInfo:
        raise KeyboardInterrupt

    for label, waiter, exc in (("waiter", failing, CloudError),
                               ("interrupt", interrupted, KeyboardInterrupt)):
        _fresh(gcp_env)
        cloud = _cloud(gcp_env, waiter)
        with pytest.raises(exc):
            cloud.provision(_req(f"w{label}"))
        assert gcp_env.leaks() == EMPTY, label
        tried.append((len(steps), "node waiter", label))
    print(f"GCP provisioning: {len(steps)} API calls + node waiter; "
          f"{len(tried)} step x fault combinations tried, nothing left after any")
