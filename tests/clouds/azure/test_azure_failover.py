"""ARM errors through the real failover loop (`provision_with_failover`) and the
AzureCloud against the ARM fake: capacity in two locations then the third (the bundled
catalog has no Azure zones: a capacity error blocks the location; InfiniBand gangs try
the location's zones inside provision, tested in test_azure_provision.py), quota to the
next region, auth to the next cloud, an invalid request stops at once. After each, the
fake holds only the winning cluster."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.clouds.azure.cloud import AzureCloud
from launcher.clouds.base import ProvisionFailedError
from launcher.provisioning.failover import provision_with_failover
from launcher.state.db import StateDB
from tests.azure_fake import AzureFake
from tests.clouds.aws.test_aws_failover import FakeTask, OtherCloud, _placement, plan_over
from tests.clouds.azure.test_azure_provision import FakeWaiter


def _azure(region: str) -> Any:
    import dataclasses

    p = _placement("azure", region, None)
    return dataclasses.replace(p, instance_type="Standard_D2s_v5",
                               offer=dataclasses.replace(p.offer, instance_type="Standard_D2s_v5"))


def _groups(fake: AzureFake) -> list[str]:
    return sorted(g["name"] for g in fake.groups.values())


@pytest.fixture
def cloud(azure_fake: AzureFake) -> AzureCloud:
    return AzureCloud(node_waiter=FakeWaiter())


def test_capacity_in_two_locations_then_the_third(azure_fake: AzureFake,
                                                  cloud: AzureCloud) -> None:
    azure_fake.fail("PUT", r"launcher-cap-eastus/.*/virtualMachines/cap-0$", 409,
                    "SkuNotAvailable", "The requested size for resource is currently not "
                    "available in location 'eastus'.")
    azure_fake.fail("PUT", r"launcher-cap-eastus2/.*/virtualMachines/cap-1$", 200,
                    "AllocationFailed", "Allocation failed.", in_operation=True)
    plan = plan_over([_azure(r) for r in ("eastus", "eastus2", "westus2")])
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "cap", db, plan_fn=plan,
                                      cloud_fn={"azure": cloud}.__getitem__)
    assert [(a.region, a.error_type) for a in got.attempts] == [
        ("eastus", "CapacityError"), ("eastus2", "CapacityError")]
    assert got.cluster.region == "westus2"
    assert _groups(azure_fake) == ["launcher-cap-westus2"]


def test_quota_moves_to_the_next_region(azure_fake: AzureFake, cloud: AzureCloud) -> None:
    azure_fake.fail("PUT", r"launcher-q-eastus/.*/virtualMachines/", 409,
                    "OperationNotAllowed", "Operation could not be completed as it results in "
                    "exceeding approved Total Regional Cores quota.", times=2)
    plan = plan_over([_azure("eastus"), _azure("westus2")])
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "q", db, plan_fn=plan,
                                      cloud_fn={"azure": cloud}.__getitem__)
    assert [(a.region, a.error_type) for a in got.attempts] == [("eastus", "QuotaError")]
    assert _groups(azure_fake) == ["launcher-q-westus2"]


def test_auth_failure_moves_to_the_next_cloud(azure_fake: AzureFake, cloud: AzureCloud) -> None:
    azure_fake.fail("PUT", r"/resourcegroups/launcher-au-eastus$", 403, "AuthorizationFailed",
                    "The client does not have authorization to perform action "
                    "'Microsoft.Resources/subscriptions/resourcegroups/write'.")
    plan = plan_over([_azure("eastus"), _azure("westus2"), _placement("ssh", "lab", None)])
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "au", db, plan_fn=plan,
                                      cloud_fn={"azure": cloud, "ssh": OtherCloud()}.__getitem__)
    assert [(a.cloud, a.error_type) for a in got.attempts] == [("azure", "AuthError")]
    assert got.cluster.cloud == "ssh"
    assert azure_fake.inventory() == []


def test_invalid_parameter_stops_at_once(azure_fake: AzureFake, cloud: AzureCloud) -> None:
    azure_fake.fail("PUT", r"/virtualMachines/bad-0$", 400, "InvalidParameter",
                    "The value of parameter imageReference.sku is invalid.")
    plan = plan_over([_azure("eastus"), _azure("westus2")])
    with StateDB() as db, pytest.raises(ProvisionFailedError) as err:
        provision_with_failover(FakeTask(), "bad", db, plan_fn=plan,
                                cloud_fn={"azure": cloud}.__getitem__)
    assert [a.error_type for a in err.value.attempts] == ["InvalidRequestError"]
    assert azure_fake.inventory() == []
