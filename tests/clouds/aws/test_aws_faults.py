"""Zero leaks: a fault at every step of the provision path, against moto.

The steps are the EC2 calls a first 2-node spot provision with `ports` makes in an
unprepared region (recorded from a clean run: 19 calls), plus the node waiter (SSH
wait). Each step fails in turn, in two ways: the API's error (a ClientError raised
from a botocore hook at that call) and Ctrl-C (KeyboardInterrupt at that call). After
provision raises, and again after `terminate()`, moto must hold no pending/running
instance, no Elastic IP and no security group of the cluster. 20 steps x 2 faults = 40
runs. (Placement groups and EIPs of the EFA path: test_aws_efa.py, on recorded
responses, 6 steps.)
"""

from __future__ import annotations

import shutil
from collections import Counter
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from launcher.clouds.aws.session import ClientFactory
from launcher.clouds.aws.tags import CLUSTER_TAG
from launcher.clouds.base import ClusterInfo
from launcher.config.settings import launcher_home
from tests.clouds.aws.aws_fixtures import FakeWaiter, make_cloud, request, seeded_moto

WAITER_STEP = ("node-waiter", 1)


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


class Fault:
    def __init__(self, step: tuple[str, int], kind: str) -> None:
        self.step, self.kind = step, kind
        self.seen: Counter[str] = Counter()
        self.fired = False

    def hook(self, model: Any) -> None:
        self.seen[model.name] += 1
        if not self.fired and (model.name, self.seen[model.name]) == self.step:
            self.fired = True
            self.raise_()

    def raise_(self) -> None:
        if self.kind == "ctrl-c":
            raise KeyboardInterrupt
        raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}},
                          self.step[0])


class FailingWaiter(FakeWaiter):
    def __init__(self, fault: Fault) -> None:
        super().__init__()
        self.fault = fault

    def __call__(self, info: ClusterInfo, deadline: float) -> ClusterInfo:
        if self.fault.step == WAITER_STEP:
            self.fault.fired = True
            self.fault.raise_()
        return super().__call__(info, deadline)


def _leaks(ec2: Any, cluster: str) -> list[str]:
    tag = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}]
    live = ec2.describe_instances(Filters=[*tag, {"Name": "instance-state-name",
                                                  "Values": ["pending", "running"]}])
    out = [i["InstanceId"] for r in live["Reservations"] for i in r["Instances"]]
    out += [a["PublicIp"] for a in ec2.describe_addresses(Filters=tag)["Addresses"]]
    out += [g["GroupId"] for g in ec2.describe_security_groups(Filters=tag)["SecurityGroups"]]
    return out


def _unprepare(ec2: Any) -> None:
    """Make the region unprepared again: no cache, no key pair, no shared group."""
    shutil.rmtree(launcher_home() / "aws", ignore_errors=True)
    for pair in ec2.describe_key_pairs()["KeyPairs"]:
        ec2.delete_key_pair(KeyName=pair["KeyName"])
    for group in ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": ["launcher"]}])["SecurityGroups"]:
        ec2.delete_security_group(GroupId=group["GroupId"])


class Hooks:
    """One set of botocore hooks on the factory's clients (clients are costly to make):
    they record the calls, and fire the current fault."""

    def __init__(self, factory: ClientFactory) -> None:
        self.calls: list[str] = []
        self.fault: Fault | None = None
        for service in ("ec2", "ssm"):
            factory.client(service, "us-east-1").meta.events.register(
                f"before-call.{service}.*", self._on)

    def _on(self, model: Any, **kw: Any) -> None:
        self.calls.append(model.name)
        if self.fault is not None:
            self.fault.hook(model)


def test_fault_at_every_step_leaks_nothing(creds: None) -> None:
    with seeded_moto():
        # made inside moto (its botocore hook is installed at import) and reused throughout
        factory = ClientFactory()
        hooks = Hooks(factory)
        check = boto3.client("ec2", region_name="us-east-1")
        make_cloud(factory).provision(request("probe", use_spot=True, ports=("8080",)))
    seen: Counter[str] = Counter()
    steps = []
    for name in hooks.calls:
        seen[name] += 1
        steps.append((name, seen[name]))
    steps.append(WAITER_STEP)
    assert len(steps) == 20 and ("GetParameter", 1) in steps and ("RunInstances", 1) in steps
    assert ("CreateTags", 2) in steps
    tried = 0
    with seeded_moto():
        for step in steps:
            for kind in ("api-error", "ctrl-c"):
                _unprepare(check)
                fault = hooks.fault = Fault(step, kind)
                cloud = make_cloud(factory, FailingWaiter(fault))
                cluster = f"f{tried}"
                try:
                    cloud.provision(request(cluster, use_spot=True, ports=("8080",)))
                except (Exception, KeyboardInterrupt):
                    pass
                else:
                    raise AssertionError(f"no failure with a fault at {step} ({kind})")
                assert fault.fired, step
                assert _leaks(check, cluster) == [], (step, kind, "after provision")
                hooks.fault = None
                cloud.terminate(cluster)
                assert _leaks(check, cluster) == [], (step, kind, "after terminate")
                tried += 1
    assert tried == 40

