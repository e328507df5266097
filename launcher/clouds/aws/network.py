"""Per-region network pieces, created once and reused, and the per-cluster ones.

Shared per region (never deleted by launcher; found by name first, so concurrent
launches converge on one of each):
- the key pair `launcher-<fingerprint>`: the launcher user's public key, imported; a
  different key gets a different pair;
- the security group `aws.security_group_name` (default `launcher`) in the VPC:
  SSH (22) from `aws.ssh_cidr`, and all traffic from and to members of the group itself
  (ingress AND egress self-references: EFA's OS-bypass traffic needs both);
- the VPC: `aws.vpc_id`, else the VPC tagged Name=`aws.vpc_name`, else the default VPC;
  and per AZ the subnet of that VPC in the placement's zone (catalog zones are AZ ids
  like `use1-az4`: mapped to names with describe_availability_zones).
What was found is cached in `$LAUNCHER_HOME/aws/regions/<region>.json` (records.py), so
a second launch in a prepared region makes no lookup calls; `provision` drops the cache
and retries once when EC2 says a cached id no longer exists.

Per cluster: a security group `launcher-<cluster>-ports` opening `ports` to the world,
tagged with the cluster; deleted at teardown once the instances are gone.
Every function is blocking and raises typed CloudErrors (errors.py).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from launcher.clouds.aws import records
from launcher.clouds.aws.errors import CLOUD, aws_errors, error_code
from launcher.clouds.aws.tags import CLUSTER_TAG, tag_specification
from launcher.clouds.base import CapacityError, InvalidRequestError
from launcher.config.settings import AWSSettings


@dataclass(frozen=True)
class RegionNetwork:
    """Where a cluster's instances go in one region and AZ."""

    region: str
    vpc_id: str
    security_group_id: str
    key_name: str
    subnet_id: str
    zone_name: str
    zone_id: str


def key_pair_name(public_key: str) -> str:
    """`launcher-<16 hex of the key's SHA-256>`: one pair per distinct public key."""
    parts = public_key.split()
    body = parts[1] if len(parts) > 1 else public_key
    try:
        raw = base64.b64decode(body, validate=True)
    except ValueError:
        raw = body.encode()
    return f"launcher-{hashlib.sha256(raw).hexdigest()[:16]}"


def ensure_key_pair(ec2: Any, region: str, public_key: str) -> str:
    """The name of the region's key pair holding `public_key`, imported if missing."""
    name = key_pair_name(public_key)
    with aws_errors(region=region, action="key pair"):
        try:
            ec2.describe_key_pairs(KeyNames=[name])
            return name
        except Exception as exc:
            if error_code(exc) != "InvalidKeyPair.NotFound":
                raise
        try:
            ec2.import_key_pair(
                KeyName=name, PublicKeyMaterial=public_key.encode(),
                TagSpecifications=[{"ResourceType": "key-pair",
                                    "Tags": [{"Key": "launcher", "Value": "user-key"}]}],
            )
        except Exception as exc:
            if error_code(exc) != "InvalidKeyPair.Duplicate":  # a concurrent launch won
                raise
    return name


def find_vpc(ec2: Any, region: str, settings: AWSSettings) -> str:
    """The VPC id to use in `region` (see the module docstring). Raises
    InvalidRequestError when the configured VPC (or a default VPC) does not exist."""
    with aws_errors(region=region, action="VPC"):
        if settings.vpc_id:
            vpcs = ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [settings.vpc_id]}])
            what = f"aws.vpc_id {settings.vpc_id!r}"
        elif settings.vpc_name:
            vpcs = ec2.describe_vpcs(Filters=[{"Name": "tag:Name", "Values": [settings.vpc_name]}])
            what = f"a VPC named {settings.vpc_name!r} (aws.vpc_name)"
        else:
            vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])
            what = "a default VPC (set aws.vpc_name or aws.vpc_id in config.yaml)"
    found = [v["VpcId"] for v in vpcs.get("Vpcs", [])]
    if len(found) != 1:
        detail = "none" if not found else f"{len(found)}: {', '.join(found)}"
        raise InvalidRequestError(f"Region {region} has no single {what} (found {detail}).",
                                  cloud=CLOUD, region=region)
    return str(found[0])


def _self_rule(group_id: str) -> dict[str, Any]:
    return {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]}


def _has_self_rule(perms: list[dict[str, Any]], group_id: str) -> bool:
    return any(p.get("IpProtocol") == "-1"
               and any(g.get("GroupId") == group_id for g in p.get("UserIdGroupPairs", []))
               for p in perms)


