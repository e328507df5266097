"""`AWSCloud`: the `aws` cloud on EC2 (the Cloud protocol, SupportsStop, SupportsOrphans,
SupportsResourceScan, SupportsCleanup).

provision (blocking, all or nothing): instance-type facts and image (images.py) -> the
region's key pair / security group / subnet (network.py, cached; the cluster's region
is recorded in records.py before the first call) -> per-cluster ports group,
placement group (EFA gangs) -> one RunInstances for the whole gang (provision.py) ->
rank tags -> wait for `running` -> Elastic IPs for multi-interface (EFA) nodes unless
`aws.use_internal_ips` -> the node waiter (default: nodes.wait_for_ssh: SSH up, host
keys pinned, cluster key installed). Any failure after the first create call deletes
what exists for the cluster in that region (teardown.py) before the error is raised.

terminate (idempotent, blocking): in every region recorded for the cluster (or, with
no record, every AWS region of the catalog where anything carries its tag: inventory.py)
terminate by tag, wait for `terminated`, release EIPs, delete detached volumes and
network interfaces, the placement group and the security groups; then drop the record. query: recorded instance ids (else the tag) -> NodeState; spot
instances ended by EC2 are PREEMPTED. stop/start: on-demand gangs only, EBS kept.
list_leftovers / delete_leftover: the shared key pairs and security groups (cleanup.py).

Tests inject `clients` (a ClientFactory), `node_waiter` (instead of real SSH) and
`regions` (the fallback region list); the product uses the real ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from launcher.clouds.aws import records
from launcher.clouds.aws.errors import CLOUD, aws_errors, error_code
from launcher.clouds.aws.images import TypeFacts, resolve_image, type_facts
from launcher.clouds.aws.inventory import PLACEMENT_GROUP, region_resources
from launcher.clouds.aws.network import (
    RegionNetwork,
    create_ports_group,
    forget_network,
    region_network,
)
from launcher.clouds.aws.nodes import NodeWaiter, wait_for_ssh
from launcher.clouds.aws.provision import LaunchPlan, launch, tag_ranks, wait_running
from launcher.clouds.aws.session import (
    ClientFactory,
    check_credentials,
    local_credentials_source,
)
from launcher.clouds.aws.tags import (
    CLUSTER_TAG,
    RANK_TAG,
    cluster_tags,
    tag_specification,
    tag_value,
)
from launcher.clouds.aws.teardown import LIVE_STATES, Sleep, instances, teardown_region, wait_states
from launcher.clouds.base import (
    CloudError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    Leftover,
    NodeInfo,
    NodeState,
    ProvisionRequest,
    TaggedResource,
)
from launcher.config.settings import AWSSettings, load_config

PREEMPTION_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")
# EC2 says an id cached in regions/<region>.json no longer exists: look up and retry once
_STALE_CACHE_CODES = ("InvalidKeyPair.NotFound", "InvalidGroup.NotFound",
                      "InvalidSubnetID.NotFound", "InvalidVpcID.NotFound")
_MAX_REGION_WORKERS = 8
CHECK_TTL_S = 60.0
_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Seconds. `poll`: between describe calls while waiting."""

    running: float = 900.0
    ssh: float = 900.0
    teardown: float = 900.0
    poll: float = 2.0


def node_state(instance: dict[str, Any]) -> NodeState:
    """EC2's view of one instance as a NodeState."""
    state = instance["State"]["Name"]
    if state == "pending":
        return NodeState.PENDING
    if state == "running":
        return NodeState.RUNNING
    if state in ("stopping", "stopped"):
        return NodeState.STOPPED
    if state in ("shutting-down", "terminated"):
        reason = (instance.get("StateReason") or {}).get("Code", "")
        if reason in PREEMPTION_REASONS or (
            instance.get("InstanceLifecycle") == "spot" and reason.startswith("Server.")
        ):
            return NodeState.PREEMPTED
        return NodeState.TERMINATED
    return NodeState.UNKNOWN


