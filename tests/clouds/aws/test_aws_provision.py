"""AWSCloud.provision / query / terminate / stop / start / orphans against moto (in-process).

No VM exists behind moto's instances, so the node waiter is injected (FakeWaiter: pins
a fixed host key, contacts no address). moto ignores ClientToken and has no placement
groups: those are asserted on the request here and exercised with recorded responses in
test_aws_efa.py.
"""

from __future__ import annotations

import boto3
import pytest

from launcher.clouds.aws import records
from launcher.clouds.aws.cloud import AWSCloud
from launcher.clouds.aws.network import key_pair_name
from launcher.clouds.aws.tags import CLUSTER_TAG, RANK_TAG, USER_TAG, VERSION_TAG
from launcher.clouds.base import InvalidRequestError, NodeState
from launcher.config.settings import AWSSettings
from tests.clouds.aws.aws_fixtures import (  # noqa: F401  (fixtures)
    FAKE_HOST_KEY,
    CallCounter,
    FakeWaiter,
    aws_env,
    cloud,
    factory,
    make_cloud,
    mark_preempted,
    request,
    waiter,
)


def _tags(resource: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def _live(region: str = "us-east-1") -> list[dict]:
    ec2 = boto3.client("ec2", region_name=region)
    resp = ec2.describe_instances(Filters=[{"Name": "instance-state-name",
                                            "Values": ["pending", "running", "stopping",
                                                       "stopped"]}])
    return [i for r in resp["Reservations"] for i in r["Instances"]]


def test_provision_two_node_gang(cloud: AWSCloud, factory, waiter: FakeWaiter) -> None:  # noqa: F811
    seen: list[dict] = []
    ec2 = factory.ec2("us-east-1")
    ec2.meta.events.register("provide-client-params.ec2.RunInstances",
                             lambda params, **_: seen.append(dict(params)))
    info = cloud.provision(request("gang", disk_size_gb=123))
    assert [n.rank for n in info.nodes] == [0, 1]
    assert all(n.ssh_host_key == FAKE_HOST_KEY and n.ssh_user == "ubuntu" for n in info.nodes)
    assert all(n.external_ip for n in info.nodes)
    assert info.zone == "use1-az1" and info.region == "us-east-1"
    assert len(waiter.calls) == 1
    # the request: gang, token, IMDSv2, tags on instance/volume/ENI, disk on the root device
    (params,) = seen
    assert params["MinCount"] == params["MaxCount"] == 2
    assert params["ClientToken"] == "gang-token-1"
    assert params["MetadataOptions"]["HttpTokens"] == "required"
    assert params["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    assert {s["ResourceType"] for s in params["TagSpecifications"]} == {
        "instance", "volume", "network-interface"}
    assert params["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 123
    assert "InstanceMarketOptions" not in params
    # what moto holds
    insts = sorted(_live(), key=lambda i: i["AmiLaunchIndex"])
    assert [i["InstanceId"] for i in insts] == [n.node_id for n in info.nodes]
    for rank, inst in enumerate(insts):
        tags = _tags(inst)
        assert tags[CLUSTER_TAG] == "gang" and tags[RANK_TAG] == str(rank)
        assert VERSION_TAG in tags and USER_TAG in tags
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        assert inst["Placement"]["AvailabilityZone"] == "us-east-1b"  # use1-az1 in moto
        assert inst["KeyName"] == key_pair_name(request().ssh_public_key or "")
    vol = boto3.client("ec2", region_name="us-east-1").describe_volumes(
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": ["gang"]}])["Volumes"]
    assert vol and all(v["Size"] == 123 for v in vol)
    assert records.cluster_regions("gang") == ["us-east-1"]
    aws_dir = records.aws_dir()
    assert aws_dir.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in aws_dir.rglob("*.json"))
    assert cloud.query("gang") == {n.node_id: NodeState.RUNNING for n in info.nodes}


def test_subnet_follows_the_zone_id(cloud: AWSCloud) -> None:  # noqa: F811
    ec2 = boto3.client("ec2", region_name="us-east-1")
    zones = {z["ZoneId"]: z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    for zone_id in ("use1-az6", "use1-az4"):
        info = cloud.provision(request(f"z-{zone_id}", zone=zone_id, num_nodes=1))
        (inst,) = [i for i in _live() if i["InstanceId"] == info.head.node_id]
        subnet = ec2.describe_subnets(SubnetIds=[inst["SubnetId"]])["Subnets"][0]
        assert subnet["AvailabilityZone"] == zones[zone_id] == inst["Placement"]["AvailabilityZone"]


def test_second_launch_in_a_prepared_region_is_cheap(cloud: AWSCloud, factory) -> None:  # noqa: F811
    counter = CallCounter(factory.ec2("us-east-1"))
    cloud.provision(request("first"))
    first = list(counter.calls)
    counter.calls.clear()
    cloud.provision(request("second"))
    second = list(counter.calls)
    assert "ImportKeyPair" in first and "CreateSecurityGroup" in first
    assert "ImportKeyPair" not in second and "CreateSecurityGroup" not in second
    assert len(second) <= 10, second
    ec2 = boto3.client("ec2", region_name="us-east-1")
    assert len(ec2.describe_key_pairs()["KeyPairs"]) == 1
    groups = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["launcher"]}])
    assert len(groups["SecurityGroups"]) == 1
    # a fresh process (no cache) finds the key pair and the group instead of recreating them
    records.clear_region_cache("us-east-1")
    counter.calls.clear()
    cloud.provision(request("third"))
    assert "DescribeKeyPairs" in counter.calls
    assert "ImportKeyPair" not in counter.calls and "CreateSecurityGroup" not in counter.calls


