"""The `nebius:` section of `$LAUNCHER_HOME/config.yaml` (how the `nebius` cloud provisions).

    nebius:                  # every key optional (docs/nebius.md)
      project_id: project-e00...   # the parent id of everything created; default
                                # NEBIUS_PROJECT_ID, else the CLI profile's parent-id
      projects: {eu-north1: project-e00..., us-central1: project-e01...}
                                # per region (Nebius projects are regional); when set,
                                # only these regions are used (others: blocked)
      api_endpoint: api.nebius.cloud:443
                                # another API address (private endpoint, proxy); every
                                # service is reached there (the SDK's `domain` + a
                                # constant resolver). NEBIUS_ENDPOINT also sets it
      plaintext: false          # gRPC without TLS; only honoured for a loopback endpoint
                                # (127.0.0.0/8, ::1, localhost), e.g. a local proxy
      credentials_file: null    # a service-account credentials file (the SDK's
                                # `credentials_file_name`); else NEBIUS_IAM_TOKEN, else
                                # the CLI config ~/.nebius/config.yaml
      use_internal_ips: false   # reach nodes on private IPs (VPN): no public IP is asked
      ssh_user: ubuntu          # the user cloud-init creates with the SSH key
      subnet_id: null           # the subnet of the nodes' interface; default: the first
                                # subnet of the project (VPC SubnetService.List)
      image_family: ubuntu22.04-cuda12   # boot disk image family (GPU platforms)
      cpu_image_family: ubuntu22.04-driverless
      disk_size_gb: 200         # boot disk size when the task gives none
      fabrics: {eu-north1: fabric-3}   # per region, the InfiniBand fabric of GPU clusters

Stdlib only: parsing it imports no Nebius SDK. Malformed values raise ConfigError naming
the field (`nebius.fabrics`).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import ConfigError

DEFAULT_ENDPOINT = "api.nebius.cloud:443"
NEBIUS_KEYS = ("project_id", "projects", "api_endpoint", "plaintext", "credentials_file",
               "use_internal_ips", "ssh_user", "subnet_id", "image_family",
               "cpu_image_family", "disk_size_gb", "fabrics")


@dataclass(frozen=True)
class NebiusSettings:
    """The `nebius:` section (see the module docstring)."""

    project_id: str | None = None
    projects: dict[str, str] = field(default_factory=dict)
    api_endpoint: str | None = None
    plaintext: bool = False
    credentials_file: str | None = None
    use_internal_ips: bool = False
    ssh_user: str = "ubuntu"
    subnet_id: str | None = None
    image_family: str = "ubuntu22.04-cuda12"
    cpu_image_family: str = "ubuntu22.04-driverless"
    disk_size_gb: int = 200
    fabrics: dict[str, str] = field(default_factory=dict)

    def endpoint(self) -> str:
        """host:port of the API: the setting, else NEBIUS_ENDPOINT, else the public one."""
        return self.api_endpoint or os.environ.get("NEBIUS_ENDPOINT") or DEFAULT_ENDPOINT

    def custom_endpoint(self) -> bool:
        return bool(self.api_endpoint or os.environ.get("NEBIUS_ENDPOINT"))

    def insecure(self) -> bool:
        """Plaintext gRPC: asked for AND the endpoint is loopback (never over a network)."""
        return self.plaintext and is_loopback(self.endpoint())

    def project(self) -> str | None:
        return self.project_id or os.environ.get("NEBIUS_PROJECT_ID") or None

    def project_for(self, region: str) -> str | None:
        """The region's project when `projects` is set (None: not configured there),
        else None (the caller falls back to `project()` / the CLI profile's)."""
        return self.projects.get(region)


def is_loopback(endpoint: str) -> bool:
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _err(source: str, where: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: field '{where}': {message}")


def parse_nebius(body: Any, source: str) -> NebiusSettings:
    """Parse the `nebius:` mapping (None = defaults). Raises ConfigError."""
    if body is None:
        return NebiusSettings()
    if not isinstance(body, dict):
        raise _err(source, "nebius", "expected a mapping (project_id, api_endpoint, ...).")
    unknown = sorted(str(k) for k in body if k not in NEBIUS_KEYS)
    if unknown:
        raise _err(source, f"nebius.{unknown[0]}",
                   f"unknown field (expected one of {', '.join(NEBIUS_KEYS)}).")
    flags = {}
    for key in ("plaintext", "use_internal_ips"):
        value = body.get(key, False)
        if not isinstance(value, bool):
            raise _err(source, f"nebius.{key}", f"expected true or false, got {value!r}.")
        flags[key] = value

    def opt(key: str) -> str | None:
        value = body.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise _err(source, f"nebius.{key}", f"expected a non-empty string, got {value!r}.")
        return value

    endpoint = opt("api_endpoint")
    if endpoint and (endpoint.startswith(("http://", "https://")) or ":" not in endpoint):
        raise _err(source, "nebius.api_endpoint",
                   f"expected host:port (a gRPC address), got {endpoint!r}.")
    disk = body.get("disk_size_gb", 200)
    if not isinstance(disk, int) or isinstance(disk, bool) or disk < 10:
        raise _err(source, "nebius.disk_size_gb", f"expected an integer >= 10, got {disk!r}.")
    projects_raw = body.get("projects") or {}
    if not isinstance(projects_raw, dict) or not all(
            isinstance(v, str) and v for v in projects_raw.values()):
        raise _err(source, "nebius.projects", "expected a mapping of region -> project id.")
    fabrics_raw = body.get("fabrics") or {}
    if not isinstance(fabrics_raw, dict) or not all(
            isinstance(v, str) and v for v in fabrics_raw.values()):
        raise _err(source, "nebius.fabrics", "expected a mapping of region -> fabric name.")
    return NebiusSettings(
        project_id=opt("project_id"),
        projects={str(k): str(v) for k, v in projects_raw.items()}, api_endpoint=endpoint, plaintext=flags["plaintext"],
        credentials_file=opt("credentials_file"), use_internal_ips=flags["use_internal_ips"],
        ssh_user=opt("ssh_user") or "ubuntu", subnet_id=opt("subnet_id"),
        image_family=opt("image_family") or "ubuntu22.04-cuda12",
        cpu_image_family=opt("cpu_image_family") or "ubuntu22.04-driverless",
        disk_size_gb=disk, fabrics={str(k): str(v) for k, v in fabrics_raw.items()})
