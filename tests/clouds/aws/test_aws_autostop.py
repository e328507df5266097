"""Autostop on AWS (moto): the action powers the nodes off, EC2's shutdown behavior
decides stop vs terminate. The action's shell runs on real nodes only (not here)."""

from __future__ import annotations

import boto3
import pytest

from launcher.clouds.aws.cloud import AWSCloud
from launcher.clouds.base import InvalidRequestError
from launcher.runtime.agent_client import default_autostop_action
from tests.clouds.aws.aws_fixtures import aws_env, cloud, factory, request, waiter  # noqa: F401


def _behavior(iid: str) -> str:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    attr = ec2.describe_instance_attribute(InstanceId=iid,
                                           Attribute="instanceInitiatedShutdownBehavior")
    return str(attr["InstanceInitiatedShutdownBehavior"]["Value"])


def test_stop_and_down_set_the_shutdown_behavior(cloud: AWSCloud) -> None:  # noqa: F811
    info = cloud.provision(request("auto"))
    action = cloud.autostop_action(info, down=True)
    assert {_behavior(n.node_id) for n in info.nodes} == {"terminate"}
    worker = info.nodes[1]
    assert f"ubuntu@{worker.internal_ip}" in action
    assert "StrictHostKeyChecking=yes" in action and ".launcher/clusters/auto/known_hosts" in action
    assert action.endswith("wait; sudo shutdown -h now")
    cloud.autostop_action(info, down=False)
    assert {_behavior(n.node_id) for n in info.nodes} == {"stop"}


def test_spot_autostop_needs_down(cloud: AWSCloud) -> None:  # noqa: F811
    info = cloud.provision(request("autospot", use_spot=True, num_nodes=1))
    with pytest.raises(InvalidRequestError):
        cloud.autostop_action(info, down=False)
    assert cloud.autostop_action(info, down=True) == "sudo shutdown -h now"


def test_agent_client_asks_the_cloud(cloud: AWSCloud, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from launcher.clouds import registry

    info = cloud.provision(request("viaagent", num_nodes=1))
    monkeypatch.setattr(registry, "get_cloud", lambda name: cloud)
    assert default_autostop_action(info, down=False) == "sudo shutdown -h now"
    assert _behavior(info.head.node_id) == "stop"
