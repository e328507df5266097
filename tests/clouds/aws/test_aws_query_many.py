"""AWSCloud.query_many against moto: the views of many clusters with one DescribeInstances
per region (the managed-jobs controller's batched poll), the same answers as `query`;
throttling is a typed RateLimitedError."""

from __future__ import annotations

import boto3
import pytest

from launcher.clouds.aws.cloud import AWSCloud
from launcher.clouds.aws.errors import classify
from launcher.clouds.base import NodeState, RateLimitedError, query_many
from tests.clouds.aws.aws_fixtures import (  # noqa: F401  (fixtures)
    CallCounter,
    FakeWaiter,
    aws_env,
    cloud,
    factory,
    mark_preempted,
    request,
    waiter,
)


def test_many_clusters_one_describe_per_region(cloud: AWSCloud, factory) -> None:  # noqa: F811
    east = [cloud.provision(request(f"e{i}", use_spot=True)) for i in range(4)]
    west = cloud.provision(request("w0", region="us-west-2", zone=None))
    mark_preempted("us-east-1", east[1].nodes[1].node_id)
    boto3.client("ec2", region_name="us-east-1").terminate_instances(
        InstanceIds=[east[2].nodes[0].node_id])
    names = [*(c.cluster_name for c in east), "w0"]
    singly = {n: cloud.query(n) for n in names}
    counters = {r: CallCounter(factory.ec2(r)) for r in ("us-east-1", "us-west-2")}
    views = query_many(cloud, names, "us-east-1")
    assert views == singly  # the same answers as one query per cluster
    assert views["e1"][east[1].nodes[1].node_id] is NodeState.PREEMPTED
    assert views["e2"][east[2].nodes[0].node_id] is NodeState.TERMINATED
    assert set(views["w0"].values()) == {NodeState.RUNNING} and len(views["w0"]) == 2
    assert west.region == "us-west-2"
    # 5 clusters, 10 instances: one call per region, not one per cluster
    assert [c.calls for c in counters.values()] == [["DescribeInstances"]] * 2


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "Throttling"])
def test_throttling_is_a_rate_limited_error(code: str) -> None:
    assert classify(code) is RateLimitedError
