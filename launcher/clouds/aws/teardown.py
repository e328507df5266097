"""Deleting what a cluster has in one region, in the order EC2 allows.

`teardown_region`: terminate every instance tagged with the cluster (any live state),
WAIT until EC2 reports them `terminated` (a placement group or a security group in use
cannot be deleted; an EIP of a live instance would be re-billed), then release the
cluster's Elastic IPs (by tag), delete its detached volumes and network interfaces (by
tag, inventory.py), its placement group (by the name recorded in records.py, EC2
deletes groups by name, and any other names the caller found by tag) and its security
groups (by tag). Idempotent:
a second call finds nothing and returns. Blocking up to `deadline`; raises CloudError
(typed) when EC2 refuses, or when the instances are not gone by the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from launcher.clouds.aws import records
from launcher.clouds.aws.errors import CLOUD, aws_errors, error_code
from launcher.clouds.aws.tags import cluster_filter
from launcher.clouds.base import CloudError

LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
Sleep = Callable[[float], None]


def instances(ec2: Any, region: str, cluster: str,
              states: tuple[str, ...] = LIVE_STATES) -> list[dict[str, Any]]:
    """EC2 descriptions of the cluster's instances in `region` in `states` (all pages)."""
    out: list[dict[str, Any]] = []
    filters = [cluster_filter(cluster)]
    if states:
        filters.append({"Name": "instance-state-name", "Values": list(states)})
    with aws_errors(region=region, action="describe instances"):
        token: str | None = None
        while True:
            page = ec2.describe_instances(Filters=filters, **({"NextToken": token} if token else {}))
            for res in page.get("Reservations", []):
                out.extend(res.get("Instances", []))
            token = page.get("NextToken")
            if not token:
                break
    return out


def wait_states(ec2: Any, region: str, ids: list[str], done: tuple[str, ...], *,
                deadline: float, poll: float, sleep: Sleep = time.sleep,
                what: str = "") -> list[dict[str, Any]]:
    """Poll until every instance in `ids` is in one of `done` (an id EC2 no longer lists
    counts as terminated). Returns their last descriptions. Raises CloudError at the
    deadline (monotonic clock)."""
    if not ids:
        return []
    while True:
        with aws_errors(region=region, action="describe instances"):
            try:
                resp = ec2.describe_instances(InstanceIds=ids)
            except Exception as exc:
                if error_code(exc) != "InvalidInstanceID.NotFound" or "terminated" not in done:
                    raise
                resp = {"Reservations": []}
        found = [i for r in resp.get("Reservations", []) for i in r.get("Instances", [])]
        if all(i["State"]["Name"] in done for i in found):
            return found
        if time.monotonic() >= deadline:
            states = ", ".join(f"{i['InstanceId']}={i['State']['Name']}" for i in found)
            raise CloudError(f"{what or 'instances'} not {'/'.join(done)} in time ({states}).",
                             cloud=CLOUD, region=region)
        sleep(poll)


def teardown_region(ec2: Any, region: str, cluster: str, *, deadline: float, poll: float,
                    sleep: Sleep = time.sleep, placement_groups: Sequence[str] = ()) -> None:
    """Delete everything of `cluster` in `region` (see the module docstring).
    `placement_groups`: names found by tag, deleted besides the recorded one."""
    from launcher.clouds.aws.inventory import delete_detached

    live = instances(ec2, region, cluster)
    ids = [str(i["InstanceId"]) for i in live]
    to_terminate = [str(i["InstanceId"]) for i in live if i["State"]["Name"] != "shutting-down"]
    if to_terminate:
        with aws_errors(region=region, action="terminate instances"):
            ec2.terminate_instances(InstanceIds=to_terminate)
    wait_states(ec2, region, ids, ("terminated",), deadline=deadline, poll=poll, sleep=sleep,
                what=f"instances of {cluster}")
    release_addresses(ec2, region, cluster)
    delete_detached(ec2, region, cluster)
    recorded = records.placement_groups(cluster).get(region)
    for group in dict.fromkeys([*([recorded] if recorded else []), *placement_groups]):
        with aws_errors(region=region, action="delete placement group"):
            try:
                ec2.delete_placement_group(GroupName=group)
            except Exception as exc:
                if error_code(exc) != "InvalidPlacementGroup.Unknown":
                    raise
    if recorded:
        records.drop_placement_group(cluster, region)
    delete_groups(ec2, region, cluster, deadline=deadline, poll=poll, sleep=sleep)


def release_addresses(ec2: Any, region: str, cluster: str) -> None:
    """Release every Elastic IP tagged with `cluster` in `region`."""
    with aws_errors(region=region, action="release addresses"):
        addrs = ec2.describe_addresses(Filters=[cluster_filter(cluster)]).get("Addresses", [])
        for addr in addrs:
            if addr.get("AssociationId"):
                try:
                    ec2.disassociate_address(AssociationId=addr["AssociationId"])
                except Exception as exc:
                    if error_code(exc) != "InvalidAssociationID.NotFound":
                        raise
            try:
                ec2.release_address(AllocationId=addr["AllocationId"])
            except Exception as exc:
                if error_code(exc) != "InvalidAllocationID.NotFound":
                    raise


def delete_groups(ec2: Any, region: str, cluster: str, *, deadline: float, poll: float,
                  sleep: Sleep = time.sleep) -> None:
    """Delete the security groups tagged with `cluster`; retried while EC2 still sees
    them in use (network interfaces of terminated instances linger a few seconds)."""
    from launcher.clouds.aws.network import cluster_groups

    for gid in cluster_groups(ec2, region, cluster):
        while True:
            with aws_errors(region=region, action=f"delete security group {gid}"):
                try:
                    ec2.delete_security_group(GroupId=gid)
                    break
                except Exception as exc:
                    code = error_code(exc)
                    if code == "InvalidGroup.NotFound":
                        break
                    if code != "DependencyViolation" or time.monotonic() >= deadline:
                        raise
            sleep(poll)
