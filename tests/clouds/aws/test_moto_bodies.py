"""The fixture itself: moto instances get sshd bodies at their private IPs (no product code).

boto3 talks to moto as the product will; the nodes are real sshd in namespaces; login is
root with the private half of the imported key pair, as on a real VM after cloud-init.
"""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path

import paramiko
import pytest

from launcher.clouds.base import NodeInfo
from launcher.runtime.keys import generate_keypair
from launcher.runtime.ssh_runner import SSHRunner
from tests import netns
from tests.aws_moto import SPOT_TERMINATION, TEST_AMI, VPC_NAME, AWSFake
from tests.cloud_bodies import CloudBodies

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        netns.unavailable_reason() is not None,
        reason=f"sshd nodes unavailable: {netns.unavailable_reason()}",
    ),
]


def _ssh_hostname(ip: str, key_path: str) -> str:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    try:
        client.connect(ip, username="root", key_filename=key_path, timeout=5,
                       allow_agent=False, look_for_keys=False)
        _, out, _ = client.exec_command("hostname; hostname -I", timeout=5)
        return out.read().decode()
    finally:
        client.close()


def test_run_instances_get_bodies_at_their_private_ips(
    aws_cloud: AWSFake, tmp_path: Path
) -> None:
    assert aws_cloud.bodies is not None
    t0 = time.monotonic()
    ec2 = aws_cloud.client("ec2", "us-east-1")
    key = generate_keypair(tmp_path / "id_test", comment="t")
    ec2.import_key_pair(KeyName="launcher-test-key", PublicKeyMaterial=key.public_key().encode())
    vpc = ec2.describe_vpcs(Filters=[{"Name": "tag:Name", "Values": [VPC_NAME]}])["Vpcs"]
    assert [v["CidrBlock"] for v in vpc] == [aws_cloud.subnet]
    subnet = aws_cloud.subnets["us-east-1b"]
    first = ipaddress.ip_network(aws_cloud.subnet_cidrs["us-east-1b"]).network_address + 4

    resp = ec2.run_instances(
        ImageId=TEST_AMI, InstanceType="m6i.large", MinCount=2, MaxCount=2,
        KeyName="launcher-test-key", SubnetId=subnet,
    )
    ids = [i["InstanceId"] for i in resp["Instances"]]
    ips = [i["PrivateIpAddress"] for i in resp["Instances"]]
    assert ips == [str(first), str(first + 1)]  # moto: from subnet + 4, in order

    nodes = aws_cloud.bodies.wait_for(ids, timeout=5)
    assert [nodes[i].host for i in ids] == ips
    for ip in ips:
        out = _ssh_hostname(ip, key.private_path)
        assert out.split()[0] == "ip-" + ip.replace(".", "-") and ip in out.split()[1:]

    # the product's runner too (SSHRunner with a NodeInfo, host key pinned)
    node = nodes[ids[1]]
    runner = SSHRunner(
        NodeInfo(rank=1, node_id=ids[1], internal_ip=ips[1], ssh_user="root",
                 ssh_host_key=node.host_key),
        key_path=key.private_path,
    )
    try:
        result = runner.run("echo $(whoami)@$(hostname)", timeout=10)
        assert result.returncode == 0 and result.stdout.strip() == f"root@{node.hostname}"
    finally:
        runner.close()

    # a different key does not get in: only the key pair's key is authorized
    other = generate_keypair(tmp_path / "id_other", comment="o")
    with pytest.raises(paramiko.AuthenticationException):
        _ssh_hostname(ips[0], other.private_path)

    ec2.terminate_instances(InstanceIds=ids)
    aws_cloud.bodies.sync()
    assert aws_cloud.bodies.live_nodes() == {}
    assert all(n.destroyed for n in nodes.values())
    assert aws_cloud.leaks().empty(), aws_cloud.leaks()
    assert time.monotonic() - t0 < 5


