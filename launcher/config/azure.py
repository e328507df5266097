"""The `azure:` section of `$LAUNCHER_HOME/config.yaml` (how the `azure` cloud provisions).

    azure:                   # every key optional (docs/azure.md)
      subscription_id: 00000000-0000-0000-0000-000000000000
                                # default: AZURE_SUBSCRIPTION_ID, else the Azure CLI's
                                # default subscription (~/.azure/azureProfile.json)
      use_internal_ips: false   # reach nodes on their private IPs (VPN / peered vnet):
                                # no public IP is created
      ssh_user: azureuser       # the admin user created on every VM
      ssh_cidr: "*"             # where SSH (22) is allowed from (an NSG source prefix)
      vnet_cidr: 10.0.0.0/16    # address space of each cluster's vnet (one subnet = all of it);
                                # pick one that does not overlap your VPN
      resource_manager_endpoint: https://management.azure.com
                                # another ARM endpoint (sovereign clouds, a private link or
                                # proxy); AZURE_RESOURCE_MANAGER_ENDPOINT also sets it
      zones: {eastus: ["1", "2"]}   # per location, the zones InfiniBand gangs may use, in
                                # order (default "1", "2", "3")

Stdlib only: parsing it imports no Azure SDK. Malformed values raise ConfigError naming
the field (`azure.vnet_cidr`).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import ConfigError

DEFAULT_ENDPOINT = "https://management.azure.com"
DEFAULT_ZONES = ("1", "2", "3")
AZURE_KEYS = ("subscription_id", "use_internal_ips", "ssh_user", "ssh_cidr", "vnet_cidr",
              "resource_manager_endpoint", "zones")


@dataclass(frozen=True)
class AzureSettings:
    """The `azure:` section (see the module docstring)."""

    subscription_id: str | None = None
    use_internal_ips: bool = False
    ssh_user: str = "azureuser"
    ssh_cidr: str = "*"
    vnet_cidr: str = "10.0.0.0/16"
    resource_manager_endpoint: str | None = None
    zones: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def endpoint(self) -> str:
        """The ARM endpoint: the setting, else AZURE_RESOURCE_MANAGER_ENDPOINT, else public."""
        value = self.resource_manager_endpoint or os.environ.get("AZURE_RESOURCE_MANAGER_ENDPOINT")
        return (value or DEFAULT_ENDPOINT).rstrip("/")

    def zones_for(self, location: str) -> tuple[str, ...]:
        return self.zones.get(location, DEFAULT_ZONES)


def _err(source: str, where: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: field '{where}': {message}")


def parse_azure(body: Any, source: str) -> AzureSettings:
    """Parse the `azure:` mapping (None = defaults). Raises ConfigError."""
    if body is None:
        return AzureSettings()
    if not isinstance(body, dict):
        raise _err(source, "azure", "expected a mapping (subscription_id, use_internal_ips, ...).")
    unknown = sorted(str(k) for k in body if k not in AZURE_KEYS)
    if unknown:
        raise _err(source, f"azure.{unknown[0]}",
                   f"unknown field (expected one of {', '.join(AZURE_KEYS)}).")
    internal = body.get("use_internal_ips", False)
    if not isinstance(internal, bool):
        raise _err(source, "azure.use_internal_ips", f"expected true or false, got {internal!r}.")

    def opt(key: str) -> str | None:
        value = body.get(key)
        if value is None:
            return None
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise _err(source, f"azure.{key}", f"expected a string, got {value!r}.")
        return str(value)

    vnet = opt("vnet_cidr") or "10.0.0.0/16"
    try:
        vnet = str(ipaddress.ip_network(vnet, strict=True))
    except ValueError:
        raise _err(source, "azure.vnet_cidr", f"expected a CIDR (e.g. 10.0.0.0/16), got {vnet!r}.") from None
    endpoint = opt("resource_manager_endpoint")
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise _err(source, "azure.resource_manager_endpoint",
                   f"expected an http(s) URL, got {endpoint!r}.")
    zones_raw = body.get("zones") or {}
    if not isinstance(zones_raw, dict):
        raise _err(source, "azure.zones", "expected a mapping of location -> list of zones.")
    zones: dict[str, tuple[str, ...]] = {}
    for loc, values in zones_raw.items():
        if not isinstance(values, list) or not values:
            raise _err(source, f"azure.zones.{loc}", "expected a non-empty list of zones.")
        zones[str(loc)] = tuple(str(v) for v in values)
    return AzureSettings(
        subscription_id=opt("subscription_id"),
        use_internal_ips=internal,
        ssh_user=opt("ssh_user") or "azureuser",
        ssh_cidr=opt("ssh_cidr") or "*",
        vnet_cidr=vnet,
        resource_manager_endpoint=endpoint,
        zones=zones,
    )
