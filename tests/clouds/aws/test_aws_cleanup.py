"""`launcher clouds cleanup aws`: the region's key pair and shared security group, which
`down` never deletes, are deleted on demand, except while something uses them.

A real launch (moto's server, sshd bodies) creates them; while the cluster lives they
are kept, with the reason; after `down`, `--dryrun` lists them and the cleanup deletes
them (and the region's cache forgets them, so the next launch creates them again). A
cluster recorded in the state DB keeps its region's pieces even with no instance yet;
a group or key pair launcher did not create (untagged) is never listed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.api import clusters as api
from launcher.api.cleanup import DELETED, KEPT, WOULD_DELETE, cleanup_leftovers
from launcher.api.launch import launch
from launcher.clouds.aws import records
from launcher.task.model import Task
from tests import netns
from tests.aws_moto import REGION, AWSFake

REPO = Path(__file__).resolve().parents[3]
RESOURCES = {"cloud": "aws", "region": REGION, "instance_type": "m6i.large"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, timeout=120, cwd=REPO, stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})


def _shared(fake: AWSFake) -> tuple[list[str], list[str]]:
    """(launcher key pair names, launcher shared group ids) in REGION."""
    ec2 = fake.client("ec2")
    pairs = [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]
             if any(t["Key"] == "launcher" for t in k.get("Tags", []))]
    groups = [g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]
              if {"Key": "launcher", "Value": "shared"} in g.get("Tags", [])]
    return pairs, groups


@pytest.mark.netns
@pytest.mark.skipif(netns.unavailable_reason() is not None,
                    reason=f"sshd nodes unavailable: {netns.unavailable_reason()}")
def test_after_launch_and_down_cleanup_deletes_the_key_pair_and_group(
        aws_cloud: AWSFake, tmp_path: Path) -> None:
    task = Task.from_dict({"name": "c", "resources": RESOURCES, "run": "echo hi"})
    try:
        assert launch(task, "cleanme").exit_code == 0
        pairs, groups = _shared(aws_cloud)
        assert len(pairs) == 1 and len(groups) == 1
        # the cluster lives: both are kept, and the CLI says why
        report = cleanup_leftovers("aws", REGION)
        assert [i.action for i in report.items] == [KEPT, KEPT]
        assert all("used by instance(s) i-" in i.reason for i in report.items), report
        assert _shared(aws_cloud) == (pairs, groups)
    finally:
        api.down("cleanme")
    out = _cli("clouds", "cleanup", "aws", "--region", REGION, "--dryrun")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out
    assert f"would delete: key pair {pairs[0]} in {REGION}" in out.stdout
    assert f"would delete: security group launcher ({groups[0]}" in out.stdout
    assert _shared(aws_cloud) == (pairs, groups)  # a dry run deletes nothing
    refused = _cli("clouds", "cleanup", "aws", "--region", REGION)  # no -y, no terminal
    assert refused.returncode != 0 and "pass -y" in refused.stderr
    assert _shared(aws_cloud) == (pairs, groups)
    out = _cli("clouds", "cleanup", "aws", "--region", REGION, "-y", "--json")
    assert out.returncode == 0, out
    doc = json.loads(out.stdout)
    assert sorted((i["kind"], i["action"]) for i in doc["items"]) == [
        ("key pair", DELETED), ("security group", DELETED)]
    assert _shared(aws_cloud) == ([], [])
    cache = records.region_cache(REGION)
    assert not cache.get("key_pairs") and groups[0] not in (cache.get("security_groups")
                                                            or {}).values()
    # the next launch in the region creates them again
    try:
        assert launch(task, "again").exit_code == 0
        assert [len(x) for x in _shared(aws_cloud)] == [1, 1]
    finally:
        api.down("again")


def test_a_cluster_in_the_state_db_keeps_its_region_and_untagged_pieces_are_ignored(
        aws_moto: AWSFake, launcher_home: Path) -> None:
    from launcher.clouds.aws.cloud import AWSCloud
    from launcher.clouds.aws.network import ensure_key_pair, ensure_security_group, find_vpc
    from launcher.config.settings import load_config
    from launcher.runtime.keys import ensure_user_key
    from launcher.state.db import PlacementRecord, StateDB

    ec2 = aws_moto.client("ec2")
    settings = load_config().aws
    vpc = find_vpc(ec2, REGION, settings)
    ensure_key_pair(ec2, REGION, ensure_user_key().public_key())
    ensure_security_group(ec2, REGION, vpc, settings)
    mine = ec2.create_security_group(GroupName="my-own", VpcId=vpc, Description="not ours")
    ec2.import_key_pair(KeyName="launcher-lookalike",  # launcher's name, but not its tag
                        PublicKeyMaterial=ensure_user_key().public_key().encode())
    with StateDB() as db:  # a launch that recorded its cluster, before any instance
        db.create_cluster("starting", PlacementRecord(
            cloud="aws", region=REGION, zone=None, instance_type="m6i.large", num_nodes=1,
            use_spot=False, accelerator=None, accelerator_count=0, hourly_cost=0.1))
    report = cleanup_leftovers("aws", REGION)
    assert sorted((i.kind, i.action) for i in report.items) == [
        ("key pair", KEPT), ("security group", KEPT)]
    assert all(i.reason == "cluster(s) starting (INIT) on aws in us-east-1"
               for i in report.items)
    with StateDB() as db:
        db.delete_cluster("starting")
    assert [i.action for i in cleanup_leftovers("aws", REGION, dryrun=True).items] == [
        WOULD_DELETE, WOULD_DELETE]
    # everywhere (no --region): the recorded regions and the catalog's, in parallel
    everywhere = AWSCloud(regions=lambda: ["us-east-1", "us-west-2"]).list_leftovers()
    assert sorted(i.kind for i in everywhere) == ["key pair", "security group"]
    report = cleanup_leftovers("aws", REGION)
    assert [i.action for i in report.items] == [DELETED, DELETED]
    left = {g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"]}
    assert "my-own" in left and "launcher" not in left and mine["GroupId"]
    assert [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]] == ["launcher-lookalike"]
    assert cleanup_leftovers("aws", REGION).note == f"no leftovers of aws in {REGION}."
