"""The RunInstances request of a gang, and waiting for it to run.

`LaunchPlan` is everything one gang launch decides; `run_instances_kwargs` turns it into
the EC2 request:
- `MinCount = MaxCount = num_nodes`: EC2 creates all or none, in the subnet's one AZ;
- `ClientToken` = the attempt's idempotency token (recorded in the state DB before the
  call): a retried or resumed call returns the same gang instead of a second one;
- `TagSpecifications` on the instances, their volumes and network interfaces (tags.py),
  applied atomically with creation;
- IMDSv2 required (`HttpTokens: required`, hop limit 2 so containers reach it);
- spot: `InstanceMarketOptions` one-time, terminate on interruption;
- EFA (`efa_interfaces` > 0): card 0 device 0 is an `efa` interface (EFA with ENA: the
  node's IP), every further network card gets one `efa-only` interface at device index
  0 (the AWS user guide's layout for P5: 32 cards, 32 EFA); EC2 refuses a public IP at
  launch with several interfaces, so those nodes get Elastic IPs instead (cloud.py);
- a cluster placement group when one is given; the root EBS volume sized by disk_size;
  the IAM instance profile from config.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from launcher.clouds.aws.errors import CLOUD, aws_errors, error_code
from launcher.clouds.aws.images import Image
from launcher.clouds.aws.network import RegionNetwork
from launcher.clouds.aws.tags import RANK_TAG, tag_specification
from launcher.clouds.aws.teardown import Sleep
from launcher.clouds.base import CapacityError, CloudError

# StateReason codes of instances EC2 ended for lack of capacity while pending
_CAPACITY_REASONS = ("Server.InsufficientInstanceCapacity", "Server.SpotInstanceTermination",
                     "Server.SpotInstanceShutdown")


@dataclass(frozen=True)
class LaunchPlan:
    cluster: str
    instance_type: str
    num_nodes: int
    use_spot: bool
    image: Image
    network: RegionNetwork
    tags: dict[str, str]
    extra_group_ids: tuple[str, ...] = ()
    disk_size_gb: int | None = None
    efa_interfaces: int = 0
    placement_group: str | None = None
    client_token: str | None = None
    iam_instance_profile: str | None = None
    public_ip: bool = True  # ask EC2 for a public IP (single-interface launches only)

    @property
    def multi_interface(self) -> bool:
        return self.efa_interfaces > 1


def network_interfaces(plan: LaunchPlan) -> list[dict[str, Any]]:
    """The NetworkInterfaces of the request (see the module docstring)."""
    groups = [plan.network.security_group_id, *plan.extra_group_ids]
    primary: dict[str, Any] = {
        "DeviceIndex": 0, "NetworkCardIndex": 0, "SubnetId": plan.network.subnet_id,
        "Groups": groups, "DeleteOnTermination": True,
    }
    if plan.efa_interfaces:
        primary["InterfaceType"] = "efa"
    if not plan.multi_interface:
        primary["AssociatePublicIpAddress"] = plan.public_ip
    out = [primary]
    for card in range(1, plan.efa_interfaces):
        out.append({"DeviceIndex": 0, "NetworkCardIndex": card, "SubnetId": plan.network.subnet_id,
                    "Groups": groups, "DeleteOnTermination": True, "InterfaceType": "efa-only"})
    return out


def run_instances_kwargs(plan: LaunchPlan) -> dict[str, Any]:
    """The keyword arguments of `ec2.run_instances` for `plan`."""
    kwargs: dict[str, Any] = {
        "ImageId": plan.image.image_id,
        "InstanceType": plan.instance_type,
        "MinCount": plan.num_nodes,
        "MaxCount": plan.num_nodes,
        "KeyName": plan.network.key_name,
        "NetworkInterfaces": network_interfaces(plan),
        "TagSpecifications": [tag_specification(t, plan.tags)
                              for t in ("instance", "volume", "network-interface")],
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 2,
                            "HttpEndpoint": "enabled"},
        # autostop shuts the node down from inside: that stops an on-demand node
        "InstanceInitiatedShutdownBehavior": "terminate" if plan.use_spot else "stop",
    }
    placement: dict[str, Any] = {"AvailabilityZone": plan.network.zone_name}
    if plan.placement_group:
        placement["GroupName"] = plan.placement_group
    kwargs["Placement"] = placement
    if plan.client_token:
        kwargs["ClientToken"] = plan.client_token[:64]
    if plan.disk_size_gb:
        kwargs["BlockDeviceMappings"] = [{
            "DeviceName": plan.image.root_device_name,
            "Ebs": {"VolumeSize": int(plan.disk_size_gb), "VolumeType": "gp3",
                    "DeleteOnTermination": True},
        }]
    if plan.use_spot:
        kwargs["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time",
                            "InstanceInterruptionBehavior": "terminate"},
        }
    if plan.iam_instance_profile:
        key = "Arn" if plan.iam_instance_profile.startswith("arn:") else "Name"
        kwargs["IamInstanceProfile"] = {key: plan.iam_instance_profile}
    return kwargs


def launch(ec2: Any, plan: LaunchPlan) -> list[str]:
    """RunInstances; the instance ids in launch-index (= rank) order."""
    region = plan.network.region
    with aws_errors(region=region, zone=plan.network.zone_id, action="run instances"):
        resp = ec2.run_instances(**run_instances_kwargs(plan))
    got = sorted(resp.get("Instances", []), key=lambda i: int(i.get("AmiLaunchIndex", 0)))
    return [str(i["InstanceId"]) for i in got]


def tag_ranks(ec2: Any, region: str, cluster: str, ids: list[str], *, deadline: float,
              poll: float, sleep: Sleep = time.sleep) -> None:
    """Tag each instance with its rank (and a per-node Name)."""
    for rank, iid in enumerate(ids):
        tags = [{"Key": RANK_TAG, "Value": str(rank)}, {"Key": "Name", "Value": f"{cluster}-{rank}"}]
        _until_visible(lambda iid=iid, tags=tags: ec2.create_tags(Resources=[iid], Tags=tags),
                       region=region, action="tag instances", deadline=deadline, poll=poll,
                       sleep=sleep)


def _until_visible(call: Any, *, region: str, action: str, deadline: float, poll: float,
                   sleep: Sleep, zone: str | None = None) -> Any:
    """`call()`, retried while EC2 does not know the new instances yet (its API is
    eventually consistent: InvalidInstanceID.NotFound right after RunInstances)."""
    while True:
        with aws_errors(region=region, zone=zone, action=action):
            try:
                return call()
            except Exception as exc:
                if error_code(exc) != "InvalidInstanceID.NotFound" or time.monotonic() >= deadline:
                    raise
        sleep(poll)


def wait_running(ec2: Any, region: str, zone: str | None, ids: list[str], *, deadline: float,
                 poll: float, sleep: Sleep = time.sleep) -> list[dict[str, Any]]:
    """Poll until every instance is `running`; their descriptions in `ids` order.

    Raises CapacityError when EC2 ended one while pending for capacity (spot), CloudError
    when one ended otherwise or the deadline passed."""
    order = {iid: n for n, iid in enumerate(ids)}
    while True:
        resp = _until_visible(lambda: ec2.describe_instances(InstanceIds=ids), region=region,
                              zone=zone, action="describe instances", deadline=deadline,
                              poll=poll, sleep=sleep)
        found = sorted((i for r in resp.get("Reservations", []) for i in r.get("Instances", [])),
                       key=lambda i: order.get(i["InstanceId"], 0))
        ended = [i for i in found if i["State"]["Name"] in ("shutting-down", "terminated",
                                                             "stopping", "stopped")]
        if ended:
            reason = (ended[0].get("StateReason") or {}).get("Code", "")
            cls = CapacityError if reason in _CAPACITY_REASONS else CloudError
            raise cls(f"{ended[0]['InstanceId']} ended while starting: "
                      f"{ended[0]['State']['Name']} ({reason or 'no reason given'}).",
                      cloud=CLOUD, region=region, zone=zone)
        if len(found) == len(ids) and all(i["State"]["Name"] == "running" for i in found):
            return found
        if time.monotonic() >= deadline:
            raise CloudError("Instances not running in time: "
                             + ", ".join(f"{i['InstanceId']}={i['State']['Name']}" for i in found),
                             cloud=CLOUD, region=region, zone=zone)
        sleep(poll)
