"""The EFA / cluster placement group / Elastic IP path, on recorded responses.

moto 5.2 does not implement placement groups (create/describe/delete raise "not
implemented"), so this path runs against a botocore Stubber: real boto3 clients whose
responses are recorded in the real API's shapes (Stubber validates every response and
request against the service model). The p5.48xlarge description is moto's copy of the
real describe_instance_types answer (32 network cards, MaximumEfaInterfaces 32).
"""

from __future__ import annotations

import datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from launcher.clouds.aws import records
from launcher.clouds.aws.cloud import AWSCloud, Timeouts
from launcher.clouds.aws.images import GPU_AMI_PARAMETER_X86_64
from launcher.clouds.aws.network import key_pair_name
from launcher.clouds.base import CapacityError
from launcher.config.settings import AWSSettings
from tests.clouds.aws.aws_fixtures import FakeWaiter, request
from tests.clouds.aws.ec2_pages import ZONES, _moto_resource

REGION = "us-east-1"
AMI = "ami-0123456789abcdef0"
VPC, SG, SUBNET = "vpc-0aaa", "sg-0bbb", "subnet-0ccc"
IDS = ("i-0000000000000000a", "i-0000000000000000b")
NOW = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.UTC)


class StubFactory:
    """A ClientFactory stand-in handing out Stubber-backed clients."""

    def __init__(self) -> None:
        kw: dict[str, Any] = {"region_name": REGION, "aws_access_key_id": "x",
                              "aws_secret_access_key": "x"}
        self.ec2_client = boto3.client("ec2", **kw)
        self.ssm_client = boto3.client("ssm", **kw)
        self.ec2_stub = Stubber(self.ec2_client)
        self.ssm_stub = Stubber(self.ssm_client)
        self.params: dict[str, list[dict[str, Any]]] = {}
        self.ec2_client.meta.events.register("provide-client-params.ec2.*", self._capture)

    def _capture(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.params.setdefault(model.name, []).append(dict(params))

    def ec2(self, region: str) -> Any:
        return self.ec2_client

    def ssm(self, region: str) -> Any:
        return self.ssm_client

    def client(self, service: str, region: str) -> Any:
        return self.ec2_client if service == "ec2" else self.ssm_client


def _instance(iid: str, index: int, state: str, code: int) -> dict[str, Any]:
    primary = {"NetworkInterfaceId": f"eni-{index:017x}", "PrivateIpAddress": f"10.0.0.{10 + index}",
               "Attachment": {"DeviceIndex": 0, "NetworkCardIndex": 0, "AttachmentId": f"a-{index}"},
               "InterfaceType": "efa"}
    others = [{"NetworkInterfaceId": f"eni-{index:09x}{card:08x}", "InterfaceType": "efa-only",
               "Attachment": {"DeviceIndex": 0, "NetworkCardIndex": card}} for card in range(1, 32)]
    return {"InstanceId": iid, "InstanceType": "p5.48xlarge", "AmiLaunchIndex": index,
            "State": {"Name": state, "Code": code}, "PrivateIpAddress": f"10.0.0.{10 + index}",
            "Placement": {"AvailabilityZone": "us-east-1d", "GroupName": "launcher-efa"},
            "NetworkInterfaces": [primary, *others], "LaunchTime": NOW,
            "Tags": [{"Key": "launcher-cluster", "Value": "efa"}]}


def queue_provision(f: StubFactory, *, fail: str | None = None) -> None:
    """The calls of a first p5.48xlarge x2 EFA provision in an unprepared region, in order;
    with `fail`, that call answers with an error and the queue stops there."""
    e, s = f.ec2_stub, f.ssm_stub
    p5 = _moto_resource("instance_types.json.gz")["p5.48xlarge"]
    steps: list[tuple[Any, str, dict[str, Any]]] = [
        (e, "describe_instance_types", {"InstanceTypes": [p5]}),
        (s, "get_parameter", {"Parameter": {"Name": GPU_AMI_PARAMETER_X86_64, "Value": AMI,
                                            "Type": "String", "Version": 1}}),
        (e, "describe_images", {"Images": [{"ImageId": AMI, "RootDeviceName": "/dev/sda1"}]}),
        (e, "describe_key_pairs", {"KeyPairs": [{"KeyName": "k"}]}),
        (e, "describe_vpcs", {"Vpcs": [{"VpcId": VPC, "IsDefault": True}]}),
        (e, "describe_security_groups", {"SecurityGroups": [{
            "GroupId": SG, "GroupName": "launcher", "VpcId": VPC,
            "IpPermissions": [
                {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
                 "IpRanges": [{"CidrIp": "0.0.0.0/0"}]},
                {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": SG}]}],
            "IpPermissionsEgress": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": SG}]}],
        }]}),
        (e, "describe_availability_zones", {"AvailabilityZones": [
            {"ZoneName": n, "ZoneId": z, "RegionName": REGION, "State": "available"}
            for n, z in ZONES[REGION].items()]}),
        (e, "describe_subnets", {"Subnets": [{"SubnetId": SUBNET, "VpcId": VPC,
                                              "AvailabilityZone": "us-east-1d",
                                              "DefaultForAz": True,
                                              "AvailableIpAddressCount": 4000}]}),
        (e, "create_placement_group", {"PlacementGroup": {"GroupName": "launcher-efa",
                                                          "Strategy": "cluster"}}),
        (e, "run_instances", {"Instances": [_instance(IDS[1], 1, "pending", 0),
                                            _instance(IDS[0], 0, "pending", 0)]}),
        (e, "create_tags", {}),
        (e, "create_tags", {}),
        (e, "describe_instances", {"Reservations": [{"Instances": [
            _instance(IDS[0], 0, "running", 16), _instance(IDS[1], 1, "running", 16)]}]}),
        (e, "allocate_address", {"AllocationId": "eipalloc-0", "PublicIp": "198.51.100.10"}),
        (e, "associate_address", {"AssociationId": "eipassoc-0"}),
        (e, "allocate_address", {"AllocationId": "eipalloc-1", "PublicIp": "198.51.100.11"}),
        (e, "associate_address", {"AssociationId": "eipassoc-1"}),
    ]
    for stub, method, response in steps:
        if method == fail:
            code = ("InsufficientInstanceCapacity" if method == "run_instances"
                    else "InternalError")
            stub.add_client_error(method, service_error_code=code, service_message="injected",
                                  http_status_code=500 if code == "InternalError" else 400)
            return
        stub.add_response(method, response)


def queue_teardown(f: StubFactory, *, instances: bool = True, eips: int = 2,
                   placement_group: bool = True) -> None:
    e = f.ec2_stub
    live = [_instance(IDS[0], 0, "running", 16), _instance(IDS[1], 1, "running", 16)]
    e.add_response("describe_instances", {"Reservations": [{"Instances": live}] if instances else []})
    if instances:
        e.add_response("terminate_instances", {"TerminatingInstances": []})
        e.add_response("describe_instances", {"Reservations": [{"Instances": [
            _instance(IDS[0], 0, "terminated", 48), _instance(IDS[1], 1, "terminated", 48)]}]})
    e.add_response("describe_addresses", {"Addresses": [
        {"AllocationId": f"eipalloc-{n}", "PublicIp": f"198.51.100.1{n}", "Domain": "vpc"}
        for n in range(eips)]})
    for _ in range(eips):
        e.add_response("release_address", {})
    e.add_response("describe_volumes", {"Volumes": []})  # none left detached
    e.add_response("describe_network_interfaces", {"NetworkInterfaces": []})
    if placement_group:
        e.add_response("delete_placement_group", {}, {"GroupName": "launcher-efa"})
    e.add_response("describe_security_groups", {"SecurityGroups": []})


def _cloud(f: StubFactory) -> AWSCloud:
    return AWSCloud(clients=f, node_waiter=FakeWaiter(),  # type: ignore[arg-type]
                    regions=lambda: [REGION], settings=AWSSettings(),
                    timeouts=Timeouts(running=5, ssh=5, teardown=5, poll=0.0),
                    sleep=lambda _s: None)


@pytest.fixture(autouse=True)
def _creds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")


def test_p5_gang_gets_32_efa_interfaces_a_placement_group_and_eips() -> None:
    f = StubFactory()
    queue_provision(f)
    with f.ec2_stub, f.ssm_stub:
        info = _cloud(f).provision(request("efa", zone="use1-az4", instance_type="p5.48xlarge",
                                           fabric="efa"))
        f.ec2_stub.assert_no_pending_responses()
    (run,) = f.params["RunInstances"]
    nics = run["NetworkInterfaces"]
    assert len(nics) == 32
    assert nics[0] == {"DeviceIndex": 0, "NetworkCardIndex": 0, "SubnetId": SUBNET,
                       "Groups": [SG], "DeleteOnTermination": True, "InterfaceType": "efa"}
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics[1:]] == [
        (card, 0, "efa-only") for card in range(1, 32)]
    assert not any("AssociatePublicIpAddress" in n for n in nics)  # refused with several NICs
    assert run["Placement"] == {"AvailabilityZone": "us-east-1d", "GroupName": "launcher-efa"}
    assert run["ClientToken"] == "efa-token-1"
    (pg,) = f.params["CreatePlacementGroup"]
    assert pg["Strategy"] == "cluster"
    assert pg["TagSpecifications"][0]["ResourceType"] == "placement-group"
    assert [a["NetworkInterfaceId"] for a in f.params["AssociateAddress"]] == [
        "eni-00000000000000000", "eni-00000000000000001"]
    assert [n.node_id for n in info.nodes] == list(IDS)  # rank = launch index
    assert [n.external_ip for n in info.nodes] == ["198.51.100.10", "198.51.100.11"]
    assert records.placement_groups("efa") == {REGION: "launcher-efa"}
    # teardown: terminate, wait, release the EIPs, delete the placement group
    f2 = StubFactory()
    queue_teardown(f2)
    with f2.ec2_stub:
        _cloud(f2).terminate("efa")
        f2.ec2_stub.assert_no_pending_responses()
    calls = [c for c in ("TerminateInstances", "ReleaseAddress", "DeletePlacementGroup")
             if c in f2.params]
    assert calls == ["TerminateInstances", "ReleaseAddress", "DeletePlacementGroup"]
    assert records.cluster_regions("efa") is None


STEPS = ("create_placement_group", "run_instances", "create_tags", "describe_instances",
         "allocate_address", "associate_address")


@pytest.mark.parametrize("fail", STEPS)
def test_fault_at_each_create_step_leaves_no_placement_group(fail: str) -> None:
    """A failure at each call after the first create call: provision cleans up (the
    placement group is deleted; EIPs released) and raises a typed error. 6 steps."""
    f = StubFactory()
    queue_provision(f, fail=fail)
    made_instances = STEPS.index(fail) > STEPS.index("run_instances")
    eips = {"associate_address": 1}.get(fail, 0)
    queue_teardown(f, instances=made_instances, eips=eips)
    with f.ec2_stub, f.ssm_stub, pytest.raises(Exception) as err:
        _cloud(f).provision(request("efa", zone="use1-az4", instance_type="p5.48xlarge",
                                    fabric="efa"))
    f.ec2_stub.assert_no_pending_responses()  # the whole teardown ran
    assert "DeletePlacementGroup" in f.params
    if fail == "run_instances":
        assert isinstance(err.value, CapacityError)
    assert records.placement_groups("efa") == {}


def test_key_pair_name_follows_the_key() -> None:
    a = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBm6mtr7Z3xnLbLbN3ZfFtP9v2qRQyRsOfrr4g5nI0pA a"
    b = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHt0cFvJ7oHcOItQyOvmQk3+Ki0y9bCbbfsnhZGJKoBx a"
    assert key_pair_name(a) == key_pair_name(a.replace(" a", " other-comment"))
    assert key_pair_name(a) != key_pair_name(b)


def test_new_instances_not_yet_visible_are_waited_for() -> None:
    """EC2 is eventually consistent: right after RunInstances, describe/tag calls may
    answer InvalidInstanceID.NotFound; the provision path retries them."""
    from launcher.clouds.aws.provision import tag_ranks, wait_running

    f = StubFactory()
    e = f.ec2_stub
    e.add_client_error("create_tags", service_error_code="InvalidInstanceID.NotFound")
    e.add_response("create_tags", {})
    e.add_response("create_tags", {})
    e.add_client_error("describe_instances", service_error_code="InvalidInstanceID.NotFound")
    e.add_response("describe_instances", {"Reservations": [{"Instances": [
        _instance(IDS[0], 0, "pending", 0), _instance(IDS[1], 1, "running", 16)]}]})
    e.add_response("describe_instances", {"Reservations": [{"Instances": [
        _instance(IDS[0], 0, "running", 16), _instance(IDS[1], 1, "running", 16)]}]})
    with e:
        tag_ranks(f.ec2_client, REGION, "efa", list(IDS), deadline=float("inf"), poll=0,
                  sleep=lambda _s: None)
        got = wait_running(f.ec2_client, REGION, None, list(IDS), deadline=float("inf"),
                           poll=0, sleep=lambda _s: None)
        e.assert_no_pending_responses()
    assert [i["InstanceId"] for i in got] == list(IDS)


def test_launch_killed_after_its_placement_group_then_status_refresh_deletes_it() -> None:
    """kill -9 of a launch after CreatePlacementGroup and before RunInstances (the EFA
    gang's window; moto has no placement groups, so on recorded responses). The launch
    runs in a forked child that dies (`os._exit`, no cleanup, like SIGKILL) when it is
    about to send RunInstances. `status --refresh` then finds no instance and must delete
    the placement group before it forgets the INIT cluster."""
    import os

    from launcher.api.clusters import status
    from launcher.state.db import PlacementRecord, StateDB

    with StateDB() as db:  # the launch records its INIT row before any cloud call
        db.create_cluster("efa", PlacementRecord("aws", REGION, "use1-az4", "p5.48xlarge", 2,
                                                 False))
    pid = os.fork()
    if pid == 0:  # the launch, killed at RunInstances
        try:
            f = StubFactory()
            queue_provision(f)
            f.ec2_client.meta.events.register("provide-client-params.ec2.RunInstances",
                                              lambda **_: os._exit(137))
            with f.ec2_stub, f.ssm_stub:
                _cloud(f).provision(request("efa", zone="use1-az4",
                                            instance_type="p5.48xlarge", fabric="efa"))
        finally:
            os._exit(1)  # never reached when the kill point was
    _, code = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(code) == 137
    assert records.placement_groups("efa") == {REGION: "launcher-efa"}  # made, then killed
    f = StubFactory()
    f.ec2_stub.add_response("describe_instances", {"Reservations": []})  # query: no node
    queue_teardown(f, instances=False, eips=0)
    aws = _cloud(f)
    with f.ec2_stub:
        notes: list[str] = []
        rows = status(refresh=True, cloud_fn=lambda _n: aws, notes=notes, orphan_clouds=[])
        f.ec2_stub.assert_no_pending_responses()  # the whole teardown ran
    assert rows == [] and f.params["DeletePlacementGroup"] == [{"GroupName": "launcher-efa"}]
    assert records.cluster_regions("efa") is None
    assert any(n.startswith("efa: no node is left on aws") for n in notes), notes
