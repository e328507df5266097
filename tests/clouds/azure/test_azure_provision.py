"""AzureCloud against the ARM fake (no bodies: the node waiter is injected and contacts
nothing): what provision creates, query's view (eviction the Azure way), stop/start,
terminate, orphans, and the error mapping of each class."""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

import pytest

from launcher.clouds.azure import records
from launcher.clouds.azure.cloud import AzureCloud
from launcher.clouds.azure.errors import classify
from launcher.clouds.base import (
    AuthError,
    CapacityError,
    ClusterInfo,
    InvalidRequestError,
    NodeState,
    ProvisionRequest,
    QuotaError,
)
from tests.azure_fake import AzureFake

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeHostKeyForTests"


class FakeWaiter:
    def __init__(self) -> None:
        self.calls: list[ClusterInfo] = []

    def __call__(self, info: ClusterInfo, deadline: float) -> ClusterInfo:
        self.calls.append(info)
        return dataclasses.replace(info, nodes=tuple(
            dataclasses.replace(n, ssh_host_key=HOST_KEY) for n in info.nodes))


def req(name: str = "c1", **kw: Any) -> ProvisionRequest:
    base: dict[str, Any] = dict(cluster_name=name, cloud="azure", region="eastus", zone=None,
                                instance_type="Standard_D2s_v5", num_nodes=2, use_spot=False)
    base.update(kw)
    return ProvisionRequest(**base)


@pytest.fixture
def cloud(azure_fake: AzureFake) -> AzureCloud:
    return AzureCloud(node_waiter=FakeWaiter())


def test_provision_creates_one_group_with_network_and_vms(azure_fake: AzureFake,
                                                         cloud: AzureCloud) -> None:
    info = cloud.provision(req(use_spot=True, disk_size_gb=256))
    assert [n.rank for n in info.nodes] == [0, 1]
    assert all(n.ssh_host_key == HOST_KEY for n in info.nodes)
    inv = azure_fake.inventory()
    assert any(i.endswith("/resourceGroups/launcher-c1-eastus") for i in inv)
    for kind in ("networkSecurityGroups/c1-nsg", "virtualNetworks/c1-vnet",
                 "networkInterfaces/c1-0-nic", "publicIPAddresses/c1-1-ip",
                 "virtualMachines/c1-1"):
        assert any(i.endswith(kind) for i in inv), (kind, inv)
    vm = azure_fake.vm("c1-0")
    props = vm["properties"]
    assert props["priority"] == "Spot" and props["evictionPolicy"] == "Delete"
    assert props["billingProfile"] == {"maxPrice": -1}
    assert props["storageProfile"]["osDisk"]["diskSizeGB"] == 256
    assert props["storageProfile"]["imageReference"]["offer"] == "0001-com-ubuntu-server-jammy"
    assert props["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"]
    assert vm["tags"]["launcher-cluster"] == "c1" and vm["tags"]["launcher-rank"] == "0"
    assert "zones" not in vm and "proximityPlacementGroup" not in props
    ips = {n.internal_ip for n in info.nodes}
    assert all(ipaddress.ip_address(ip) in azure_fake.lab for ip in ips) and len(ips) == 2
    assert all(n.external_ip and n.external_ip.startswith("203.0.113.") for n in info.nodes)
    nsg = next(r for r in azure_fake.resources.values() if r["name"] == "c1-nsg")
    rules = {r["name"]: r["properties"] for r in nsg["properties"]["securityRules"]}
    assert rules["ssh"]["destinationPortRange"] == "22"
    assert rules["intra-vnet"]["sourceAddressPrefix"] == "VirtualNetwork"
    # every create went through Azure-AsyncOperation polling
    assert sum(1 for m, p in azure_fake.calls if p.startswith("/fake-operations/")) >= 7
    cloud.terminate("c1")
    assert azure_fake.inventory() == []
    cloud.terminate("c1")  # idempotent
    assert records.groups("c1") is None


def test_infiniband_gang_gets_zone_and_proximity_group_and_hpc_image(
        azure_fake: AzureFake, cloud: AzureCloud) -> None:
    r = req("ib", instance_type="Standard_ND96asr_v4", accelerator="A100",
            accelerator_count=8, fabric="infiniband")
    # zone 1 has no capacity (in the operation, as ARM reports it): zone 2 is used
    azure_fake.fail("PUT", r"/virtualMachines/ib-0$", 200, "ZonalAllocationFailed",
                    "Allocation failed. We do not have sufficient capacity for the requested "
                    "VM size in this zone.", in_operation=True)
    cloud.provision(r)
    vm = azure_fake.vm("ib-1")
    assert vm["zones"] == ["2"]
    ppg = next(v for v in azure_fake.resources.values() if v["name"] == "ib-ppg")
    assert ppg["zones"] == ["2"]
    assert vm["properties"]["proximityPlacementGroup"]["id"] == ppg["id"]
    assert vm["properties"]["storageProfile"]["imageReference"]["offer"] == "ubuntu-hpc"
    cloud.terminate("ib")
    assert azure_fake.inventory() == []