def _default_regions() -> list[str]:
    from launcher.catalog.query import locations

    return sorted(locations(CLOUD))


class AWSCloud:
    """See the module docstring. Constructing it imports no SDK."""

    name = CLOUD

    def __init__(self, *, clients: ClientFactory | None = None,
                 node_waiter: NodeWaiter | None = None,
                 regions: Callable[[], list[str]] | None = None,
                 settings: AWSSettings | None = None,
                 timeouts: Timeouts = Timeouts(), sleep: Sleep = time.sleep) -> None:
        self._clients = clients
        self._node_waiter: NodeWaiter = node_waiter or wait_for_ssh
        self._regions = regions or _default_regions
        self._settings = settings
        self._timeouts = timeouts
        self._sleep = sleep
        self._checked: tuple[float, CredentialStatus] | None = None

    # ---- plumbing ----

    @property
    def clients(self) -> ClientFactory:
        if self._clients is None:
            self._clients = ClientFactory()
        return self._clients

    def settings(self) -> AWSSettings:
        return self._settings or load_config().aws

    def _ec2(self, region: str) -> Any:
        with aws_errors(region=region, action="EC2 client"):
            return self.clients.ec2(region)

    # ---- Cloud ----

    def check(self) -> CredentialStatus:
        """Identity from `sts get-caller-identity`, or why not; no network (and no boto3
        import) when no credentials are configured. An STS answer is reused for
        CHECK_TTL_S (planning asks before every failover attempt). Never raises."""
        if local_credentials_source() is None:
            return check_credentials(self._clients)
        now = time.monotonic()
        if self._checked is not None and now - self._checked[0] < CHECK_TTL_S:
            return self._checked[1]
        status = check_credentials(self._clients)
        self._checked = (now, status)
        return status

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Create the gang (see the module docstring). Raises CapacityError, QuotaError,
        AuthError, InvalidRequestError or CloudError; nothing is left on failure."""
        from launcher.runtime.keys import ensure_user_key

        if req.num_nodes < 1:
            raise InvalidRequestError("num_nodes must be >= 1.", cloud=CLOUD, region=req.region)
        from launcher.task.config_section import apply_overrides

        # config.yaml's aws: section, with the task's own `config: {aws: ...}` keys over it
        settings = apply_overrides(self.settings(), req.settings.get("aws", {}))
        region = req.region
        # recorded before any call: `terminate` (which failover runs after every failed
        # attempt) then looks in this region only, instead of scanning every region
        records.add_cluster_region(req.cluster_name, region)
        user_key = ensure_user_key()
        public_key = req.ssh_public_key or user_key.public_key()
        ec2 = self._ec2(region)
        with aws_errors(region=region, action="SSM client"):
            ssm = self.clients.ssm(region)
        facts = type_facts(ec2, region, req.instance_type)
        image = resolve_image(ec2, ssm, region, facts, req.image_id)
        net = region_network(ec2, region, req.zone, settings, public_key)
        try:
            return self._create(ec2, req, settings, facts, image, net, user_key.private_path)
        except BaseException:
            with contextlib.suppress(Exception):
                self._teardown(ec2, region, req.cluster_name)
            raise

    def _create(self, ec2: Any, req: ProvisionRequest, settings: AWSSettings, facts: TypeFacts,
                image: Any, net: RegionNetwork, key_path: str) -> ClusterInfo:
        region, cluster = req.region, req.cluster_name
        tags = cluster_tags(cluster)
        extra_groups: tuple[str, ...] = ()
        if req.ports:
            extra_groups = (create_ports_group(ec2, region, net.vpc_id, cluster, req.ports, tags),)
        efa = facts.max_efa_interfaces > 0 and req.fabric == "efa"
        efa_count = min(facts.max_efa_interfaces, facts.max_network_cards) if efa else 0
        group = None
        if efa and req.num_nodes > 1:
            group = f"launcher-{cluster}"
            records.add_placement_group(cluster, region, group)
            self._create_placement_group(ec2, region, group, tags)
        plan = LaunchPlan(
            cluster=cluster, instance_type=req.instance_type, num_nodes=req.num_nodes,
            use_spot=req.use_spot, image=image, network=net, tags=tags,
            extra_group_ids=extra_groups, disk_size_gb=req.disk_size_gb,
            efa_interfaces=efa_count, placement_group=group,
            client_token=req.idempotency_token,
            iam_instance_profile=settings.iam_instance_profile,
            public_ip=not settings.use_internal_ips,
        )
        try:
            ids = launch(ec2, plan)
        except CloudError as err:
            if error_code(err.__cause__ or err) not in _STALE_CACHE_CODES:
                raise
            forget_network(region)
            fresh = region_network(ec2, region, req.zone, settings,
                                   req.ssh_public_key or _public_key(), use_cache=False)
            ids = launch(ec2, dataclasses.replace(plan, network=fresh))
        records.set_instances(cluster, region, ids)
        t = self._timeouts
        tag_ranks(ec2, region, cluster, ids, deadline=time.monotonic() + t.running, poll=t.poll,
                  sleep=self._sleep)
        described = wait_running(ec2, region, net.zone_id, ids,
                                 deadline=time.monotonic() + t.running, poll=t.poll,
                                 sleep=self._sleep)
        public = {}
        if plan.multi_interface and not settings.use_internal_ips:
            public = self._elastic_ips(ec2, region, described, tags)
        info = self._cluster_info(req, region, net.zone_id, described, settings, key_path, public)
        return self._node_waiter(info, time.monotonic() + t.ssh)

    def _create_placement_group(self, ec2: Any, region: str, name: str,
                                tags: dict[str, str]) -> None:
        with aws_errors(region=region, action="create placement group"):
            try:
                ec2.create_placement_group(
                    GroupName=name, Strategy="cluster",
                    TagSpecifications=[tag_specification("placement-group", tags)])
            except Exception as exc:
                if error_code(exc) != "InvalidPlacementGroup.Duplicate":  # an earlier attempt's
                    raise

    def _elastic_ips(self, ec2: Any, region: str, described: list[dict[str, Any]],
                     tags: dict[str, str]) -> dict[str, str]:
        """One Elastic IP per node on its primary interface (EC2 gives no public IP at
        launch to a multi-interface instance, and the client reaches every node)."""
        out = {}
        with aws_errors(region=region, action="Elastic IP"):
            for inst in described:
                primary = next(
                    n for n in inst.get("NetworkInterfaces", [])
                    if n.get("Attachment", {}).get("DeviceIndex", 0) == 0
                    and n.get("Attachment", {}).get("NetworkCardIndex", 0) == 0)
                alloc = ec2.allocate_address(
                    Domain="vpc", TagSpecifications=[tag_specification("elastic-ip", tags)])
                ec2.associate_address(AllocationId=alloc["AllocationId"],
                                      NetworkInterfaceId=primary["NetworkInterfaceId"])
                out[str(inst["InstanceId"])] = str(alloc["PublicIp"])
        return out

    def _cluster_info(self, req: ProvisionRequest | None, region: str, zone: str | None,
                      described: list[dict[str, Any]], settings: AWSSettings, key_path: str,
                      public: dict[str, str], *, cluster: str = "") -> ClusterInfo:
        nodes = []
        for rank, inst in enumerate(described):
            iid = str(inst["InstanceId"])
            external = None
            if not settings.use_internal_ips:
                external = public.get(iid) or inst.get("PublicIpAddress")
            nodes.append(NodeInfo(rank=rank, node_id=iid,
                                  internal_ip=str(inst["PrivateIpAddress"]),
                                  external_ip=external, ssh_user=settings.ssh_user))
        first = described[0]
        return ClusterInfo(
            cluster_name=req.cluster_name if req else cluster,
            cloud=CLOUD, region=region, zone=zone,
            instance_type=req.instance_type if req else str(first["InstanceType"]),
            use_spot=req.use_spot if req else first.get("InstanceLifecycle") == "spot",
            nodes=tuple(nodes), ssh_key_path=key_path,
        )

    def query(self, cluster: str) -> dict[str, NodeState]:
        """node id -> EC2's view. Recorded gang ids (an id EC2 no longer lists is
        TERMINATED), else the cluster's tagged instances. Blocking; raises CloudError."""
        recorded = records.recorded_instances(cluster)
        if recorded:
            region, ids = recorded
            ec2 = self._ec2(region)
            found = {str(i["InstanceId"]): i for i in _describe_ids(ec2, region, ids)}
            return {iid: node_state(found[iid]) if iid in found else NodeState.TERMINATED
                    for iid in ids}
        out: dict[str, NodeState] = {}
        for insts in self._scan(cluster, states=()).values():
            for inst in insts:
                out[str(inst["InstanceId"])] = node_state(inst)
        return out

    def query_many(self, clusters: Sequence[str], region: str | None = None
                   ) -> dict[str, dict[str, NodeState]]:
        """`query` of many clusters (SupportsBatchQuery): their recorded gangs' ids, asked
        with one DescribeInstances per region (per page, and per 200 ids: EC2's limit on
        a filter's values) instead of one per cluster. A cluster with no recorded gang
        is asked alone (`query`). `region` changes nothing: each gang's own record says
        where it runs. Blocking; raises CloudError (RateLimitedError when throttled)."""
        out: dict[str, dict[str, NodeState]] = {}
        by_region: dict[str, list[tuple[str, list[str]]]] = {}
        for cluster in clusters:
            recorded = records.recorded_instances(cluster)
            if recorded:
                by_region.setdefault(recorded[0], []).append((cluster, recorded[1]))
            else:
                out[cluster] = self.query(cluster)
        for where, gangs in by_region.items():
            ids = [iid for _, gang in gangs for iid in gang]
            ec2 = self._ec2(where)
            found: dict[str, dict[str, Any]] = {}
            for i in range(0, len(ids), _IDS_PER_FILTER):
                found.update((str(d["InstanceId"]), d) for d in _describe_ids(
                    ec2, where, ids[i:i + _IDS_PER_FILTER]))
            for cluster, gang in gangs:
                out[cluster] = {iid: node_state(found[iid]) if iid in found
                                else NodeState.TERMINATED for iid in gang}
        return out

    def terminate(self, cluster: str) -> None:
        """Delete everything of `cluster` in every region it may have used; idempotent;
        waits until the instances are terminated. Raises CloudError (the record is kept
        then, so a retry looks in the same regions)."""
        regions = records.cluster_regions(cluster)
        groups: dict[str, list[str]] = {}
        if regions is None:  # no record (an orphan): wherever anything of it is tagged
            found = self._tagged_by_region(cluster)
            regions = sorted(found)
            groups = {r: [x.id for x in res if x.kind == PLACEMENT_GROUP]
                      for r, res in found.items()}
        errors = []
        for region in regions:
            try:
                self._teardown(self._ec2(region), region, cluster, groups.get(region, ()))
            except CloudError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        records.drop_cluster(cluster)

    def _teardown(self, ec2: Any, region: str, cluster: str,
                  placement_groups: Sequence[str] = ()) -> None:
        t = self._timeouts
        teardown_region(ec2, region, cluster, deadline=time.monotonic() + t.teardown,
                        poll=t.poll, sleep=self._sleep, placement_groups=placement_groups)

    # ---- SupportsStop ----

    def stop(self, cluster: str) -> None:
        """Stop every node (EBS kept). Blocking until stopped. Raises InvalidRequestError
        for spot nodes (EC2 cannot stop one-time spot instances), CloudError."""
        for region, insts in self._scan(cluster, ("pending", "running", "stopping", "stopped")).items():
            if any(i.get("InstanceLifecycle") == "spot" for i in insts):
                raise InvalidRequestError(f"Cluster {cluster!r} runs on spot instances, which "
                                          "cannot be stopped; use `launcher down`.",
                                          cloud=CLOUD, region=region)
            ec2 = self._ec2(region)
            ids = [str(i["InstanceId"]) for i in insts]
            with aws_errors(region=region, action="stop instances"):
                ec2.stop_instances(InstanceIds=ids)
            wait_states(ec2, region, ids, ("stopped",),
                        deadline=time.monotonic() + self._timeouts.teardown,
                        poll=self._timeouts.poll, sleep=self._sleep, what=f"{cluster} nodes")

    def start(self, cluster: str) -> ClusterInfo:
        """Start the stopped nodes; the ClusterInfo with their fresh IPs and re-pinned host
        keys. Blocking. Raises CloudError (InvalidRequestError when nothing is there)."""
        found = self._scan(cluster, ("pending", "running", "stopping", "stopped"))
        if not found:
            raise InvalidRequestError(f"Cluster {cluster!r} has no instance on AWS to start.",
                                      cloud=CLOUD)
        region, insts = next(iter(found.items()))
        ec2 = self._ec2(region)
        ids = [str(i["InstanceId"]) for i in _rank_sorted(insts)]
        wait_states(ec2, region, ids, ("stopped", "running"),
                    deadline=time.monotonic() + self._timeouts.teardown,
                    poll=self._timeouts.poll, sleep=self._sleep, what=f"{cluster} nodes")
        with aws_errors(region=region, action="start instances"):
            ec2.start_instances(InstanceIds=ids)
        t = self._timeouts
        described = wait_running(ec2, region, None, ids, deadline=time.monotonic() + t.running,
                                 poll=t.poll, sleep=self._sleep)
        from launcher.runtime.keys import ensure_user_key

        settings = self.settings()
        public = {}
        with aws_errors(region=region, action="describe addresses"):
            for addr in ec2.describe_addresses(
                    Filters=[{"Name": "instance-id", "Values": ids}]).get("Addresses", []):
                public[str(addr["InstanceId"])] = str(addr["PublicIp"])
        zone = _zone_id(ec2, region, described[0])
        info = self._cluster_info(None, region, zone, described, settings,
                                  ensure_user_key().private_path, public, cluster=cluster)
        return self._node_waiter(info, time.monotonic() + t.ssh)

    # ---- autostop ----

    def autostop_action(self, cluster: ClusterInfo, down: bool) -> str:
        """The head agent's autostop action for this cluster (autostop.py); sets each
        instance's shutdown behavior to stop, or terminate with `down`. Blocking.
        Raises InvalidRequestError (stop of a spot cluster), CloudError."""
        from launcher.clouds.aws.autostop import autostop_action

        return autostop_action(self._ec2(cluster.region), cluster, down, cluster.use_spot)

    # ---- SupportsOrphans ----

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster tag -> ids of its pending/running/stopping/stopped instances, over the
        recorded regions and the catalog's AWS regions. Raises CloudError."""
        regions = self._scan_regions()
        out: dict[str, list[str]] = {}
        states = ("pending", "running", "stopping", "stopped")

        def one(region: str) -> list[dict[str, Any]]:
            ec2 = self._ec2(region)
            with aws_errors(region=region, action="describe instances"):
                pages = ec2.get_paginator("describe_instances").paginate(Filters=[
                    {"Name": "tag-key", "Values": [CLUSTER_TAG]},
                    {"Name": "instance-state-name", "Values": list(states)}])
                return [i for p in pages for r in p.get("Reservations", [])
                        for i in r.get("Instances", [])]

        for insts in self._each_region(regions, one):
            for inst in insts:
                name = tag_value(inst, CLUSTER_TAG)
                if name:
                    out.setdefault(name, []).append(str(inst["InstanceId"]))
        return {k: sorted(v) for k, v in out.items()}

    # ---- SupportsResourceScan ----

    def list_tagged_resources(self) -> dict[str, list[TaggedResource]]:
        """cluster tag -> its tagged resources of every kind (inventory.py), over the
        recorded regions and the catalog's AWS regions. Raises CloudError."""
        out: dict[str, list[TaggedResource]] = {}
        for found in self._each_region(self._scan_regions(), self._region_inventory(None)):
            for cluster, res in found.items():
                out.setdefault(cluster, []).extend(res)
        return {k: sorted(v, key=lambda r: (r.kind, r.id)) for k, v in out.items()}

    def _tagged_by_region(self, cluster: str) -> dict[str, list[TaggedResource]]:
        """region -> `cluster`'s tagged resources there (regions with some only)."""
        regions = self._scan_regions()
        found = self._each_region(regions, self._region_inventory(cluster))
        return {r: f.get(cluster, []) for r, f in zip(regions, found, strict=True)
                if f.get(cluster)}

    def _region_inventory(self, cluster: str | None
                          ) -> Callable[[str], dict[str, list[TaggedResource]]]:
        return lambda region: region_resources(self._ec2(region), region, cluster)

    def _scan_regions(self) -> list[str]:
        return sorted({r for rs in records.recorded_clusters().values() for r in rs}
                      | set(self._regions()))

    # ---- SupportsCleanup ----

    def list_leftovers(self, region: str | None = None) -> list[Leftover]:
        """The launcher-created key pairs and shared security groups in `region` (None:
        the recorded regions and the catalog's AWS regions), in-use ones marked."""
        from launcher.clouds.aws import cleanup

        regions = [region] if region else sorted(
            set(records.recorded_regions()) | set(self._regions()))
        found = self._each_region(regions, lambda r: cleanup.leftovers(self._ec2(r), r))
        return [item for items in found for item in items]

    def delete_leftover(self, item: Leftover) -> None:
        from launcher.clouds.aws import cleanup

        cleanup.delete(self._ec2(str(item.region)), item)

    # ---- helpers ----

    def _each_region(self, regions: list[str], fn: Callable[[str], _T]) -> list[_T]:
        if not regions:
            return []
        with ThreadPoolExecutor(min(_MAX_REGION_WORKERS, len(regions))) as ex:
            return list(ex.map(fn, regions))

    def _scan(self, cluster: str, states: tuple[str, ...] = LIVE_STATES
              ) -> dict[str, list[dict[str, Any]]]:
        """region -> the cluster's instances in `states` (() = any), regions with some only."""
        regions = records.cluster_regions(cluster)
        if regions is None:
            regions = self._regions()
        found = self._each_region(
            regions, lambda r: _rank_sorted(instances(self._ec2(r), r, cluster, states)))
        return {r: insts for r, insts in zip(regions, found, strict=True) if insts}


