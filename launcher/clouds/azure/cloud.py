"""`AzureCloud`: the `azure` cloud on Azure Resource Manager (Cloud, SupportsStop,
SupportsOrphans, SupportsResourceScan).

provision (blocking, all or nothing): record the resource group (records.py) -> create
it (tagged) -> NSG + vnet/subnet (network.py) -> for an InfiniBand gang a zonal proximity
placement group -> per rank public IP, NIC, VM (provision.py) -> the node waiter
(default: the SSH waiter shared with AWS: SSH up, host keys pinned, cluster key
installed). Any failure (or Ctrl-C) deletes the resource group, waits, and raises the
typed error. InfiniBand gangs (catalog fabric `infiniband`) get an explicit zone: the
placement's, else the location's zones in order (`azure.zones`), the next one tried on
a capacity error.

query: the recorded gang's VMs with their instance view -> NodeState. A spot VM that is
gone (eviction policy Delete) or deallocated while its group still exists was evicted:
PREEMPTED (launcher never deletes single VMs, and refuses to stop spot clusters);
otherwise gone is TERMINATED and deallocated is STOPPED.
terminate (idempotent, blocking): delete every recorded group (no record: the groups
tagged with the cluster), wait, drop the record. stop/start: deallocate/start (on-demand
only). list_tagged_resources: groups tagged `launcher-cluster` and their VMs, by cluster
(list_tagged_clusters: the VM ids, or the group's where it has none).

Tests inject `clients` (built with a credential and endpoint of their own) and
`node_waiter`; the product uses the real ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from launcher.clouds.azure import names, records
from launcher.clouds.azure.errors import (
    CLOUD,
    azure_errors,
    is_not_found,
    retry_conflicts,
    wait_lro,
)
from launcher.clouds.azure.images import default_image, image_reference
from launcher.clouds.azure.network import create_network, public_ip_address
from launcher.clouds.azure.provision import (
    CreatedNode,
    GangPlan,
    create_gang,
    create_placement_group,
)
from launcher.clouds.azure.session import Clients, check_credentials, local_credentials_source
from launcher.clouds.azure.states import node_state
from launcher.clouds.azure.teardown import delete_group
from launcher.clouds.base import (
    INSTANCE,
    CapacityError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionRequest,
    TaggedResource,
)
from launcher.config.azure import AzureSettings

NodeWaiter = Any  # Callable[[ClusterInfo, float], ClusterInfo] (aws/nodes.py)
CHECK_TTL_S = 60.0


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Seconds: each long-running create, the SSH wait, a group's deletion."""

    create: float = 1200.0
    ssh: float = 900.0
    teardown: float = 1800.0


def _settings() -> AzureSettings:
    from launcher.config.settings import load_config

    return load_config().azure


