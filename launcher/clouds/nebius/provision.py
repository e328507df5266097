"""Creating one gang on Nebius: the GPU cluster (InfiniBand), boot disks, instances.

Every create is an SDK call answered with an Operation, waited on with
`Operation.sync_wait` (polls `OperationService.Get`); a failed operation raises the SDK's
OperationError, mapped by errors.py. Creates are sent once (`retries=1`): a capacity or
quota answer fails over instead of being retried by the SDK.

Per rank (in parallel): boot disk (`<cluster>-<rank>-boot`, NETWORK_SSD, from the image
family) -> instance (`<cluster>-<rank>`: platform + preset, the boot disk, one interface
on the subnet with a private IP and, unless `use_internal_ips`, a public IP;
cloud-init user data with the SSH key; preemptible with `on_preemption: STOP` for spot;
the GPU cluster for an InfiniBand gang) -> Get for its addresses. Everything carries
`launcher-cluster=<cluster>` (and `launcher-rank`). On any failure the caller tears the
cluster down by label (teardown.py).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from launcher.clouds.base import InvalidRequestError
from launcher.clouds.nebius import shapes
from launcher.clouds.nebius.errors import CLOUD, ONCE, nebius_errors, with_retries
from launcher.clouds.nebius.session import Session

_MAX_PARALLEL = 16


@dataclass(frozen=True)
class GangPlan:
    """What `create_gang` creates (one project, one region)."""

    cluster: str
    project: str
    region: str
    platform: str
    preset: str
    num_nodes: int
    preemptible: bool
    image_family: str
    disk_size_gb: int
    subnet_id: str
    public_ip: bool
    user_data: str
    gpu_cluster_id: str | None = None


@dataclass(frozen=True)
class CreatedNode:
    rank: int
    instance_id: str
    private_ip: str
    public_ip: str | None


def _labels(cluster: str, rank: int | None = None) -> dict[str, str]:
    labels = {shapes.CLUSTER_LABEL: cluster}
    if rank is not None:
        labels[shapes.RANK_LABEL] = str(rank)
    return labels


def wait_op(op: Any, timeout: float, poll: float) -> str:
    """Wait for an Operation; its resource id. Raises the SDK's errors (mapped by caller)."""
    op.sync_wait(interval=poll, timeout=timeout)
    return str(op.resource_id)


def default_subnet(session: Session, project: str, region: str) -> str:
    """The configured subnet, else the project's first subnet. InvalidRequestError if none."""
    if session.settings.subnet_id:
        return session.settings.subnet_id
    from nebius.api.nebius.vpc.v1 import ListSubnetsRequest

    with nebius_errors(region=region, action="list subnets"):
        found = with_retries(lambda: session.subnets().list(
            ListSubnetsRequest(parent_id=project), timeout=30).wait())
    for subnet in found.items:
        return str(subnet.metadata.id)
    raise InvalidRequestError(f"project {project} has no VPC subnet; create one or set "
                              "nebius.subnet_id", cloud=CLOUD, region=region)


def create_gpu_cluster(session: Session, plan: GangPlan, fabric: str, timeout: float,
                       poll: float) -> str:
    """The cluster's GPU cluster on InfiniBand fabric `fabric`; its id."""
    from nebius.api.nebius.common.v1 import ResourceMetadata
    from nebius.api.nebius.compute.v1 import CreateGpuClusterRequest, GpuClusterSpec

    req = CreateGpuClusterRequest(
        metadata=ResourceMetadata(parent_id=plan.project, name=shapes.gpu_cluster_name(
            plan.cluster), labels=_labels(plan.cluster)),
        spec=GpuClusterSpec(infiniband_fabric=fabric))
    with nebius_errors(region=plan.region, action=f"create GPU cluster on {fabric}"):
        op = with_retries(lambda: session.gpu_clusters().create(req, **ONCE).wait())
        return wait_op(op, timeout, poll)


def _address(value: Any) -> str:
    return str(value or "").split("/", 1)[0]


