"""The instances of a gang: names, labels, the insert request, the placement policy.

One `instances.insert` per node, all in one zone, issued together and each waited on
through its zone operation (all or nothing: cloud.py deletes the cluster's instances
when any insert fails). Each insert carries a `requestId`: a UUID5 of the attempt's
idempotency token and the rank (GCP requires a UUID; a retried or resumed call with the
same id returns the first call's operation instead of creating a second instance).

Every instance gets, atomically with creation:
- labels `launcher-cluster` (the cluster's label-safe name), `launcher-rank`,
  `launcher-version`; the exact cluster name in metadata `launcher-cluster`;
- metadata `ssh-keys: USER:KEY` (the guest agent creates USER with that key);
- network tags `launcher` (firewall rules, network.py) and `launcher-<cluster>`;
- the boot disk from the image (images.py) sized by `disk_size`, deleted with the VM;
- one NIC on the configured network (and subnetwork), with an external IP unless
  `gcp.use_internal_ips`;
- spot: `scheduling.provisioningModel: SPOT`, `instanceTerminationAction: DELETE`;
  GPU machines `onHostMaintenance: TERMINATE` (GPU VMs cannot live-migrate);
- N1 hosts with T4/V100/P100/P4: `guestAccelerators` (other GPU machine types carry
  their GPUs);
- the cluster's compact placement policy when there is one.
Compact placement (`resourcePolicies` with `groupPlacementPolicy.collocation:
COLLOCATED`, one per cluster and region) is made for multi-node GPU gangs on machine
families that support it.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from launcher.clouds.base import InvalidRequestError
from launcher.clouds.gcp.errors import CLOUD
from launcher.clouds.gcp.images import N1_ACCELERATORS
from launcher.clouds.gcp.limits import GPUDIRECT_PREFIXES
from launcher.clouds.gcp.network import NODE_TAG, cluster_tag, network_url

CLUSTER_LABEL = "launcher-cluster"
RANK_LABEL = "launcher-rank"
VERSION_LABEL = "launcher-version"
CLUSTER_METADATA = "launcher-cluster"
# families whose multi-node gangs get a compact placement policy
COMPACT_FAMILIES = ("a2", "a3", "a4", "g2", "c2", "c2d", "c3", "c3d", "c4", "n2", "n2d", "h3")
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


def label_value(cluster: str) -> str:
    """A label-safe form of the cluster name (lowercase, [a-z0-9_-], <= 63 chars);
    a hash suffix keeps distinct names distinct when the name had to change."""
    safe = _NAME_BAD.sub("-", cluster.lower()).strip("-") or "c"
    if safe == cluster and len(safe) <= 63:
        return safe
    digest = hashlib.sha1(cluster.encode()).hexdigest()[:6]
    return f"{safe[:55].rstrip('-')}-{digest}"


def instance_name(cluster: str, rank: int) -> str:
    base = label_value(cluster)
    if not base[0].isalpha():
        base = f"l-{base}"
    return f"{base[:56].rstrip('-')}-{rank}"


def request_id(token: str | None, rank: int) -> str | None:
    """GCP's requestId (a UUID) for one node of an attempt."""
    if not token:
        return None
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"launcher:{token}:{rank}"))


def family(machine_type: str) -> str:
    return machine_type.split("-", 1)[0]


def check_networking(machine_type: str, num_nodes: int) -> None:
    """Refuse multi-node gangs of GPUDirect machine types (see GPUDIRECT_PREFIXES)."""
    if num_nodes > 1 and machine_type.startswith(GPUDIRECT_PREFIXES):
        raise InvalidRequestError(
            f"{machine_type} x{num_nodes}: a multi-node gang of this machine type needs "
            "GPUDirect networking (TCPX/TCPXO or RDMA NICs on their own VPCs), which "
            "launcher does not set up on GCP yet; it refuses rather than join the nodes "
            "over plain Ethernet. Run one node, or choose another cloud or GPU type.",
            cloud=CLOUD)


def wants_compact_placement(machine_type: str, num_nodes: int, gpu: bool) -> bool:
    return num_nodes > 1 and gpu and family(machine_type) in COMPACT_FAMILIES


