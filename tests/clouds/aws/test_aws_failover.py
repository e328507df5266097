"""EC2 errors -> typed errors, and through the real failover loop.

moto never runs out of capacity or quota, so the errors are the real API's error
responses injected at the RunInstances call (a botocore `before-call` hook raising the
ClientError EC2 returns; for the per-code table, Stubber `add_client_error`): the
AWSCloud, its cleanup and `provision_with_failover` all run for real against moto.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from launcher.catalog.offer import Offer
from launcher.clouds.aws.errors import classify, to_cloud_error
from launcher.clouds.aws.session import ClientFactory
from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionFailedError,
    ProvisionRequest,
    QuotaError,
)
from launcher.errors import NoPlacementError
from launcher.optimizer.ranking import Blocked, Placement
from launcher.provisioning.failover import provision_with_failover
from launcher.state.db import StateDB
from launcher.task.resources import ResourceCandidate
from tests.clouds.aws.aws_fixtures import aws_env, factory, make_cloud  # noqa: F401

CODES = {
    CapacityError: ["InsufficientInstanceCapacity", "InsufficientHostCapacity",
                    "InsufficientCapacityOnHost", "Unsupported", "SpotMaxPriceTooLow",
                    "InsufficientFreeAddressesInSubnet"],
    QuotaError: ["VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "InstanceLimitExceeded",
                 "PlacementGroupLimitExceeded", "AddressLimitExceeded"],
    AuthError: ["AuthFailure", "UnauthorizedOperation", "ExpiredToken", "InvalidClientTokenId",
                "SignatureDoesNotMatch", "OptInRequired"],
    InvalidRequestError: ["InvalidAMIID.NotFound", "InvalidAMIID.Malformed",
                          "InvalidParameterValue", "InvalidParameterCombination"],
}


@pytest.mark.parametrize("cls,code", [(c, code) for c, codes in CODES.items() for code in codes])
def test_error_codes_map_to_typed_errors(cls: type, code: str) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x",
                       aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        stub.add_client_error("run_instances", service_error_code=code, service_message="m")
        with pytest.raises(ClientError) as raised:
            ec2.run_instances(ImageId="ami-1", MinCount=1, MaxCount=1)
    typed = to_cloud_error(raised.value, region="us-east-1", zone="use1-az1")
    assert type(typed) is cls and code in str(typed)
    assert typed is not None and typed.region == "us-east-1" and typed.cloud == "aws"
    assert classify(code) is cls


def test_sdk_errors_are_typed() -> None:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    assert isinstance(to_cloud_error(NoCredentialsError()), AuthError)
    assert isinstance(to_cloud_error(EndpointConnectionError(endpoint_url="http://x"),
                                     region="r"), CloudError)
    assert to_cloud_error(ValueError("not ours")) is None


# ---- through provision_with_failover ------------------------------------------------


@dataclass
class FakeTask:
    name: str | None = "t"
    num_nodes: int = 2
    config: Any = None


@dataclass
class Plan:
    placements: list[Placement]
    enabled: list[bool]


def _placement(cloud: str, region: str, zone: str | None) -> Placement:
    offer = Offer(cloud=cloud, region=region, zone=zone, instance_type="g5.xlarge",
                  accelerator="A10G", accelerator_count=1, accelerator_memory_gib=24, vcpus=4,
                  memory_gib=16, price=1.0, spot_price=None, fabric=None, fabric_gbps=None,
                  nvlink=None, max_nodes=None, arch="x86_64", source="test",
                  fetched_at="2026-01-01")
    return Placement(cloud=cloud, region=region, zone=zone, instance_type="g5.xlarge",
                     accelerator="A10G", accelerator_count=1, num_nodes=2, use_spot=False,
                     node_price=1.0, hourly_cost=2.0, total_cost=None, fabric=None,
                     fabric_gbps=None, offer=offer,
                     candidate=ResourceCandidate(accelerator="A10G", accelerator_count=1))


def plan_over(placements: list[Placement]) -> Any:
    def plan(task: object, blocked: Blocked) -> Plan:
        out = [p for p in placements if p.cloud not in blocked.clouds
               and (p.cloud, p.region) not in blocked.regions
               and (p.cloud, p.region, p.zone or "") not in blocked.zones]
        if not out:
            raise NoPlacementError("nothing left")
        return Plan(out, [True] * len(out))
    return plan


def inject(clients: ClientFactory, region: str, code: str,
           zones: set[str] | None = None) -> list[str]:
    """Make RunInstances in `region` answer EC2's `code` error (only in AZ names `zones`,
    when given). Returns the list of AZs the calls were refused in."""
    refused: list[str] = []

    def params(params: dict[str, Any], **_: Any) -> None:
        zone = params.get("Placement", {}).get("AvailabilityZone", "")
        if zones is None or zone in zones:
            refused.append(zone)
            raise ClientError({"Error": {"Code": code, "Message": f"injected {code}"}},
                              "RunInstances")

    clients.ec2(region).meta.events.register("provide-client-params.ec2.RunInstances", params)
    return refused


def _live(region: str) -> list[str]:
    ec2 = boto3.client("ec2", region_name=region)
    resp = ec2.describe_instances(Filters=[{"Name": "instance-state-name",
                                            "Values": ["pending", "running"]}])
    return [i["InstanceId"] for r in resp["Reservations"] for i in r["Instances"]]


class OtherCloud:
    """The next cloud after AWS (stands in for local/ssh)."""

    name = "ssh"

    def check(self) -> CredentialStatus:
        return CredentialStatus(True)

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        return ClusterInfo(req.cluster_name, "ssh", req.region, None, req.instance_type, False,
                           (NodeInfo(0, "h0", "10.0.0.1"), NodeInfo(1, "h1", "10.0.0.2")))

    def query(self, cluster: str) -> dict[str, NodeState]:
        return {}

    def terminate(self, cluster: str) -> None:
        return None


def test_capacity_in_two_zones_then_the_third(factory: ClientFactory) -> None:  # noqa: F811
    aws = make_cloud(factory)
    refused = inject(factory, "us-east-1", "InsufficientInstanceCapacity",
                     zones={"us-east-1a", "us-east-1b"})
    plan = plan_over([_placement("aws", "us-east-1", z) for z in ("use1-az6", "use1-az1",
                                                                  "use1-az2")])
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "ice", db, plan_fn=plan,
                                      cloud_fn={"aws": aws}.__getitem__)
    assert refused == ["us-east-1a", "us-east-1b"]
    assert [(a.zone, a.error_type) for a in got.attempts] == [
        ("use1-az6", "CapacityError"), ("use1-az1", "CapacityError")]
    assert got.placement.zone == "use1-az2" and got.cluster.zone == "use1-az2"
    assert sorted(_live("us-east-1")) == sorted(n.node_id for n in got.cluster.nodes)


def test_vcpu_quota_moves_to_the_next_region(factory: ClientFactory) -> None:  # noqa: F811
    aws = make_cloud(factory)
    inject(factory, "us-east-1", "VcpuLimitExceeded")
    plan = plan_over([_placement("aws", "us-east-1", "use1-az6"),
                      _placement("aws", "us-east-1", "use1-az1"),
                      _placement("aws", "us-west-2", None)])
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "quota", db, plan_fn=plan,
                                      cloud_fn={"aws": aws}.__getitem__)
    assert [(a.region, a.error_type) for a in got.attempts] == [("us-east-1", "QuotaError")]
    assert got.cluster.region == "us-west-2"
    assert _live("us-east-1") == [] and len(_live("us-west-2")) == 2


def test_auth_failure_moves_to_the_next_cloud(factory: ClientFactory) -> None:  # noqa: F811
    aws = make_cloud(factory)
    inject(factory, "us-east-1", "AuthFailure")
    plan = plan_over([_placement("aws", "us-east-1", "use1-az6"),
                      _placement("aws", "us-west-2", None), _placement("ssh", "lab", None)])
    with StateDB() as db:
        got = provision_with_failover(FakeTask(), "auth", db, plan_fn=plan,
                                      cloud_fn={"aws": aws, "ssh": OtherCloud()}.__getitem__)
    assert [(a.cloud, a.error_type) for a in got.attempts] == [("aws", "AuthError")]
    assert got.cluster.cloud == "ssh"
    assert _live("us-west-2") == []  # the aws region after it was never tried


def test_invalid_ami_stops_at_once(factory: ClientFactory) -> None:  # noqa: F811
    aws = make_cloud(factory)
    inject(factory, "us-east-1", "InvalidAMIID.NotFound")
    plan = plan_over([_placement("aws", "us-east-1", "use1-az6"),
                      _placement("aws", "us-west-2", None)])
    with StateDB() as db, pytest.raises(ProvisionFailedError) as err:
        provision_with_failover(FakeTask(), "ami", db, plan_fn=plan,
                                cloud_fn={"aws": aws}.__getitem__)
    assert [a.error_type for a in err.value.attempts] == ["InvalidRequestError"]
    assert _live("us-west-2") == []
