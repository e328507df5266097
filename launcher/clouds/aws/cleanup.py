"""The per-region pieces network.py creates once and shares, found and deleted on demand
(`launcher clouds cleanup aws`; `down` never deletes them).

- key pairs tagged `launcher=user-key` named `launcher-<fingerprint>`: in use while an
  instance (of any state but terminated) was launched with it;
- security groups tagged `launcher=shared` (the group `aws.security_group_name`, only
  when launcher created it: a group of yours with that name is never tagged): in use
  while an instance is in it (itself, or through a network interface). EC2 itself
  refuses to delete a group something else uses (a detached interface, another group's
  rule): that is reported as such.
After a delete, the region's cache (records.py) forgets the id, so the next launch
there creates the piece again. Every function is blocking and raises typed CloudErrors.
"""

from __future__ import annotations

from typing import Any

from launcher.clouds.aws import records
from launcher.clouds.aws.errors import CLOUD, aws_errors, error_code
from launcher.clouds.base import CloudError, Leftover

KEY_PAIR = "key pair"
SECURITY_GROUP = "security group"
NOT_TERMINATED = ("pending", "running", "shutting-down", "stopping", "stopped")


def _users(ec2: Any, region: str, name: str, values: list[str]) -> list[str]:
    """Ids of the region's not-terminated instances whose `name` filter matches one of
    `values`."""
    if not values:
        return []
    with aws_errors(region=region, action="describe instances"):
        pages = ec2.get_paginator("describe_instances").paginate(Filters=[
            {"Name": name, "Values": values},
            {"Name": "instance-state-name", "Values": list(NOT_TERMINATED)}])
        return sorted({str(i["InstanceId"]) for p in pages for r in p.get("Reservations", [])
                       for i in r.get("Instances", [])})


def _group_users(ec2: Any, region: str, group_id: str) -> list[str]:
    """The not-terminated instances in the group: listed with it, or attached to a
    network interface in it (a launch puts the groups on the interfaces)."""
    with aws_errors(region=region, action="describe network interfaces"):
        enis = ec2.describe_network_interfaces(
            Filters=[{"Name": "group-id", "Values": [group_id]}]).get("NetworkInterfaces", [])
    attached = sorted({str(e["Attachment"]["InstanceId"]) for e in enis
                       if (e.get("Attachment") or {}).get("InstanceId")})
    return sorted(set(_users(ec2, region, "instance.group-id", [group_id]))
                  | set(_users(ec2, region, "instance-id", attached)))


def _why(ids: list[str]) -> str | None:
    if not ids:
        return None
    more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
    return f"used by instance(s) {', '.join(ids[:3])}{more}"


def leftovers(ec2: Any, region: str) -> list[Leftover]:
    """The region's launcher-created key pairs and shared security groups."""
    out = []
    with aws_errors(region=region, action="describe key pairs"):
        pairs = ec2.describe_key_pairs(
            Filters=[{"Name": "tag:launcher", "Values": ["user-key"]}]).get("KeyPairs", [])
    for pair in pairs:
        name = str(pair["KeyName"])
        if name.startswith("launcher-"):
            out.append(Leftover(CLOUD, KEY_PAIR, name, name, region,
                                _why(_users(ec2, region, "key-name", [name]))))
    with aws_errors(region=region, action="describe security groups"):
        groups = ec2.describe_security_groups(
            Filters=[{"Name": "tag:launcher", "Values": ["shared"]}]).get("SecurityGroups", [])
    for group in groups:
        gid = str(group["GroupId"])
        out.append(Leftover(CLOUD, SECURITY_GROUP, f"{group['GroupName']} ({gid}, "
                            f"{group.get('VpcId', 'no VPC')})", gid, region,
                            _why(_group_users(ec2, region, gid))))
    return out


def delete(ec2: Any, item: Leftover) -> None:
    """Delete one leftover listed by `leftovers` and drop it from the region's cache."""
    region = str(item.region)
    if item.kind == KEY_PAIR:
        with aws_errors(region=region, action=f"delete key pair {item.id}"):
            ec2.delete_key_pair(KeyName=item.id)
        cache = records.region_cache(region)
        pairs = [k for k in cache.get("key_pairs") or [] if k != item.id]
        records.update_region_cache(region, key_pairs=pairs or None)
        return
    if item.kind != SECURITY_GROUP:
        raise CloudError(f"unknown leftover kind {item.kind!r}", cloud=CLOUD, region=region)
    try:
        with aws_errors(region=region, action=f"delete security group {item.id}"):
            ec2.delete_security_group(GroupId=item.id)
    except CloudError as exc:
        code = error_code(exc.__cause__) if exc.__cause__ is not None else ""
        if code == "InvalidGroup.NotFound":
            pass  # gone already
        elif code == "DependencyViolation":
            raise CloudError(f"security group {item.id} is still in use (by a network "
                             "interface or another group's rule): kept", cloud=CLOUD,
                             region=region) from None
        else:
            raise
    groups = {k: v for k, v in (records.region_cache(region).get("security_groups")
                                or {}).items() if v != item.id}
    records.update_region_cache(region, security_groups=groups or None)