def _public_key() -> str:
    from launcher.runtime.keys import ensure_user_key

    return ensure_user_key().public_key()


def _rank_sorted(insts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(i: dict[str, Any]) -> tuple[int, int, str]:
        rank = tag_value(i, RANK_TAG)
        return (int(rank) if rank and rank.isdigit() else 1 << 30,
                int(i.get("AmiLaunchIndex", 0)), str(i["InstanceId"]))
    return sorted(insts, key=key)


_IDS_PER_FILTER = 200  # EC2 takes at most 200 values per filter


def _describe_ids(ec2: Any, region: str, ids: list[str]) -> list[dict[str, Any]]:
    """Descriptions of those of `ids` EC2 still lists (a filter, unlike InstanceIds, does
    not fail on an id that is gone), every page."""
    out: list[dict[str, Any]] = []
    token: str | None = None
    with aws_errors(region=region, action="describe instances"):
        while True:
            resp = ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": ids}],
                                          **({"NextToken": token} if token else {}))
            out.extend(i for r in resp.get("Reservations", []) for i in r.get("Instances", []))
            token = resp.get("NextToken")
            if not token:
                return out


def _zone_id(ec2: Any, region: str, inst: dict[str, Any]) -> str | None:
    name = inst.get("Placement", {}).get("AvailabilityZone")
    zones = records.region_cache(region).get("zones") or {}
    for zid, zname in zones.items():
        if zname == name:
            return str(zid)
    from launcher.clouds.aws.network import zone_names

    for zid, zname in zone_names(ec2, region).items():
        if zname == name:
            return zid
    return None