def _has_ssh_rule(perms: list[dict[str, Any]], cidr: str) -> bool:
    return any(p.get("IpProtocol") in ("tcp", "6") and p.get("FromPort") == 22
               and p.get("ToPort") == 22
               and any(r.get("CidrIp") == cidr for r in p.get("IpRanges", []))
               for p in perms)


def ensure_security_group(ec2: Any, region: str, vpc_id: str, settings: AWSSettings) -> str:
    """The shared group's id in `vpc_id`, created and given its rules if missing."""
    name = settings.security_group_name
    with aws_errors(region=region, action="security group"):
        groups = ec2.describe_security_groups(Filters=[
            {"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "group-name", "Values": [name]}
        ]).get("SecurityGroups", [])
        if groups:
            group = groups[0]
        else:
            try:
                created = ec2.create_security_group(
                    GroupName=name, VpcId=vpc_id,
                    Description="launcher nodes: SSH in, all traffic within the group",
                    TagSpecifications=[{"ResourceType": "security-group",
                                        "Tags": [{"Key": "launcher", "Value": "shared"}]}],
                )
                group = {"GroupId": created["GroupId"], "IpPermissions": [],
                         "IpPermissionsEgress": []}
            except Exception as exc:
                if error_code(exc) != "InvalidGroup.Duplicate":
                    raise
                group = ec2.describe_security_groups(Filters=[
                    {"Name": "vpc-id", "Values": [vpc_id]},
                    {"Name": "group-name", "Values": [name]},
                ])["SecurityGroups"][0]
        gid = str(group["GroupId"])
        ingress = []
        if not _has_ssh_rule(group.get("IpPermissions", []), settings.ssh_cidr):
            ingress.append({"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
                            "IpRanges": [{"CidrIp": settings.ssh_cidr,
                                          "Description": "SSH (launcher)"}]})
        if not _has_self_rule(group.get("IpPermissions", []), gid):
            ingress.append(_self_rule(gid))
        if ingress:
            _authorize(ec2.authorize_security_group_ingress, gid, ingress)
        if not _has_self_rule(group.get("IpPermissionsEgress", []), gid):
            _authorize(ec2.authorize_security_group_egress, gid, [_self_rule(gid)])
    return gid


def _authorize(call: Any, group_id: str, perms: list[dict[str, Any]]) -> None:
    for perm in perms:  # one at a time: a duplicate (a concurrent launch) must not hide the rest
        try:
            call(GroupId=group_id, IpPermissions=[perm])
        except Exception as exc:
            if error_code(exc) != "InvalidPermission.Duplicate":
                raise


def zone_names(ec2: Any, region: str) -> dict[str, str]:
    """AZ id (`use1-az4`) -> AZ name (`us-east-1a`) of `region`."""
    with aws_errors(region=region, action="availability zones"):
        zones = ec2.describe_availability_zones(AllAvailabilityZones=False)
    return {str(z["ZoneId"]): str(z["ZoneName"]) for z in zones.get("AvailabilityZones", [])}


def pick_subnet(ec2: Any, region: str, vpc_id: str, zone_name: str | None) -> tuple[str, str]:
    """(subnet id, AZ name): the VPC's subnet in `zone_name` (any zone when None) - the
    AZ's default subnet first, then the one with most free addresses. Raises
    CapacityError when the VPC has no subnet in that AZ (another AZ may)."""
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}]
    if zone_name:
        filters.append({"Name": "availability-zone", "Values": [zone_name]})
    with aws_errors(region=region, action="subnets"):
        subnets = ec2.describe_subnets(Filters=filters).get("Subnets", [])
    if not subnets:
        raise CapacityError(f"VPC {vpc_id} has no subnet in {zone_name or region}.",
                            cloud=CLOUD, region=region, zone=zone_name)
    best = max(subnets, key=lambda s: (bool(s.get("DefaultForAz")),
                                       int(s.get("AvailableIpAddressCount", 0)),
                                       str(s["SubnetId"])))
    return str(best["SubnetId"]), str(best["AvailabilityZone"])