def test_shared_group_rules_ssh_and_self(cloud: AWSCloud) -> None:  # noqa: F811
    cloud.provision(request("rules", num_nodes=1))
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (group,) = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": ["launcher"]}])["SecurityGroups"]
    gid = group["GroupId"]
    assert any(p.get("FromPort") == 22 and p["IpRanges"][0]["CidrIp"] == "0.0.0.0/0"
               for p in group["IpPermissions"])
    for perms in (group["IpPermissions"], group["IpPermissionsEgress"]):
        assert any(p["IpProtocol"] == "-1" and any(g["GroupId"] == gid
                                                   for g in p.get("UserIdGroupPairs", []))
                   for p in perms)


def test_spot_request_and_preemption_seen_by_query(cloud: AWSCloud) -> None:  # noqa: F811
    info = cloud.provision(request("spot", use_spot=True))
    insts = {i["InstanceId"]: i for i in _live()}
    assert all(insts[n.node_id].get("InstanceLifecycle") == "spot" for n in info.nodes)
    mark_preempted("us-east-1", info.nodes[1].node_id)
    view = cloud.query("spot")
    assert view == {info.nodes[0].node_id: NodeState.RUNNING,
                    info.nodes[1].node_id: NodeState.PREEMPTED}


def test_query_user_terminated_and_vanished_nodes(cloud: AWSCloud) -> None:  # noqa: F811
    info = cloud.provision(request("q"))
    boto3.client("ec2", region_name="us-east-1").terminate_instances(
        InstanceIds=[info.nodes[0].node_id])
    # an id EC2 no longer lists (records outlive EC2's ~1 h of terminated instances)
    region, ids = records.recorded_instances("q") or ("", [])
    records.set_instances("q", region, [*ids, "i-0000000000000dead"])
    view = cloud.query("q")
    assert view[info.nodes[0].node_id] is NodeState.TERMINATED
    assert view[info.nodes[1].node_id] is NodeState.RUNNING
    assert view["i-0000000000000dead"] is NodeState.TERMINATED


