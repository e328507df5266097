"""Credentials and the SDK channel for the `nebius` cloud.

Where credentials come from (the SDK's own sources, in this order):
1. `nebius.credentials_file` (a service-account credentials file: the SDK's
   `credentials_file_name`),
2. `NEBIUS_IAM_TOKEN` (an IAM token; the SDK's `EnvBearer`),
3. the Nebius CLI config `~/.nebius/config.yaml` (its default profile; the SDK's
   `nebius.aio.cli_config.Config`, which also gives the profile's `parent-id` and
   endpoint).
`local_credentials_source` looks for them without importing the SDK or touching the
network, so `launcher check` on a machine without Nebius stays instant.

`Session(settings)` builds one `nebius.sdk.SDK` channel: `domain` = the configured
endpoint, and for a custom endpoint a constant resolver (every service at that address);
plaintext only when `nebius.plaintext` is set and the endpoint is loopback
(`NebiusSettings.insecure`, the SDK's `nebius.insecure` channel option). Clients of the
compute and VPC services are made from it on demand.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

from launcher.clouds.status import CredentialStatus
from launcher.config.nebius import NebiusSettings

CLI_CONFIG = Path("~/.nebius/config.yaml")
USER_AGENT = "launcher/0.1"


def local_credentials_source(settings: NebiusSettings) -> str | None:
    """Which credentials would be used ('credentials_file', 'NEBIUS_IAM_TOKEN',
    'cli_config'), or None. No SDK import, no network."""
    if settings.credentials_file:
        return "credentials_file"
    if os.environ.get("NEBIUS_IAM_TOKEN"):
        return "NEBIUS_IAM_TOKEN"
    if CLI_CONFIG.expanduser().is_file():
        return "cli_config"
    return None


def presence(settings: NebiusSettings) -> CredentialStatus:
    """Whether credentials are configured here (`local_credentials_source`), not whether
    they work. No network, no SDK import."""
    source = local_credentials_source(settings)
    if source is None:
        return CredentialStatus(False, "no Nebius credentials (set NEBIUS_IAM_TOKEN, run "
                                "`nebius profile create`, or set nebius.credentials_file)")
    return CredentialStatus(True, f"Nebius credentials from {source}")


class Session:
    """One SDK channel for `settings` (thread-safe, built lazily). `close()` ends it."""

    def __init__(self, settings: NebiusSettings) -> None:
        self.settings = settings
        self._sdk: Any = None
        self._lock = threading.Lock()
        self._project: str | None = None

    def sdk(self) -> Any:
        with self._lock:
            if self._sdk is None:
                self._sdk = self._build()
            return self._sdk

    def _build(self) -> Any:
        from nebius.sdk import SDK

        s = self.settings
        kwargs: dict[str, Any] = {"user_agent_prefix": USER_AGENT}
        source = local_credentials_source(s)
        if source == "credentials_file":
            kwargs["credentials_file_name"] = str(Path(s.credentials_file or "").expanduser())
        elif source == "NEBIUS_IAM_TOKEN":
            kwargs["credentials"] = os.environ["NEBIUS_IAM_TOKEN"]
        elif source == "cli_config":
            from nebius.aio.cli_config import Config

            kwargs["config_reader"] = Config()
        if s.custom_endpoint() or source != "cli_config":
            kwargs["domain"] = s.endpoint()
        if s.custom_endpoint():
            from nebius.base.resolver import Constant

            kwargs["resolver"] = Constant(s.endpoint())
        if s.insecure():
            kwargs["options"] = [("nebius.insecure", True)]
        return SDK(**kwargs)

    def project(self) -> str | None:
        """The parent id: the setting / NEBIUS_PROJECT_ID, else the CLI profile's."""
        if self.settings.project():
            return self.settings.project()
        if self._project is None and local_credentials_source(self.settings) == "cli_config":
            try:
                from nebius.aio.cli_config import Config

                self._project = Config().parent_id or None
            except Exception:
                self._project = None
        return self._project

    def instances(self) -> Any:
        from nebius.api.nebius.compute.v1 import InstanceServiceClient

        return InstanceServiceClient(self.sdk())

    def disks(self) -> Any:
        from nebius.api.nebius.compute.v1 import DiskServiceClient

        return DiskServiceClient(self.sdk())

    def gpu_clusters(self) -> Any:
        from nebius.api.nebius.compute.v1 import GpuClusterServiceClient

        return GpuClusterServiceClient(self.sdk())

    def subnets(self) -> Any:
        from nebius.api.nebius.vpc.v1 import SubnetServiceClient

        return SubnetServiceClient(self.sdk())

    def close(self) -> None:
        with self._lock:
            sdk, self._sdk = self._sdk, None
        if sdk is not None:
            with contextlib.suppress(Exception):  # closing must not fail a teardown
                sdk.sync_close(timeout=5)


def check_credentials(session: Session | None, settings: NebiusSettings) -> CredentialStatus:
    """Enabled with which identity/project, or why not. Never raises. Lists one page of
    instances in the project to prove the credentials (a network call only when
    credentials are configured)."""
    found = presence(settings)
    if not found.enabled:
        return found
    source = local_credentials_source(settings)
    session = session or Session(settings)
    project = session.project() or next(iter(sorted(settings.projects.values())), None)
    if not project:
        return CredentialStatus(False, "no Nebius project: set nebius.project_id, "
                                "nebius.projects or NEBIUS_PROJECT_ID")
    try:
        from nebius.api.nebius.compute.v1 import ListInstancesRequest

        from launcher.clouds.nebius.errors import nebius_errors

        with nebius_errors(action="list instances"):
            session.instances().list(ListInstancesRequest(parent_id=project, page_size=1),
                                     timeout=5).wait()
    except Exception as exc:
        from launcher.clouds.sdk import as_missing_sdk

        return CredentialStatus(False, f"{source}: {as_missing_sdk(exc, 'nebius') or exc}")
    return CredentialStatus(True, f"{source}, project {project} at {settings.endpoint()}")
