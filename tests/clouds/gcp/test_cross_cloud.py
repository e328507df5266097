"""Cross-cloud failover through the real loop, AWS -> GCP -> Azure: EC2 (moto,
in-process) answers InsufficientInstanceCapacity in both its zones, GCP (the Compute
fake) reports ZONE_RESOURCE_POOL_EXHAUSTED inside the insert operations of both its
zones, and the gang lands on Azure (the ARM fake). Nothing is left on AWS or GCP."""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.clouds.aws.session import ClientFactory
from launcher.clouds.azure.cloud import AzureCloud
from launcher.provisioning.failover import provision_with_failover
from launcher.state.db import StateDB
from tests.azure_fake import AzureFake, azure_fake  # noqa: F401
from tests.clouds.aws.aws_fixtures import aws_env, factory  # noqa: F401
from tests.clouds.aws.aws_fixtures import make_cloud as make_aws
from tests.clouds.aws.test_aws_failover import FakeTask, _live, _placement, inject, plan_over
from tests.clouds.azure.test_azure_provision import FakeWaiter
from tests.clouds.gcp.test_gcp_provision import _placement as gcp_placement
from tests.clouds.gcp.test_gcp_provision import make_cloud as make_gcp
from tests.gcp_fake import GCPFake


def _azure(region: str) -> Any:
    p = _placement("azure", region, None)
    return dataclasses.replace(p, instance_type="Standard_NV6ads_A10_v5",
                               offer=dataclasses.replace(p.offer,
                                                         instance_type="Standard_NV6ads_A10_v5"))


def test_aws_capacity_then_gcp_capacity_then_azure(
        factory: ClientFactory, azure_fake: AzureFake, gcp_env: GCPFake) -> None:  # noqa: F811
    aws = make_aws(factory)
    inject(factory, "us-east-1", "InsufficientInstanceCapacity")
    gcp_env.exhaust("us-central1-a")
    gcp_env.exhaust("us-central1-b", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
    gcp = make_gcp(gcp_env)
    azure = AzureCloud(node_waiter=FakeWaiter())
    plan = plan_over([_placement("aws", "us-east-1", "use1-az6"),
                      _placement("aws", "us-east-1", "use1-az1"),
                      gcp_placement("gcp", "us-central1", "us-central1-a"),
                      gcp_placement("gcp", "us-central1", "us-central1-b"),
                      _azure("eastus")])
    with StateDB() as db:
        clouds: dict[str, Any] = {"aws": aws, "gcp": gcp, "azure": azure}
        got = provision_with_failover(FakeTask(), "xc", db,  # type: ignore[arg-type]
                                      plan_fn=plan, cloud_fn=clouds.__getitem__)
    assert [(a.cloud, a.zone, a.error_type) for a in got.attempts] == [
        ("aws", "use1-az6", "CapacityError"), ("aws", "use1-az1", "CapacityError"),
        ("gcp", "us-central1-a", "CapacityError"), ("gcp", "us-central1-b", "CapacityError")]
    assert got.cluster.cloud == "azure" and got.cluster.region == "eastus"
    assert _live("us-east-1") == []
    assert gcp_env.leaks() == {"instances": [], "policies": [], "firewalls": []}
    azure.terminate("xc")
    assert azure_fake.inventory() == []
