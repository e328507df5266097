"""Nebius errors through the real failover loop (`provision_with_failover`) and the
NebiusCloud against the gRPC fake: capacity (ServiceError `not_enough_resources`) blocks
the region and the next one is tried; quota (`quota_failure`) moves to the next region;
PERMISSION_DENIED to the next cloud; INVALID_ARGUMENT stops at once. After each, the fake
holds only the winning cluster."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from launcher.clouds.base import ProvisionFailedError
from launcher.clouds.nebius.cloud import NebiusCloud
from launcher.provisioning.failover import provision_with_failover
from launcher.state.db import StateDB
from tests.clouds.aws.test_aws_failover import FakeTask, OtherCloud, _placement, plan_over
from tests.clouds.nebius.test_nebius_provision import FAST, FakeWaiter
from tests.nebius_fake import NebiusFake


def _nebius(region: str) -> Any:
    p = _placement("nebius", region, None)
    it = "gpu-h100-sxm_1gpu-16vcpu-200gb"
    return dataclasses.replace(p, instance_type=it,
                               offer=dataclasses.replace(p.offer, instance_type=it))


TASK: Any = FakeTask()


def _clouds(table: dict[str, Any]) -> Any:
    return table.__getitem__


@pytest.fixture
def cloud(nebius_fake: NebiusFake) -> NebiusCloud:
    return NebiusCloud(node_waiter=FakeWaiter(), timeouts=FAST)


def test_capacity_then_quota_then_the_third_region(nebius_fake: NebiusFake,
                                                   cloud: NebiusCloud) -> None:
    nebius_fake.faults["InstanceService.Create"] = ["capacity", "", "op-quota"]
    plan = plan_over([_nebius(r) for r in ("eu-north1", "eu-west1", "us-central1")])
    with StateDB() as db:
        got = provision_with_failover(TASK, "cap", db, plan_fn=plan,
                                      cloud_fn=_clouds({"nebius": cloud}))
    assert [(a.region, a.error_type) for a in got.attempts] == [
        ("eu-north1", "CapacityError"), ("eu-west1", "QuotaError")]
    assert got.cluster.region == "us-central1"
    assert len(nebius_fake.instances) == 2 and len(nebius_fake.disks) == 2
    cloud.terminate("cap")
    assert nebius_fake.inventory() == []


def test_auth_failure_moves_to_the_next_cloud(nebius_fake: NebiusFake,
                                              cloud: NebiusCloud) -> None:
    nebius_fake.faults["DiskService.Create"] = ["auth", "auth"]
    plan = plan_over([_nebius("eu-north1"), _nebius("eu-west1"), _placement("ssh", "lab", None)])
    with StateDB() as db:
        got = provision_with_failover(TASK, "au", db, plan_fn=plan,
                                      cloud_fn=_clouds({"nebius": cloud, "ssh": OtherCloud()}))
    assert [(a.cloud, a.error_type) for a in got.attempts] == [("nebius", "AuthError")]
    assert got.cluster.cloud == "ssh"
    assert nebius_fake.inventory() == []


def test_invalid_argument_stops_at_once(nebius_fake: NebiusFake, cloud: NebiusCloud) -> None:
    nebius_fake.faults["InstanceService.Create"] = ["invalid"]
    plan = plan_over([_nebius("eu-north1"), _nebius("eu-west1")])
    with StateDB() as db, pytest.raises(ProvisionFailedError) as err:
        provision_with_failover(TASK, "bad", db, plan_fn=plan,
                                cloud_fn=_clouds({"nebius": cloud}))
    assert [a.error_type for a in err.value.attempts] == ["InvalidRequestError"]
    assert nebius_fake.inventory() == []
