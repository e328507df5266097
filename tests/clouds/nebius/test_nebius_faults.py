"""Typed errors from the Nebius API, and a fault at every RPC of the provisioning path.

Error classes: each fault kind of the fake (gRPC status + the ServiceError detail Nebius
attaches: `quota_failure`, `not_enough_resources`) on the call itself and, for the
RESOURCE_EXHAUSTED ones, in the finished Operation's status, mapped to QuotaError /
CapacityError / AuthError / InvalidRequestError / CloudError; UNAVAILABLE is retried and
the provision succeeds. Fault injection: every (RPC, call index) the provision path makes
(subnet list, GPU cluster create, each disk/instance create, each instance get, each
operation poll) fails in turn with each kind: nothing is left, the record is gone, and
`terminate` is a no-op. Prints steps x faults."""

from __future__ import annotations

import collections

import pytest

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    InvalidRequestError,
    QuotaError,
)
from launcher.clouds.nebius import records
from launcher.clouds.nebius.cloud import NebiusCloud
from tests.clouds.nebius.test_nebius_provision import FAST, FakeWaiter, req
from tests.nebius_fake import PROVISION_RPCS, NebiusFake

EXPECTED = {"capacity": CapacityError, "quota": QuotaError, "auth": AuthError,
            "invalid": InvalidRequestError, "internal": CloudError,
            "op-capacity": CapacityError, "op-quota": QuotaError}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
@pytest.mark.parametrize("rpc", ["InstanceService.Create", "DiskService.Create",
                                 "GpuClusterService.Create"])
def test_error_class(nebius_fake: NebiusFake, rpc: str, kind: str) -> None:
    cloud = NebiusCloud(node_waiter=FakeWaiter(), timeouts=FAST)
    nebius_fake.faults[rpc] = [kind]
    with pytest.raises(CloudError) as err:
        cloud.provision(req())
    assert type(err.value) is EXPECTED[kind], err.value
    assert err.value.cloud == "nebius" and err.value.region == "eu-north1"
    assert nebius_fake.inventory() == [] and records.read("c1") is None


def test_unavailable_is_retried(nebius_fake: NebiusFake) -> None:
    cloud = NebiusCloud(node_waiter=FakeWaiter(), timeouts=FAST)
    nebius_fake.faults["InstanceService.Create"] = ["unavailable", "unavailable"]
    cloud.provision(req())
    assert len(nebius_fake.instances) == 2
    cloud.terminate("c1")
    assert nebius_fake.inventory() == []


def test_a_fault_at_every_call_leaves_nothing(nebius_fake: NebiusFake,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    cloud = NebiusCloud(node_waiter=FakeWaiter(), timeouts=FAST)
    start = len(nebius_fake.calls)
    cloud.provision(req())
    path = [c for c in nebius_fake.calls[start:] if c in PROVISION_RPCS]
    cloud.terminate("c1")
    counts = collections.Counter(path)
    assert set(counts) == set(PROVISION_RPCS), counts
    steps = [(rpc, i) for rpc, n in sorted(counts.items()) for i in range(n)]
    tried = 0
    for rpc, index in steps:
        for kind in ("capacity", "invalid", "internal"):
            if kind == "capacity" and not rpc.endswith(".Create"):
                continue  # reads: the SDK retries RESOURCE_EXHAUSTED (rate limits), rightly
            # the index-th call of `rpc` fails (earlier ones pass: "" is no fault)
            nebius_fake.faults[rpc] = [""] * index + [kind]
            with pytest.raises(CloudError):
                cloud.provision(req())
            nebius_fake.faults.clear()
            assert nebius_fake.inventory() == [], (rpc, index, kind)
            assert records.read("c1") is None, (rpc, index, kind)
            cloud.terminate("c1")
            tried += 1
    with capsys.disabled():
        print(f"\nnebius fault injection: {len(steps)} steps "
              f"({', '.join(f'{k} x{v}' for k, v in sorted(counts.items()))}) x <=3 faults = "
              f"{tried} runs (RESOURCE_EXHAUSTED only on creates), nothing left after any")