def test_query_tells_eviction_from_user_stop_and_delete(azure_fake: AzureFake,
                                                       cloud: AzureCloud) -> None:
    spot = cloud.provision(req("sp", use_spot=True))
    azure_fake.evict([spot.nodes[1].node_id])  # evictionPolicy Delete: the VM is gone
    states = cloud.query("sp")
    assert states[spot.nodes[0].node_id] == NodeState.RUNNING
    assert states[spot.nodes[1].node_id] == NodeState.PREEMPTED
    azure_fake.evict([spot.nodes[0].node_id], deallocate=True)  # a Deallocate eviction
    assert cloud.query("sp")[spot.nodes[0].node_id] == NodeState.PREEMPTED
    with pytest.raises(InvalidRequestError):
        cloud.stop("sp")

    od = cloud.provision(req("od"))
    cloud.stop("od")  # the user's stop: deallocated, not preempted
    assert set(cloud.query("od").values()) == {NodeState.STOPPED}
    info = cloud.start("od")
    assert set(cloud.query("od").values()) == {NodeState.RUNNING}
    assert [n.internal_ip for n in info.nodes] == [n.internal_ip for n in od.nodes]
    assert cloud.list_tagged_clusters().keys() == {"sp", "od"}
    cloud.terminate("od")
    assert set(cloud.query("od").values()) <= {NodeState.TERMINATED}
    cloud.terminate("sp")
    assert azure_fake.inventory() == []


def test_terminate_without_record_finds_the_tagged_group(azure_fake: AzureFake,
                                                        cloud: AzureCloud) -> None:
    cloud.provision(req("lost"))
    records.drop_cluster("lost")  # a client killed before anything was written locally
    assert list(cloud.list_tagged_clusters()) == ["lost"]
    kinds = [r.kind for r in cloud.list_tagged_resources()["lost"]]
    assert "instance" in kinds and kinds.count("resource group") == 1
    cloud.terminate("lost")
    assert azure_fake.inventory() == []


@pytest.mark.parametrize(("status", "code", "message", "in_op", "expected"), [
    (409, "SkuNotAvailable", "The requested size for resource is currently not available "
     "in location 'eastus' zones '' for subscription", False, CapacityError),
    (200, "AllocationFailed", "Allocation failed. We do not have sufficient capacity",
     True, CapacityError),
    (200, "OverconstrainedAllocationRequest", "Allocation failed. VM(s) with the following "
     "constraints cannot be allocated", True, CapacityError),
    (409, "OperationNotAllowed", "Operation could not be completed as it results in "
     "exceeding approved standardDSv5Family Cores quota.", False, QuotaError),
    (409, "QuotaExceeded", "Operation results in exceeding quota limits of Core.", False,
     QuotaError),
    (403, "AuthorizationFailed", "The client 'x' with object id 'y' does not have "
     "authorization to perform action 'Microsoft.Compute/virtualMachines/write'", False,
     AuthError),
    (400, "InvalidParameter", "The value of parameter imageReference is invalid.", False,
     InvalidRequestError),
])
def test_error_classes_map_and_leave_nothing(azure_fake: AzureFake, cloud: AzureCloud,
                                             status: int, code: str, message: str,
                                             in_op: bool, expected: type) -> None:
    azure_fake.fail("PUT", r"/virtualMachines/e-1$", status, code, message,
                    in_operation=in_op)
    with pytest.raises(expected) as err:
        cloud.provision(req("e"))
    assert type(err.value) is expected and code in str(err.value)
    assert err.value.region == "eastus"
    assert azure_fake.inventory() == []


def test_unauthenticated_request_is_auth_error(azure_fake: AzureFake, cloud: AzureCloud) -> None:
    azure_fake.fail("PUT", r"/resourcegroups/", 401, "InvalidAuthenticationToken",
                    "The access token is invalid.")
    with pytest.raises(AuthError):
        cloud.provision(req("a"))
    assert azure_fake.inventory() == []


def test_throttling_and_conflicts_are_retried(azure_fake: AzureFake, cloud: AzureCloud) -> None:
    azure_fake.fail("PUT", r"/networkInterfaces/t-0-nic$", 429, "TooManyRequests",
                    "throttled", retry_after=1)
    azure_fake.fail("PUT", r"/virtualNetworks/", 409, "AnotherOperationInProgress",
                    "Another operation on this or dependent resource is in progress.")
    cloud.provision(req("t", num_nodes=1))
    calls = [p for m, p in azure_fake.calls if m == "PUT" and p.endswith("/t-0-nic")]
    assert len(calls) == 2
    cloud.terminate("t")


def test_classify_by_code_and_status() -> None:
    assert classify("ZonalAllocationFailed") is CapacityError
    assert classify("OperationNotAllowed", "The operation is not allowed") is InvalidRequestError
    assert classify("Whatever", "", 403) is AuthError


def test_task_config_overrides_apply_to_one_launch(azure_fake: AzureFake,
                                                   cloud: AzureCloud) -> None:
    info = cloud.provision(req("ov", num_nodes=1,
                               settings={"azure": {"use_internal_ips": True, "ssh_user": "me"}}))
    assert info.nodes[0].external_ip is None and info.nodes[0].ssh_user == "me"
    assert not [r for r in azure_fake.resources.values()
                if r["type"].endswith("publicIPAddresses")]
    cloud.terminate("ov")
