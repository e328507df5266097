"""Fixtures for the AWSCloud tests: moto in-process (`mock_aws`), its AMIs published
under the real SSM parameter names, and an AWSCloud whose node waiter does not SSH
(moto's instances have no bodies; their 172.31.x / 54.x addresses must never be
contacted from tests).

`mark_preempted(region, instance_id)` ends an instance in moto's backend the way EC2
reports a spot interruption (state terminated, StateReason Server.SpotInstanceTermination).
Import the fixtures into a test module with `from tests.clouds.aws.aws_fixtures import *`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import pytest

from launcher.clouds.aws.cloud import AWSCloud, Timeouts
from launcher.clouds.aws.images import (
    CPU_AMI_PARAMETER_ARM64,
    CPU_AMI_PARAMETER_X86_64,
    GPU_AMI_PARAMETER_ARM64,
    GPU_AMI_PARAMETER_X86_64,
)
from launcher.clouds.aws.session import ClientFactory
from launcher.clouds.base import ClusterInfo, ProvisionRequest
from launcher.config.settings import AWSSettings

REGIONS = ("us-east-1", "us-west-2")
FAKE_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeHostKeyForTests"


class FakeWaiter:
    """Stands in for nodes.wait_for_ssh: pins a fixed host key, contacts nothing."""

    def __init__(self) -> None:
        self.calls: list[ClusterInfo] = []

    def __call__(self, info: ClusterInfo, deadline: float) -> ClusterInfo:
        self.calls.append(info)
        nodes = tuple(dataclasses.replace(n, ssh_host_key=FAKE_HOST_KEY) for n in info.nodes)
        return dataclasses.replace(info, nodes=nodes)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's whole AWS in-process, with test credentials; default AMIs seeded in SSM."""
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE",
                "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with seeded_moto():
        yield


@contextlib.contextmanager
def seeded_moto() -> Iterator[None]:
    """A fresh in-process moto with the default-image SSM parameters published.

    With `MOTO_AMIS_PATH` set once moto's base AMI list is loaded (it is read at import),
    moto skips loading its per-region "latest" AMIs (thousands of images and snapshots,
    ~0.5 s per region and test)."""
    import moto.ec2.models.amis  # noqa: F401  (loads the base list before the variable is set)
    from moto import mock_aws

    from tests import moto_placement_groups

    moto_placement_groups.install()  # moto 5.2 has no placement groups

    saved = os.environ.get("MOTO_AMIS_PATH")
    os.environ["MOTO_AMIS_PATH"] = saved or "(base list already loaded)"
    try:
        with mock_aws():
            for region in REGIONS:
                ami = moto_amis(region)[0]
                for name in (GPU_AMI_PARAMETER_X86_64, GPU_AMI_PARAMETER_ARM64,
                             CPU_AMI_PARAMETER_X86_64, CPU_AMI_PARAMETER_ARM64):
                    seed_public_parameter(region, name, ami)
            yield
    finally:
        if saved is None:
            os.environ.pop("MOTO_AMIS_PATH", None)
        else:
            os.environ["MOTO_AMIS_PATH"] = saved


def moto_amis(region: str) -> list[str]:
    """Ids of the public AMIs moto's EC2 knows in `region` (no API call)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    return sorted(ec2_backends[DEFAULT_ACCOUNT_ID][region].amis)


def seed_public_parameter(region: str, name: str, value: str) -> None:
    """Publish an `/aws/service/...` parameter in moto's SSM (the API refuses the
    reserved prefix; moto seeds its own public AMI parameters like this)."""
    import datetime

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import Parameter, ssm_backends

    params = ssm_backends[DEFAULT_ACCOUNT_ID][region]._parameters
    params[name].append(Parameter(
        account_id=DEFAULT_ACCOUNT_ID, name=name, value=value, parameter_type="String",
        description=None, allowed_pattern=None, keyid=None,
        last_modified_date=datetime.datetime.now(datetime.UTC), version=1, data_type="text"))


@pytest.fixture
def waiter() -> FakeWaiter:
    return FakeWaiter()


@pytest.fixture
def factory(aws_env: None) -> ClientFactory:
    return ClientFactory()


def make_cloud(factory: ClientFactory, waiter: FakeWaiter | None = None,
               settings: AWSSettings | None = None) -> AWSCloud:
    return AWSCloud(clients=factory, node_waiter=waiter or FakeWaiter(),
                    regions=lambda: list(REGIONS), settings=settings or AWSSettings(),
                    timeouts=Timeouts(running=5, ssh=5, teardown=5, poll=0.01),
                    sleep=lambda _s: None)


@pytest.fixture
def cloud(factory: ClientFactory, waiter: FakeWaiter) -> AWSCloud:
    return make_cloud(factory, waiter)


def request(name: str = "c1", *, region: str = "us-east-1", zone: str | None = "use1-az1",
            instance_type: str = "g5.xlarge", num_nodes: int = 2, use_spot: bool = False,
            **kw: Any) -> ProvisionRequest:
    from launcher.runtime.keys import ensure_user_key

    return ProvisionRequest(cluster_name=name, cloud="aws", region=region, zone=zone,
                            instance_type=instance_type, num_nodes=num_nodes, use_spot=use_spot,
                            ssh_public_key=ensure_user_key().public_key(),
                            idempotency_token=f"{name}-token-1", **kw)


def mark_preempted(region: str, instance_id: str) -> None:
    """End `instance_id` in moto's backend as EC2 does on a spot interruption."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    inst = ec2_backends[DEFAULT_ACCOUNT_ID][region].get_instance(instance_id)
    inst._state.name = "terminated"
    inst._state.code = 48
    inst.state_reason = StateReason(
        "Server.SpotInstanceTermination: Spot instance termination",
        "Server.SpotInstanceTermination")


class CallCounter:
    """Counts the API calls a boto3 client makes (botocore `before-call` event)."""

    def __init__(self, client: Any) -> None:
        self.calls: list[str] = []
        client.meta.events.register("before-call.*.*", self._on)

    def _on(self, model: Any, **_: Any) -> None:
        self.calls.append(model.name)