def test_ports_group_created_and_deleted(cloud: AWSCloud) -> None:  # noqa: F811
    info = cloud.provision(request("ports", num_nodes=1, ports=("8080", "9000-9010")))
    ec2 = boto3.client("ec2", region_name="us-east-1")
    groups = ec2.describe_security_groups(
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": ["ports"]}])["SecurityGroups"]
    assert len(groups) == 1
    ranges = {(p["FromPort"], p["ToPort"]) for p in groups[0]["IpPermissions"]}
    assert ranges == {(8080, 8080), (9000, 9010)}
    (inst,) = [i for i in _live() if i["InstanceId"] == info.head.node_id]
    nic_groups = {g["GroupId"] for n in inst["NetworkInterfaces"] for g in n["Groups"]}
    assert groups[0]["GroupId"] in nic_groups
    cloud.terminate("ports")
    assert not ec2.describe_security_groups(
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": ["ports"]}])["SecurityGroups"]


def test_terminate_waits_and_is_idempotent(cloud: AWSCloud, factory) -> None:  # noqa: F811
    cloud.provision(request("t"))
    counter = CallCounter(factory.ec2("us-east-1"))
    cloud.terminate("t")
    assert "TerminateInstances" in counter.calls
    assert counter.calls.index("TerminateInstances") < len(counter.calls) - 1
    assert not [i for i in _live() if _tags(i).get(CLUSTER_TAG) == "t"]
    assert records.cluster_regions("t") is None
    cloud.terminate("t")  # no record: scans the catalog regions, finds nothing
    assert set(cloud.query("t").values()) <= {NodeState.TERMINATED}


def test_terminate_without_a_record_scans_regions(cloud: AWSCloud) -> None:  # noqa: F811
    info = cloud.provision(request("lost", region="us-west-2", zone=None, num_nodes=1))
    assert info.zone and info.zone.startswith("usw2-")
    records.drop_cluster("lost")  # e.g. a launch killed before the record was kept
    cloud.terminate("lost")
    assert not _live("us-west-2")


def test_stop_and_start(factory, waiter: FakeWaiter) -> None:  # noqa: F811
    aws = make_cloud(factory, waiter)
    info = aws.provision(request("s"))
    aws.stop("s")
    assert set(aws.query("s").values()) == {NodeState.STOPPED}
    started = aws.start("s")
    assert [n.node_id for n in started.nodes] == [n.node_id for n in info.nodes]
    assert all(n.ssh_host_key == FAKE_HOST_KEY for n in started.nodes)
    assert started.zone == "use1-az1" and len(waiter.calls) == 2
    assert set(aws.query("s").values()) == {NodeState.RUNNING}


def test_spot_cannot_stop(cloud: AWSCloud) -> None:  # noqa: F811
    cloud.provision(request("sp", use_spot=True, num_nodes=1))
    with pytest.raises(InvalidRequestError):
        cloud.stop("sp")


def test_orphans_listed_across_regions(cloud: AWSCloud) -> None:  # noqa: F811
    a = cloud.provision(request("a", num_nodes=2))
    b = cloud.provision(request("b", region="us-west-2", zone=None, num_nodes=1))
    records.drop_cluster("b")
    tagged = cloud.list_tagged_clusters()
    assert tagged == {"a": sorted(n.node_id for n in a.nodes), "b": [b.head.node_id]}
    cloud.terminate("a")
    assert cloud.list_tagged_clusters() == {"b": [b.head.node_id]}


def test_every_tagged_kind_is_listed_and_an_orphan_with_no_instance_is_removed(
        cloud: AWSCloud) -> None:  # noqa: F811
    """A cluster killed after its security group, placement group or Elastic IP was made
    and before any instance (and whose record is gone): the resource scan lists each
    kind, and terminate (`down --orphan`) finds and deletes them with no record."""
    from launcher.clouds.aws.tags import cluster_tags, tag_specification
    from launcher.clouds.base import INSTANCE, TaggedResource

    kept = cloud.provision(request("kept", num_nodes=1, ports=("8080",)))
    ec2 = boto3.client("ec2", region_name="us-west-2")
    tags = cluster_tags("lost")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    sg = ec2.create_security_group(
        GroupName="launcher-lost-ports", Description="x", VpcId=vpc,
        TagSpecifications=[tag_specification("security-group", tags)])["GroupId"]
    ec2.create_placement_group(GroupName="launcher-lost", Strategy="cluster",
                               TagSpecifications=[tag_specification("placement-group", tags)])
    eip = ec2.allocate_address(Domain="vpc", TagSpecifications=[
        tag_specification("elastic-ip", tags)])["AllocationId"]
    vol = ec2.create_volume(AvailabilityZone="us-west-2a", Size=8, TagSpecifications=[
        tag_specification("volume", tags)])["VolumeId"]
    found = cloud.list_tagged_resources()
    assert found["lost"] == sorted([
        TaggedResource("Elastic IP", eip), TaggedResource("placement group", "launcher-lost"),
        TaggedResource("security group", sg), TaggedResource("volume", vol)],
        key=lambda r: (r.kind, r.id))
    assert {r.kind for r in found["kept"]} == {INSTANCE, "security group"}
    assert TaggedResource(INSTANCE, kept.head.node_id) in found["kept"]
    assert "lost" not in cloud.list_tagged_clusters()  # the instance-only view misses it
    assert records.cluster_regions("lost") is None
    cloud.terminate("lost")
    assert "lost" not in cloud.list_tagged_resources()
    assert ec2.describe_placement_groups()["PlacementGroups"] == []
    cloud.terminate("kept")
    assert cloud.list_tagged_resources() == {}


def test_internal_ips_and_config(factory) -> None:  # noqa: F811
    settings = AWSSettings(use_internal_ips=True, ssh_user="ec2-user",
                           iam_instance_profile="my-role")
    seen: list[dict] = []
    boto3.client("iam").create_instance_profile(InstanceProfileName="my-role")
    factory.ec2("us-east-1").meta.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **_: seen.append(dict(params)))
    aws = make_cloud(factory, settings=settings)
    info = aws.provision(request("internal", num_nodes=1))
    assert info.head.external_ip is None and info.head.ssh_user == "ec2-user"
    assert seen[0]["IamInstanceProfile"] == {"Name": "my-role"}
    assert seen[0]["NetworkInterfaces"][0]["AssociatePublicIpAddress"] is False


def test_named_vpc(factory) -> None:  # noqa: F811
    ec2 = boto3.client("ec2", region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
    ec2.create_tags(Resources=[vpc], Tags=[{"Key": "Name", "Value": "train"}])
    sub = ec2.create_subnet(VpcId=vpc, CidrBlock="10.77.1.0/24",
                            AvailabilityZone="us-east-1b")["Subnet"]["SubnetId"]
    aws = make_cloud(factory, settings=AWSSettings(vpc_name="train", use_internal_ips=True))
    info = aws.provision(request("v", num_nodes=2))
    assert [n.internal_ip for n in info.nodes] == ["10.77.1.4", "10.77.1.5"]
    assert {i["SubnetId"] for i in _live() if _tags(i).get(CLUSTER_TAG) == "v"} == {sub}
    with pytest.raises(InvalidRequestError):
        make_cloud(factory, settings=AWSSettings(vpc_name="nope")).provision(request("w"))


def test_image_override_and_unknown_ami(cloud: AWSCloud) -> None:  # noqa: F811
    ec2 = boto3.client("ec2", region_name="us-east-1")
    other = ec2.describe_images(Owners=["amazon"])["Images"][1]["ImageId"]
    info = cloud.provision(request("img", num_nodes=1, image_id=other))
    (inst,) = [i for i in _live() if i["InstanceId"] == info.head.node_id]
    assert inst["ImageId"] == other
    with pytest.raises(InvalidRequestError):
        cloud.provision(request("img2", num_nodes=1, image_id="ami-00000000deadbeef0"))