def _one(session: Session, plan: GangPlan, rank: int, timeout: float,
         poll: float) -> CreatedNode:
    from nebius.api.nebius.common.v1 import ResourceMetadata
    from nebius.api.nebius.compute.v1 import (
        AttachedDiskSpec,
        CreateDiskRequest,
        CreateInstanceRequest,
        DiskSpec,
        ExistingDisk,
        GetInstanceRequest,
        InstanceGpuClusterSpec,
        InstanceSpec,
        IPAddress,
        NetworkInterfaceSpec,
        PreemptibleSpec,
        PublicIPAddress,
        ResourcesSpec,
        SourceImageFamily,
    )

    labels = _labels(plan.cluster, rank)
    disk_req = CreateDiskRequest(
        metadata=ResourceMetadata(parent_id=plan.project, labels=labels,
                                  name=shapes.disk_name(plan.cluster, rank)),
        spec=DiskSpec(size_gibibytes=plan.disk_size_gb, type=DiskSpec.DiskType.NETWORK_SSD,
                      source_image_family=SourceImageFamily(image_family=plan.image_family)))
    with nebius_errors(region=plan.region, action=f"create boot disk of rank {rank}"):
        op = with_retries(lambda: session.disks().create(disk_req, **ONCE).wait())
        disk_id = wait_op(op, timeout, poll)
    nic = NetworkInterfaceSpec(subnet_id=plan.subnet_id, name="eth0", ip_address=IPAddress())
    if plan.public_ip:
        nic.public_ip_address = PublicIPAddress()
    spec = InstanceSpec(
        resources=ResourcesSpec(platform=plan.platform, preset=plan.preset),
        boot_disk=AttachedDiskSpec(attach_mode=AttachedDiskSpec.AttachMode.READ_WRITE,
                                   existing_disk=ExistingDisk(id=disk_id)),
        network_interfaces=[nic], cloud_init_user_data=plan.user_data,
        hostname=shapes.instance_name(plan.cluster, rank))
    if plan.preemptible:
        spec.preemptible = PreemptibleSpec(
            on_preemption=PreemptibleSpec.PreemptionPolicy.STOP, priority=3)
    if plan.gpu_cluster_id:
        spec.gpu_cluster = InstanceGpuClusterSpec(id=plan.gpu_cluster_id)
    req = CreateInstanceRequest(
        metadata=ResourceMetadata(parent_id=plan.project, labels=labels,
                                  name=shapes.instance_name(plan.cluster, rank)), spec=spec)
    with nebius_errors(region=plan.region, action=f"create instance of rank {rank}"):
        op = with_retries(lambda: session.instances().create(req, **ONCE).wait())
        instance_id = wait_op(op, timeout, poll)
        inst = with_retries(lambda: session.instances().get(
            GetInstanceRequest(id=instance_id), timeout=30).wait())
    private = public = None
    for iface in inst.status.network_interfaces:
        private = _address(iface.ip_address.address if iface.ip_address else None)
        if iface.public_ip_address and iface.public_ip_address.address:
            public = _address(iface.public_ip_address.address)
        break
    if not private:
        from launcher.clouds.base import CloudError

        raise CloudError(f"instance {instance_id} has no private IP", cloud=CLOUD,
                         region=plan.region)
    return CreatedNode(rank=rank, instance_id=instance_id, private_ip=private,
                       public_ip=public)


def create_gang(session: Session, plan: GangPlan, timeout: float,
                poll: float) -> list[CreatedNode]:
    """Every rank's instance in rank order; raises the lowest rank's error once all
    ranks ended (the caller tears down)."""
    with ThreadPoolExecutor(min(_MAX_PARALLEL, plan.num_nodes)) as ex:
        futures = [ex.submit(_one, session, plan, r, timeout, poll)
                   for r in range(plan.num_nodes)]
        errors = [f.exception() for f in futures]
    for err in errors:
        if err is not None:
            raise err
    return [f.result() for f in futures]