def region_network(ec2: Any, region: str, zone_id: str | None, settings: AWSSettings,
                   public_key: str, *, use_cache: bool = True) -> RegionNetwork:
    """Everything a launch needs in `region`/`zone_id`, from the cache when it has it.

    `use_cache=False` looks everything up again (and refreshes the cache)."""
    cache = records.region_cache(region) if use_cache else {}
    key_name = key_pair_name(public_key)
    updates: dict[str, Any] = {}
    if key_name not in cache.get("key_pairs", []):
        ensure_key_pair(ec2, region, public_key)
        updates["key_pairs"] = sorted({*cache.get("key_pairs", []), key_name})
    vpc_key = f"id:{settings.vpc_id}" if settings.vpc_id else (
        f"name:{settings.vpc_name}" if settings.vpc_name else "default")
    vpc_id = (cache.get("vpcs") or {}).get(vpc_key)
    if not vpc_id:
        vpc_id = find_vpc(ec2, region, settings)
        updates["vpcs"] = {**(cache.get("vpcs") or {}), vpc_key: vpc_id}
    sg_key = f"{vpc_id}/{settings.security_group_name}/{settings.ssh_cidr}"
    sg_id = (cache.get("security_groups") or {}).get(sg_key)
    if not sg_id:
        sg_id = ensure_security_group(ec2, region, vpc_id, settings)
        updates["security_groups"] = {**(cache.get("security_groups") or {}), sg_key: sg_id}
    zone_name: str | None = None
    zones: dict[str, str] = cache.get("zones") or {}
    if zone_id:
        if zone_id not in zones:
            zones = zone_names(ec2, region)
            updates["zones"] = zones
        zone_name = zones.get(zone_id)
        if zone_name is None:
            raise CapacityError(f"Zone {zone_id} is not available in {region} for this account.",
                                cloud=CLOUD, region=region, zone=zone_id)
    subnet_key = f"{vpc_id}/{zone_name or '*'}"
    hit = (cache.get("subnets") or {}).get(subnet_key)
    if hit:
        subnet_id, zone_name = hit
    else:
        subnet_id, zone_name = pick_subnet(ec2, region, vpc_id, zone_name)
        updates["subnets"] = {**(cache.get("subnets") or {}), subnet_key: [subnet_id, zone_name]}
    if not zone_id:
        if zone_name not in zones.values():
            zones = zone_names(ec2, region)
            updates["zones"] = zones
        zone_id = next((i for i, n in zones.items() if n == zone_name), zone_name)
    if updates:
        records.update_region_cache(region, **updates)
    return RegionNetwork(region=region, vpc_id=vpc_id, security_group_id=sg_id,
                         key_name=key_name, subnet_id=subnet_id, zone_name=zone_name,
                         zone_id=zone_id)


def forget_network(region: str) -> None:
    """Drop the region's cached ids (after EC2 said one of them no longer exists)."""
    records.update_region_cache(region, key_pairs=None, vpcs=None, security_groups=None,
                                subnets=None, zones=None)


# ---- per-cluster ports group ----------------------------------------------------------


def parse_ports(ports: tuple[str, ...]) -> list[tuple[int, int]]:
    """`("8080", "9000-9010")` -> [(8080, 8080), (9000, 9010)]. Raises InvalidRequestError."""
    out = []
    for spec in ports:
        lo, _, hi = str(spec).partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise InvalidRequestError(f"Invalid port {spec!r}: expected N or N-M.",
                                      cloud=CLOUD) from None
        if not (1 <= a <= b <= 65535):
            raise InvalidRequestError(f"Invalid port range {spec!r}.", cloud=CLOUD)
        out.append((a, b))
    return out


def ports_group_name(cluster: str) -> str:
    return f"launcher-{cluster}-ports"


def create_ports_group(ec2: Any, region: str, vpc_id: str, cluster: str,
                       ports: tuple[str, ...], tags: dict[str, str]) -> str:
    """Create the cluster's group opening `ports` (TCP) to 0.0.0.0/0; its id. A group of
    that name left by an earlier attempt of the same cluster is reused."""
    ranges = parse_ports(ports)
    name = ports_group_name(cluster)
    with aws_errors(region=region, action="ports security group"):
        try:
            gid = str(ec2.create_security_group(
                GroupName=name, VpcId=vpc_id, Description=f"launcher cluster {cluster}: ports",
                TagSpecifications=[tag_specification("security-group", tags)],
            )["GroupId"])
        except Exception as exc:
            if error_code(exc) != "InvalidGroup.Duplicate":
                raise
            gid = str(ec2.describe_security_groups(Filters=[
                {"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "group-name", "Values": [name]},
            ])["SecurityGroups"][0]["GroupId"])
        _authorize(ec2.authorize_security_group_ingress, gid, [
            {"IpProtocol": "tcp", "FromPort": a, "ToPort": b,
             "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": f"launcher {cluster}"}]}
            for a, b in ranges
        ])
    return gid


def cluster_groups(ec2: Any, region: str, cluster: str) -> list[str]:
    """Ids of the security groups tagged with `cluster` in `region`."""
    with aws_errors(region=region, action="security groups"):
        groups = ec2.describe_security_groups(
            Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}]
        ).get("SecurityGroups", [])
    return [str(g["GroupId"]) for g in groups]
