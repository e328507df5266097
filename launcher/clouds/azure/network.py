"""Per-cluster network in the cluster's resource group: NSG, vnet/subnet, public IPs, NICs.

The NSG allows SSH (22) from `azure.ssh_cidr`, everything from inside the vnet (the gang
and its fabric traffic), and the task's `ports`; the vnet's one subnet spans
`azure.vnet_cidr`. Each node gets a NIC (dynamic private IP) and, unless
`azure.use_internal_ips`, a Standard static public IP (zonal with the gang's zone).
Every call waits for its long-running operation. Raises typed CloudErrors.
"""

from __future__ import annotations

from typing import Any

from launcher.clouds.azure import names
from launcher.clouds.azure.errors import azure_errors, retry_conflicts, wait_lro
from launcher.config.azure import AzureSettings


def _port_ranges(ports: tuple[str, ...]) -> list[str]:
    return [str(p).strip() for p in ports if str(p).strip()]


def nsg_body(location: str, settings: AzureSettings, ports: tuple[str, ...],
             tags: dict[str, str]) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        _rule("ssh", 1000, settings.ssh_cidr, "22"),
        _rule("intra-vnet", 1010, "VirtualNetwork", "*", protocol="*"),
    ]
    ranges = _port_ranges(ports)
    if ranges:
        rules.append({"name": "task-ports", "properties": {
            "priority": 1100, "direction": "Inbound", "access": "Allow", "protocol": "Tcp",
            "sourceAddressPrefix": "*", "sourcePortRange": "*",
            "destinationAddressPrefix": "*", "destinationPortRanges": ranges}})
    return {"location": location, "tags": tags, "properties": {"securityRules": rules}}


def _rule(name: str, priority: int, source: str, port: str, protocol: str = "Tcp") -> dict[str, Any]:
    return {"name": name, "properties": {
        "priority": priority, "direction": "Inbound", "access": "Allow", "protocol": protocol,
        "sourceAddressPrefix": source, "sourcePortRange": "*",
        "destinationAddressPrefix": "*", "destinationPortRange": port}}


def create_network(network: Any, group: str, location: str, cluster: str,
                   settings: AzureSettings, ports: tuple[str, ...], tags: dict[str, str],
                   timeout: float) -> str:
    """NSG + vnet with its subnet; returns the subnet's resource id."""
    with azure_errors(region=location, action="create network security group"):
        nsg = retry_conflicts(lambda: wait_lro(network.network_security_groups.begin_create_or_update(
            group, names.nsg(cluster), nsg_body(location, settings, ports, tags)
        ), timeout)).as_dict()
    body = {"location": location, "tags": tags, "properties": {
        "addressSpace": {"addressPrefixes": [settings.vnet_cidr]},
        "subnets": [{"name": names.SUBNET, "properties": {
            "addressPrefix": settings.vnet_cidr,
            "networkSecurityGroup": {"id": nsg["id"]}}}]}}
    with azure_errors(region=location, action="create virtual network"):
        vnet = retry_conflicts(lambda: wait_lro(network.virtual_networks.begin_create_or_update(
            group, names.vnet(cluster), body), timeout)).as_dict()
    return str(vnet["properties"]["subnets"][0]["id"])


def create_public_ip(network: Any, group: str, location: str, cluster: str, rank: int,
                     zone: str | None, tags: dict[str, str], timeout: float) -> dict[str, Any]:
    body: dict[str, Any] = {"location": location, "tags": tags, "sku": {"name": "Standard"},
                            "properties": {"publicIPAllocationMethod": "Static",
                                           "publicIPAddressVersion": "IPv4"}}
    if zone:
        body["zones"] = [zone]
    with azure_errors(region=location, zone=zone, action="create public IP"):
        result: dict[str, Any] = retry_conflicts(
            lambda: wait_lro(network.public_ip_addresses.begin_create_or_update(
                group, names.public_ip(cluster, rank), body), timeout)).as_dict()
    return result


def create_nic(network: Any, group: str, location: str, cluster: str, rank: int,
               subnet_id: str, public_ip_id: str | None, tags: dict[str, str],
               timeout: float) -> dict[str, Any]:
    ipconf: dict[str, Any] = {"subnet": {"id": subnet_id},
                              "privateIPAllocationMethod": "Dynamic", "primary": True}
    if public_ip_id:
        ipconf["publicIPAddress"] = {"id": public_ip_id}
    body = {"location": location, "tags": tags,
            "properties": {"ipConfigurations": [{"name": "ipconfig1", "properties": ipconf}]}}
    with azure_errors(region=location, action="create network interface"):
        result: dict[str, Any] = retry_conflicts(
            lambda: wait_lro(network.network_interfaces.begin_create_or_update(
                group, names.nic(cluster, rank), body), timeout)).as_dict()
    return result


def private_ip(nic: dict[str, Any]) -> str:
    return str(nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"])


def public_ip_address(network: Any, group: str, name: str, location: str) -> str | None:
    with azure_errors(region=location, action="get public IP"):
        ip = network.public_ip_addresses.get(group, name).as_dict()
    value = (ip.get("properties") or {}).get("ipAddress")
    return str(value) if value else None
