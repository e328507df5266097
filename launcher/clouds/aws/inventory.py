"""Everything launcher holds on EC2 under its cluster tag, by kind, in one region.

Kinds (tags.py puts `launcher-cluster` on each when it is created):
- instances (pending, running, stopping, stopped);
- security groups (the per-cluster `launcher-<cluster>-ports` group);
- placement groups (EFA gangs' `launcher-<cluster>`, strategy cluster);
- Elastic IPs (multi-interface nodes);
- volumes and network interfaces that are NOT attached to an instance (`available`):
  attached ones go with their instance (DeleteOnTermination), so only a detached one
  is a leftover of its own.

`region_resources` lists them (for the orphan scan and for a teardown with no record
of the cluster); `delete_detached` removes a cluster's detached volumes and network
interfaces (teardown, after its instances are gone). Blocking; raises typed CloudErrors
(errors.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from launcher.clouds.aws.errors import aws_errors, error_code
from launcher.clouds.aws.tags import CLUSTER_TAG, tag_value
from launcher.clouds.base import INSTANCE, TaggedResource

SECURITY_GROUP = "security group"
PLACEMENT_GROUP = "placement group"
ELASTIC_IP = "Elastic IP"
VOLUME = "volume"
NETWORK_INTERFACE = "network interface"
INSTANCE_STATES = ("pending", "running", "stopping", "stopped")

Found = dict[str, list[TaggedResource]]  # cluster -> its resources


def _tag_filter(cluster: str | None) -> dict[str, Any]:
    if cluster is None:
        return {"Name": "tag-key", "Values": [CLUSTER_TAG]}
    return {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}


def _paged(ec2: Any, op: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    if ec2.can_paginate(op):
        return [x for page in ec2.get_paginator(op).paginate(**kwargs)
                for x in page.get(key, [])]
    return list(getattr(ec2, op)(**kwargs).get(key, []))


def _add(out: Found, items: list[dict[str, Any]], kind: str,
         ident: Callable[[dict[str, Any]], str]) -> None:
    for item in items:
        name = tag_value(item, CLUSTER_TAG)
        if name:
            out.setdefault(name, []).append(TaggedResource(kind, ident(item)))


def region_resources(ec2: Any, region: str, cluster: str | None = None) -> Found:
    """cluster -> its tagged resources of every kind in `region` (only `cluster`'s when
    given). Raises CloudError."""
    tag = _tag_filter(cluster)
    out: Found = {}
    with aws_errors(region=region, action="describe instances"):
        reservations = _paged(ec2, "describe_instances", "Reservations", Filters=[
            tag, {"Name": "instance-state-name", "Values": list(INSTANCE_STATES)}])
    _add(out, [i for r in reservations for i in r.get("Instances", [])], INSTANCE,
         lambda i: str(i["InstanceId"]))
    with aws_errors(region=region, action="describe security groups"):
        groups = _paged(ec2, "describe_security_groups", "SecurityGroups", Filters=[tag])
    _add(out, groups, SECURITY_GROUP, lambda g: str(g["GroupId"]))
    with aws_errors(region=region, action="describe placement groups"):
        pgs = ec2.describe_placement_groups(Filters=[tag]).get("PlacementGroups", [])
    _add(out, [g for g in pgs if g.get("State") != "deleted"], PLACEMENT_GROUP,
         lambda g: str(g["GroupName"]))
    with aws_errors(region=region, action="describe addresses"):
        addrs = ec2.describe_addresses(Filters=[tag]).get("Addresses", [])
    _add(out, addrs, ELASTIC_IP, lambda a: str(a.get("AllocationId") or a.get("PublicIp")))
    detached = {"Name": "status", "Values": ["available"]}
    with aws_errors(region=region, action="describe volumes"):
        vols = _paged(ec2, "describe_volumes", "Volumes", Filters=[tag, detached])
    _add(out, vols, VOLUME, lambda v: str(v["VolumeId"]))
    with aws_errors(region=region, action="describe network interfaces"):
        enis = _paged(ec2, "describe_network_interfaces", "NetworkInterfaces",
                      Filters=[tag, detached])
    _add(out, enis, NETWORK_INTERFACE, lambda n: str(n["NetworkInterfaceId"]))
    return out


def delete_detached(ec2: Any, region: str, cluster: str) -> None:
    """Delete the cluster's tagged volumes and network interfaces that no instance holds
    (call once its instances are terminated). One already gone counts as deleted."""
    tag = _tag_filter(cluster)
    detached = {"Name": "status", "Values": ["available"]}
    with aws_errors(region=region, action="delete detached volumes"):
        for vol in _paged(ec2, "describe_volumes", "Volumes", Filters=[tag, detached]):
            try:
                ec2.delete_volume(VolumeId=vol["VolumeId"])
            except Exception as exc:
                if error_code(exc) != "InvalidVolume.NotFound":
                    raise
    with aws_errors(region=region, action="delete detached network interfaces"):
        for eni in _paged(ec2, "describe_network_interfaces", "NetworkInterfaces",
                          Filters=[tag, detached]):
            try:
                ec2.delete_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"])
            except Exception as exc:
                if error_code(exc) != "InvalidNetworkInterfaceID.NotFound":
                    raise