def test_preempt_kills_the_body_and_reports_a_spot_termination(
    aws_cloud: AWSFake, tmp_path: Path
) -> None:
    assert aws_cloud.bodies is not None
    ec2 = aws_cloud.client("ec2", "us-east-1")
    key = generate_keypair(tmp_path / "id_test", comment="t")
    ec2.import_key_pair(KeyName="k", PublicKeyMaterial=key.public_key().encode())
    resp = ec2.run_instances(
        ImageId=TEST_AMI, InstanceType="m6i.large", MinCount=2, MaxCount=2, KeyName="k",
        SubnetId=aws_cloud.subnets["us-east-1a"],
        InstanceMarketOptions={"MarketType": "spot", "SpotOptions": {
            "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}},
    )
    ids = [i["InstanceId"] for i in resp["Instances"]]
    nodes = aws_cloud.bodies.wait_for(ids)
    assert aws_cloud.leaks().instances == ids or sorted(aws_cloud.leaks().instances) == sorted(ids)

    aws_cloud.preempt([ids[0]])
    assert nodes[ids[0]].destroyed and not nodes[ids[1]].destroyed
    desc = ec2.describe_instances(InstanceIds=[ids[0]])["Reservations"][0]["Instances"][0]
    assert desc["State"]["Name"] == "terminated"
    assert desc["StateReason"]["Code"] == SPOT_TERMINATION
    aws_cloud.bodies.sync()
    assert set(aws_cloud.bodies.live_nodes()) == {ids[1]}

    # stop keeps the disk: the started instance's body has the same /root and host key
    (nodes[ids[1]].home / "state.txt").write_text("kept")
    ec2.stop_instances(InstanceIds=[ids[1]])
    aws_cloud.bodies.sync()
    assert aws_cloud.bodies.live_nodes() == {}
    ec2.start_instances(InstanceIds=[ids[1]])
    again = aws_cloud.bodies.wait_for([ids[1]])[ids[1]]
    assert again is not nodes[ids[1]] and again.host == nodes[ids[1]].host
    assert again.host_key == nodes[ids[1]].host_key
    assert (again.home / "state.txt").read_text() == "kept"

    ec2.terminate_instances(InstanceIds=[ids[1]])
    aws_cloud.bodies.sync()
    assert aws_cloud.leaks().empty(), aws_cloud.leaks()


def test_an_instance_outside_the_lab_gets_no_body_and_fails_the_test(
    netns_lab: netns.NetnsLab,
) -> None:
    listed = [("i-out", "172.31.5.9", "ssh-ed25519 AAAA x"), ("i-none", None, None)]
    bodies = CloudBodies(netns_lab, lambda: listed, name="refuse").start()
    try:
        with pytest.raises(AssertionError, match="i-out.*172.31.5.9.*outside the lab"):
            bodies.sync()
        assert bodies.live_nodes() == {}
    finally:
        bodies.errors.clear()
        bodies.close()
    with pytest.raises(ValueError, match="not a node address"):
        netns_lab.start_node("10.9.9.9", authorized_key="ssh-ed25519 AAAA x")


def test_an_instance_in_a_default_vpc_anywhere_is_refused_a_body(
    aws_cloud: AWSFake,
) -> None:
    """The product must never be led to 172.31.x: an instance there (any region) fails
    the test instead of getting a body."""
    assert aws_cloud.bodies is not None
    ec2 = aws_cloud.client("ec2", "eu-west-1")
    default = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])
    subnet = default["Subnets"][0]["SubnetId"]
    (inst,) = ec2.run_instances(ImageId=TEST_AMI, MinCount=1, MaxCount=1, SubnetId=subnet)[
        "Instances"
    ]
    assert inst["PrivateIpAddress"].startswith("172.31.")
    try:
        with pytest.raises(AssertionError, match=f"{inst['InstanceId']}.*outside the lab"):
            aws_cloud.bodies.sync()
        assert aws_cloud.live_instances() == {
            "instances": 1, "eips": 0, "placement_groups": 0, "security_groups": 0, "nodes": 0,
        }
    finally:
        aws_cloud.bodies.errors.clear()  # expected here: the fixture's close would raise it


def test_connect_guard_sees_a_connect_outside_the_lab(netns_lab: netns.NetnsLab) -> None:
    import socket

    from tests.aws_moto import ConnectGuard

    with ConnectGuard(netns_lab.subnet) as guard:
        for host in ("172.31.5.9", netns_lab.gateway, "127.0.0.1"):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((host, 9))  # UDP: no packet leaves, the audit event fires
    assert guard.violations == ["172.31.5.9:9"]
