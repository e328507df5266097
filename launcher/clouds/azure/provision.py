"""Creating one gang of VMs in a prepared resource group (all ranks in parallel).

`vm_body` is the ARM VirtualMachine JSON: size, image, OS disk (`disk_size` GB, deleted
with the VM), the admin user with the SSH public key in
`osProfile.linuxConfiguration.ssh.publicKeys` (password login disabled), the NIC; spot:
`priority: Spot`, `evictionPolicy: Delete`, `billingProfile.maxPrice: -1` (pay up to
the on-demand price, evicted only for capacity); InfiniBand gangs: the zone and the
proximity placement group, so every VM lands on one IB fabric.
`create_gang` makes per rank: public IP (unless internal IPs) -> NIC -> VM, each waiting
on its long-running operation; it returns once every rank succeeded, or raises the
first rank's typed error after the others finished (the caller deletes the group).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from launcher.clouds.azure import names
from launcher.clouds.azure.errors import azure_errors, retry_conflicts, wait_lro
from launcher.clouds.azure.network import create_nic, create_public_ip, private_ip
from launcher.config.azure import AzureSettings

_MAX_PARALLEL = 16


@dataclass(frozen=True)
class GangPlan:
    """What `create_gang` creates (one resource group, one location, maybe one zone)."""

    cluster: str
    group: str
    location: str
    zone: str | None
    instance_type: str
    num_nodes: int
    use_spot: bool
    image_reference: dict[str, Any]
    public_key: str
    subnet_id: str
    tags: dict[str, str]
    disk_size_gb: int | None = None
    placement_group_id: str | None = None


@dataclass(frozen=True)
class CreatedNode:
    rank: int
    vm_name: str
    vm_id: str
    private_ip: str
    public_ip_name: str | None


def vm_body(plan: GangPlan, rank: int, nic_id: str, settings: AzureSettings) -> dict[str, Any]:
    user = settings.ssh_user
    os_disk: dict[str, Any] = {"createOption": "FromImage", "deleteOption": "Delete",
                               "caching": "ReadWrite",
                               "managedDisk": {"storageAccountType": "StandardSSD_LRS"}}
    if plan.disk_size_gb:
        os_disk["diskSizeGB"] = int(plan.disk_size_gb)
    home = "/root" if user == "root" else f"/home/{user}"
    props: dict[str, Any] = {
        "hardwareProfile": {"vmSize": plan.instance_type},
        "storageProfile": {"imageReference": plan.image_reference, "osDisk": os_disk},
        "osProfile": {
            "computerName": names.vm(plan.cluster, rank)[:64],
            "adminUsername": user,
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {"publicKeys": [{"path": f"{home}/.ssh/authorized_keys",
                                        "keyData": plan.public_key}]},
            },
        },
        "networkProfile": {"networkInterfaces": [
            {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}]},
    }
    if plan.use_spot:
        props.update(priority="Spot", evictionPolicy="Delete", billingProfile={"maxPrice": -1})
    if plan.placement_group_id:
        props["proximityPlacementGroup"] = {"id": plan.placement_group_id}
    body: dict[str, Any] = {"location": plan.location,
                            "tags": {**plan.tags, names.RANK_TAG: str(rank)},
                            "properties": props}
    if plan.zone:
        body["zones"] = [plan.zone]
    return body


def create_placement_group(compute: Any, plan: GangPlan) -> str:
    """The cluster's proximity placement group (zonal, sized for the gang's VM size)."""
    body: dict[str, Any] = {"location": plan.location, "tags": plan.tags, "properties": {
        "proximityPlacementGroupType": "Standard",
        "intent": {"vmSizes": [plan.instance_type]}}}
    if plan.zone:
        body["zones"] = [plan.zone]
    with azure_errors(region=plan.location, zone=plan.zone, action="create placement group"):
        ppg = retry_conflicts(lambda: compute.proximity_placement_groups.create_or_update(
            plan.group, names.ppg(plan.cluster), body)).as_dict()
    return str(ppg["id"])


def _one(compute: Any, network: Any, plan: GangPlan, rank: int, settings: AzureSettings,
         timeout: float) -> CreatedNode:
    pip_id = pip_name = None
    if not settings.use_internal_ips:
        pip = create_public_ip(network, plan.group, plan.location, plan.cluster, rank,
                               plan.zone, plan.tags, timeout)
        pip_id, pip_name = str(pip["id"]), str(pip["name"])
    nic = create_nic(network, plan.group, plan.location, plan.cluster, rank, plan.subnet_id,
                     pip_id, plan.tags, timeout)
    name = names.vm(plan.cluster, rank)
    body = vm_body(plan, rank, str(nic["id"]), settings)
    with azure_errors(region=plan.location, zone=plan.zone, action=f"create VM {name}"):
        vm = retry_conflicts(lambda: wait_lro(compute.virtual_machines.begin_create_or_update(
            plan.group, name, body), timeout)).as_dict()
    return CreatedNode(rank=rank, vm_name=name, vm_id=str(vm.get("id", name)),
                       private_ip=private_ip(nic), public_ip_name=pip_name)


def create_gang(compute: Any, network: Any, plan: GangPlan, settings: AzureSettings,
                timeout: float) -> list[CreatedNode]:
    """Every rank's VM, in rank order; raises the lowest rank's error once all ended."""
    workers = min(_MAX_PARALLEL, plan.num_nodes)
    with ThreadPoolExecutor(workers) as ex:
        futures = [ex.submit(_one, compute, network, plan, r, settings, timeout)
                   for r in range(plan.num_nodes)]
        errors = [f.exception() for f in futures]
    for err in errors:
        if err is not None:
            raise err
    return [f.result() for f in futures]