class AzureCloud:
    """See the module docstring. Constructing it imports no SDK."""

    name = CLOUD

    def __init__(self, *, clients: Clients | None = None, node_waiter: NodeWaiter = None,
                 settings: AzureSettings | None = None, timeouts: Timeouts = Timeouts()) -> None:
        self._clients = clients
        self._node_waiter = node_waiter
        self._settings = settings
        self._timeouts = timeouts
        self._checked: tuple[float, CredentialStatus] | None = None
        self._cached: tuple[str, Clients] | None = None
        self._lock = threading.Lock()

    # ---- plumbing ----

    def settings(self) -> AzureSettings:
        if self._clients is not None:
            return self._clients.settings
        return self._settings or _settings()

    @property
    def clients(self) -> Clients:
        """The injected clients, else ones for the current settings (rebuilt when the
        config changes; reused otherwise, so the SDK's token cache is reused too)."""
        if self._clients is not None:
            return self._clients
        return self._clients_for(self.settings())

    def _clients_for(self, settings: AzureSettings) -> Clients:
        if self._clients is not None:
            return self._clients
        key = repr(settings)
        with self._lock:
            if self._cached is None or self._cached[0] != key:
                self._cached = (key, Clients(settings))
            return self._cached[1]

    def _waiter(self) -> NodeWaiter:
        if self._node_waiter is None:
            from launcher.clouds.aws.nodes import wait_for_ssh

            return wait_for_ssh
        return self._node_waiter

    # ---- Cloud ----

    def check(self) -> CredentialStatus:
        """Identity and subscription, or why not; no SDK import and no network when no
        credentials are configured. A positive answer is reused for CHECK_TTL_S."""
        settings = self.settings()
        if local_credentials_source() is None:
            return check_credentials(settings)
        now = time.monotonic()
        if self._checked is not None and now - self._checked[0] < CHECK_TTL_S:
            return self._checked[1]
        cred = self._clients.credential() if self._clients is not None else None
        status = check_credentials(settings, cred)
        self._checked = (now, status)
        return status

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Create the gang (see the module docstring). Raises CapacityError, QuotaError,
        AuthError, InvalidRequestError or CloudError; nothing is left on failure."""
        from launcher.runtime.keys import ensure_user_key

        if req.num_nodes < 1:
            raise InvalidRequestError("num_nodes must be >= 1.", cloud=CLOUD, region=req.region)
        from launcher.task.config_section import apply_overrides

        settings = apply_overrides(self.settings(), req.settings.get("azure") or {})
        clients = self._clients_for(settings)
        user_key = ensure_user_key()
        public_key = req.ssh_public_key or user_key.public_key()
        ib = req.fabric == "infiniband"
        gpu = bool(req.accelerator) and req.accelerator_count > 0
        image = image_reference(req.image_id or default_image(req.instance_type, gpu, ib),
                                region=req.region)
        zones: list[str | None] = [req.zone]
        if ib and not req.zone:
            zones = list(settings.zones_for(req.region))
        last: CapacityError | None = None
        for zone in zones:
            try:
                return self._attempt(clients, settings, req, zone, image, public_key,
                                     user_key.private_path, placement=ib and req.num_nodes > 1)
            except CapacityError as err:
                last = err
        assert last is not None
        raise CapacityError(f"{req.instance_type} in {req.region}, zones "
                            f"{', '.join(str(z) for z in zones)}: {last}",
                            cloud=CLOUD, region=req.region, zone=req.zone)

    def _attempt(self, clients: Clients, settings: AzureSettings, req: ProvisionRequest,
                 zone: str | None, image: dict[str, Any], public_key: str, key_path: str,
                 placement: bool) -> ClusterInfo:
        cluster, location = req.cluster_name, req.region
        group = names.resource_group(cluster, location)
        tags = names.cluster_tags(cluster)
        t = self._timeouts
        records.add_group(cluster, group, location)  # before anything exists
        try:
            resource = clients.resource()
            with azure_errors(region=location, action="create resource group"):
                retry_conflicts(lambda: resource.resource_groups.create_or_update(
                    group, {"location": location, "tags": tags}))
            network, compute = clients.network(), clients.compute()
            subnet = create_network(network, group, location, cluster, settings, req.ports,
                                    tags, t.create)
            plan = GangPlan(cluster=cluster, group=group, location=location, zone=zone,
                            instance_type=req.instance_type, num_nodes=req.num_nodes,
                            use_spot=req.use_spot, image_reference=image,
                            public_key=public_key, subnet_id=subnet, tags=tags,
                            disk_size_gb=req.disk_size_gb)
            if placement:
                plan = dataclasses.replace(plan, placement_group_id=create_placement_group(
                    compute, plan))
            created = create_gang(compute, network, plan, settings, t.create)
            records.set_gang(cluster, group, location, zone, [c.vm_name for c in created],
                             req.use_spot)
            info = self._cluster_info(cluster, location, req.zone, req.instance_type,
                                      req.use_spot, created, settings, key_path,
                                      network, group)
            return self._waiter()(info, time.monotonic() + t.ssh)
        except BaseException:
            with contextlib.suppress(Exception):
                delete_group(clients.resource(), group, location, t.teardown)
                records.drop_group(cluster, group)
            raise

    def _cluster_info(self, cluster: str, location: str, zone: str | None, size: str,
                      spot: bool, created: list[CreatedNode], settings: AzureSettings,
                      key_path: str, network: Any, group: str) -> ClusterInfo:
        nodes = []
        for c in created:
            external = None
            if not settings.use_internal_ips and c.public_ip_name:
                external = public_ip_address(network, group, c.public_ip_name, location)
            nodes.append(NodeInfo(rank=c.rank, node_id=c.vm_id, internal_ip=c.private_ip,
                                  external_ip=external, ssh_user=settings.ssh_user))
        return ClusterInfo(cluster_name=cluster, cloud=CLOUD, region=location, zone=zone,
                           instance_type=size, use_spot=spot, nodes=tuple(nodes),
                           ssh_key_path=key_path)

    def query(self, cluster: str) -> dict[str, NodeState]:
        """VM id -> Azure's view (see the module docstring). Raises CloudError."""
        gang = records.gang(cluster)
        clients = self.clients
        compute = clients.compute()
        if gang is None:
            out: dict[str, NodeState] = {}
            for group in self._tagged_groups(cluster):
                for found in self._vms(compute, group, None):
                    out[str(found["id"])] = node_state(self._view(compute, group, found), False)
            return out
        group, location = str(gang["group"]), str(gang.get("location") or "")
        spot = bool(gang.get("spot"))
        prefix = (f"/subscriptions/{clients.subscription}/resourceGroups/{group}"
                  "/providers/Microsoft.Compute/virtualMachines/")
        try:
            listed = {str(vm["name"]): vm for vm in self._vms(compute, group, location)}
        except Exception as exc:
            cause = exc.__cause__ or exc
            if not is_not_found(cause):
                raise
            return {prefix + n: NodeState.TERMINATED for n in gang.get("vms") or []}
        out = {}
        for name in gang.get("vms") or []:
            vm: dict[str, Any] | None = listed.get(str(name))
            vid = str(vm["id"]) if vm else prefix + str(name)
            out[vid] = node_state(self._view(compute, group, vm) if vm else None, spot)
        return out

    def _vms(self, compute: Any, group: str, location: str | None) -> list[dict[str, Any]]:
        with azure_errors(region=location, action="list VMs"):
            return [vm.as_dict() for vm in compute.virtual_machines.list(group)]

    def _view(self, compute: Any, group: str, vm: dict[str, Any]) -> dict[str, Any] | None:
        try:
            with azure_errors(action="get VM"):
                full: dict[str, Any] = compute.virtual_machines.get(
                    group, vm["name"], expand="instanceView").as_dict()
                return full
        except Exception as exc:
            if is_not_found(exc.__cause__ or exc):
                return None  # deleted between the list and the get
            raise

    def terminate(self, cluster: str) -> None:
        """Delete every resource group of `cluster` and wait; idempotent. Raises CloudError
        (the record is kept then, so a retry deletes the same groups)."""
        groups = records.groups(cluster)
        if groups is None:
            groups = dict.fromkeys(self._tagged_groups(cluster), "")
        resource = self.clients.resource() if groups else None
        for group, location in groups.items():
            delete_group(resource, group, location or None, self._timeouts.teardown)
            records.drop_group(cluster, group)
        records.drop_cluster(cluster)

    def _tagged_groups(self, cluster: str | None) -> list[str]:
        resource = self.clients.resource()
        with azure_errors(action="list resource groups"):
            found = list(resource.resource_groups.list(
                filter=f"tagName eq '{names.CLUSTER_TAG}'"))
        out = []
        for g in found:
            d = g.as_dict()
            tag = (d.get("tags") or {}).get(names.CLUSTER_TAG)
            if tag and (cluster is None or tag == cluster):
                out.append(str(d["name"]))
        return out

    # ---- SupportsStop ----

    def _gang_or_fail(self, cluster: str) -> dict[str, Any]:
        gang = records.gang(cluster)
        if gang is None:
            raise InvalidRequestError(f"Cluster {cluster!r} has no recorded VMs on Azure.",
                                      cloud=CLOUD)
        return gang

    def _each_vm(self, gang: dict[str, Any], action: str) -> None:
        compute = self.clients.compute()
        group, location = str(gang["group"]), str(gang["location"])

        def one(name: str) -> None:
            with azure_errors(region=location, action=f"{action} {name}"):
                op = getattr(compute.virtual_machines, f"begin_{action}")
                retry_conflicts(lambda: wait_lro(op(group, name), self._timeouts.create))

        names_ = [str(n) for n in gang.get("vms") or []]
        with ThreadPoolExecutor(max(1, min(16, len(names_)))) as ex:
            list(ex.map(one, names_))

    def stop(self, cluster: str) -> None:
        """Deallocate every VM (disks kept, compute billing stops). Raises
        InvalidRequestError for spot clusters, CloudError."""
        gang = self._gang_or_fail(cluster)
        if gang.get("spot"):
            raise InvalidRequestError(f"Cluster {cluster!r} runs on spot VMs (evicted, not "
                                      "stopped); use `launcher down`.", cloud=CLOUD)
        self._each_vm(gang, "deallocate")

    def start(self, cluster: str) -> ClusterInfo:
        """Start the deallocated VMs; their ClusterInfo with re-pinned host keys."""
        from launcher.clouds.azure.network import private_ip
        from launcher.runtime.keys import ensure_user_key

        gang = self._gang_or_fail(cluster)
        self._each_vm(gang, "start")
        clients, settings = self.clients, self.settings()
        group, location = str(gang["group"]), str(gang["location"])
        compute, network = clients.compute(), clients.network()
        created = []
        size = ""
        for rank, name in enumerate(gang.get("vms") or []):
            with azure_errors(region=location, action="describe node"):
                vm = compute.virtual_machines.get(group, name).as_dict()
                nic = network.network_interfaces.get(group, names.nic(cluster, rank)).as_dict()
            size = str(vm["properties"]["hardwareProfile"]["vmSize"])
            created.append(CreatedNode(rank=rank, vm_name=str(name), vm_id=str(vm["id"]),
                                       private_ip=private_ip(nic),
                                       public_ip_name=None if settings.use_internal_ips
                                       else names.public_ip(cluster, rank)))
        info = self._cluster_info(cluster, location, None, size, bool(gang.get("spot")),
                                  created, settings, ensure_user_key().private_path,
                                  network, group)
        return self._waiter()(info, time.monotonic() + self._timeouts.ssh)

    # ---- SupportsOrphans ----

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster tag -> ids of its VMs (a group with none: the group's id, so leftover
        networks show too). Raises CloudError."""
        out: dict[str, list[str]] = {}
        for cluster, res in self.list_tagged_resources().items():
            vms = [r.id for r in res if r.kind == INSTANCE]
            out[cluster] = sorted(vms or [r.id for r in res])
        return out

    def list_tagged_resources(self) -> dict[str, list[TaggedResource]]:
        """cluster tag -> its resource groups (everything of a cluster lives in one: its
        network, disks, addresses) and the VMs in them (SupportsResourceScan). Raises
        CloudError."""
        resource, compute = self.clients.resource(), self.clients.compute()
        with azure_errors(action="list resource groups"):
            groups = [g.as_dict() for g in resource.resource_groups.list(
                filter=f"tagName eq '{names.CLUSTER_TAG}'")]
        out: dict[str, list[TaggedResource]] = {}
        for g in groups:
            cluster = (g.get("tags") or {}).get(names.CLUSTER_TAG)
            if not cluster:
                continue
            try:
                vms = [str(vm["id"]) for vm in self._vms(compute, str(g["name"]), None)]
            except Exception as exc:
                if not is_not_found(exc.__cause__ or exc):
                    raise
                continue  # deleted meanwhile
            out.setdefault(str(cluster), []).extend(
                [TaggedResource(INSTANCE, v) for v in vms]
                + [TaggedResource("resource group", str(g["id"]))])
        return {k: sorted(v, key=lambda r: (r.kind, r.id)) for k, v in out.items()}
