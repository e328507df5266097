"""Cross-cloud failover through the real loop: AWS (EC2 in moto, in-process) answers
InsufficientInstanceCapacity in both its zones, then Azure (the ARM fake) answers
SkuNotAvailable in its first location; the gang lands in Azure's second location.
Nothing is left in either cloud but the winning cluster. (GCP sits between them in the
issue's scenario; it is not registered yet, so this covers AWS -> Azure.)"""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.clouds.aws.session import ClientFactory
from launcher.clouds.azure.cloud import AzureCloud
from launcher.provisioning.failover import provision_with_failover
from launcher.state.db import StateDB
from tests.azure_fake import AzureFake
from tests.clouds.aws.aws_fixtures import aws_env, factory, make_cloud  # noqa: F401
from tests.clouds.aws.test_aws_failover import FakeTask, _live, _placement, inject, plan_over
from tests.clouds.azure.test_azure_provision import FakeWaiter


def _azure(region: str) -> Any:
    p = _placement("azure", region, None)
    return dataclasses.replace(p, instance_type="Standard_NV6ads_A10_v5",
                               offer=dataclasses.replace(p.offer,
                                                         instance_type="Standard_NV6ads_A10_v5"))


def test_aws_capacity_then_azure_capacity_then_azure(
        factory: ClientFactory, azure_fake: AzureFake) -> None:  # noqa: F811
    aws = make_cloud(factory)
    inject(factory, "us-east-1", "InsufficientInstanceCapacity")
    azure_fake.fail("PUT", r"launcher-xc-eastus/.*/virtualMachines/xc-0$", 409,
                    "SkuNotAvailable", "The requested size for resource is currently not "
                    "available in location 'eastus'.")
    plan = plan_over([_placement("aws", "us-east-1", "use1-az6"),
                      _placement("aws", "us-east-1", "use1-az1"),
                      _azure("eastus"), _azure("westus2")])
    azure = AzureCloud(node_waiter=FakeWaiter())
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "xc", db, plan_fn=plan,
                                      cloud_fn={"aws": aws, "azure": azure}.__getitem__)
    assert [(a.cloud, a.region, a.error_type) for a in got.attempts] == [
        ("aws", "us-east-1", "CapacityError"), ("aws", "us-east-1", "CapacityError"),
        ("azure", "eastus", "CapacityError")]
    assert got.cluster.cloud == "azure" and got.cluster.region == "westus2"
    assert _live("us-east-1") == []
    assert sorted(g["name"] for g in azure_fake.groups.values()) == ["launcher-xc-westus2"]
    azure.terminate("xc")
    assert azure_fake.inventory() == []