def policy_name(cluster: str) -> str:
    return f"launcher-{label_value(cluster)}"[:63].rstrip("-")


def policy_body(name: str, num_nodes: int) -> dict[str, Any]:
    return {"name": name, "description": "launcher: compact placement of one cluster",
            "group_placement_policy": {"collocation": "COLLOCATED"}}


@dataclass(frozen=True)
class NodePlan:
    """Everything one gang's inserts share."""

    project: str
    zone: str
    region: str
    cluster: str
    machine_type: str
    num_nodes: int
    use_spot: bool
    source_image: str
    ssh_user: str
    public_key: str
    network: str
    subnetwork: str | None = None
    external_ip: bool = True
    disk_size_gb: int | None = None
    accelerator: str | None = None
    accelerator_count: int = 0
    gpu: bool = False
    policy: str | None = None
    token: str | None = None
    extra_labels: dict[str, str] = field(default_factory=dict)


def _labels(plan: NodePlan, rank: int) -> dict[str, str]:
    from launcher import __version__

    out = {k: v for k, v in plan.extra_labels.items()}
    out.update({CLUSTER_LABEL: label_value(plan.cluster), RANK_LABEL: str(rank),
                VERSION_LABEL: _NAME_BAD.sub("_", __version__.lower())[:63]})
    return out


def instance_body(plan: NodePlan, rank: int) -> dict[str, Any]:
    """The Instance resource of node `rank` (compute_v1 field names)."""
    nic: dict[str, Any] = {"network": network_url(plan.project, plan.network)}
    if plan.subnetwork:
        nic["subnetwork"] = (plan.subnetwork if "/" in plan.subnetwork else
                             f"projects/{plan.project}/regions/{plan.region}/subnetworks/"
                             f"{plan.subnetwork}")
    if plan.external_ip:
        nic["access_configs"] = [{"name": "External NAT", "type_": "ONE_TO_ONE_NAT"}]
    init: dict[str, Any] = {"source_image": plan.source_image}
    if plan.disk_size_gb:
        init["disk_size_gb"] = int(plan.disk_size_gb)
    scheduling: dict[str, Any] = {}
    if plan.use_spot:
        scheduling.update(provisioning_model="SPOT", instance_termination_action="DELETE",
                          automatic_restart=False)
    if plan.gpu:
        scheduling["on_host_maintenance"] = "TERMINATE"
    body: dict[str, Any] = {
        "name": instance_name(plan.cluster, rank),
        "machine_type": f"zones/{plan.zone}/machineTypes/{plan.machine_type}",
        "labels": _labels(plan, rank),
        "metadata": {"items": [
            {"key": "ssh-keys", "value": f"{plan.ssh_user}:{plan.public_key.strip()}"},
            {"key": CLUSTER_METADATA, "value": plan.cluster},
        ]},
        "tags": {"items": [NODE_TAG, cluster_tag(label_value(plan.cluster))]},
        "disks": [{"boot": True, "auto_delete": True, "initialize_params": init}],
        "network_interfaces": [nic],
    }
    if scheduling:
        body["scheduling"] = scheduling
    gcp_acc = N1_ACCELERATORS.get(plan.accelerator or "")
    if family(plan.machine_type) == "n1" and gcp_acc and plan.accelerator_count:
        body["guest_accelerators"] = [{
            "accelerator_type": f"zones/{plan.zone}/acceleratorTypes/{gcp_acc}",
            "accelerator_count": int(plan.accelerator_count)}]
    if plan.policy:
        body["resource_policies"] = [
            f"projects/{plan.project}/regions/{plan.region}/resourcePolicies/{plan.policy}"]
    return body


def insert_request(plan: NodePlan, rank: int) -> Any:
    """The `InsertInstanceRequest` of node `rank` (with its requestId)."""
    from google.cloud import compute_v1

    fields: dict[str, Any] = {"project": plan.project, "zone": plan.zone,
                              "instance_resource": compute_v1.Instance(instance_body(plan, rank))}
    rid = request_id(plan.token, rank)
    if rid:
        fields["request_id"] = rid
    return compute_v1.InsertInstanceRequest(**fields)
