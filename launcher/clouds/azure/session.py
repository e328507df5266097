"""Azure credentials, subscription and management clients; the credential check.

- `local_credentials_source()` says, with no network and no SDK import, whether
  `DefaultAzureCredential` can possibly find credentials here: a service principal in
  the environment (`AZURE_CLIENT_ID` + `AZURE_TENANT_ID` + `AZURE_CLIENT_SECRET` or
  `AZURE_CLIENT_CERTIFICATE_PATH`, or `AZURE_FEDERATED_TOKEN_FILE` for workload
  identity), a managed identity endpoint (`IDENTITY_ENDPOINT` / `MSI_ENDPOINT`), an
  Azure VM (DMI asset tag of Azure), or an Azure CLI login (`azureProfile.json` in
  `AZURE_CONFIG_DIR`, default `~/.azure`). `subscription_id()` reads the config, then
  `AZURE_SUBSCRIPTION_ID`, then the CLI profile's default subscription.
- `Clients` builds (once, thread-safe) the compute, network and resource clients of one
  `DefaultAzureCredential` (its chain is narrowed by the standard
  `AZURE_TOKEN_CREDENTIALS` variable) against the configured ARM endpoint
  (`azure.resource_manager_endpoint`, `AZURE_RESOURCE_MANAGER_ENDPOINT`). A plain-http
  endpoint is accepted only on a loopback address (a local proxy or emulator): bearer
  tokens are still sent, never to a remote http host.
- `check_credentials()` answers without the SDK when nothing is configured; otherwise
  it gets a token (short timeout) and names the identity from its claims.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from launcher.clouds.status import CredentialStatus
from launcher.config.azure import AzureSettings

CLOUD = "azure"
POLLING_INTERVAL_S = 5  # between LRO polls when the service sends no Retry-After
CHECK_TIMEOUT_S = 10
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
RETRY_TOTAL = 6  # azure-core's retry of 408/429/500/502/503/504 (honours Retry-After)


def _config_dir() -> Path:
    env = os.environ.get("AZURE_CONFIG_DIR")
    return Path(env).expanduser() if env else Path.home() / ".azure"


def cli_profile() -> dict[str, Any]:
    """The Azure CLI's azureProfile.json ({} when absent or unreadable)."""
    path = _config_dir() / "azureProfile.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cli_default_subscription() -> dict[str, Any] | None:
    for sub in cli_profile().get("subscriptions") or []:
        if isinstance(sub, dict) and sub.get("isDefault"):
            return sub
    return None


def subscription_id(settings: AzureSettings) -> str | None:
    """config `azure.subscription_id`, else AZURE_SUBSCRIPTION_ID, else the CLI's default."""
    if settings.subscription_id:
        return settings.subscription_id
    if os.environ.get("AZURE_SUBSCRIPTION_ID"):
        return os.environ["AZURE_SUBSCRIPTION_ID"]
    sub = _cli_default_subscription()
    return str(sub["id"]) if sub and sub.get("id") else None


def _is_azure_vm() -> bool:
    try:
        tag = Path("/sys/devices/virtual/dmi/id/chassis_asset_tag").read_text().strip()
    except OSError:
        return False
    return tag == "7783-7084-3265-9085-8269-3286-77"  # Azure's documented asset tag


def local_credentials_source() -> str | None:
    """Where DefaultAzureCredential would find credentials, or None. No network, no SDK."""
    env = os.environ
    if env.get("AZURE_CLIENT_ID") and env.get("AZURE_TENANT_ID"):
        if env.get("AZURE_CLIENT_SECRET") or env.get("AZURE_CLIENT_CERTIFICATE_PATH"):
            return "service principal (environment)"
        if env.get("AZURE_FEDERATED_TOKEN_FILE"):
            return "workload identity"
    if env.get("IDENTITY_ENDPOINT") or env.get("MSI_ENDPOINT"):
        return "managed identity"
    if (_config_dir() / "azureProfile.json").is_file():
        return "Azure CLI login"
    if _is_azure_vm():
        return "managed identity (Azure VM)"
    return None


def polling_interval() -> float:
    """Seconds between polls of a long-running operation when ARM sends no Retry-After:
    LAUNCHER_AZURE_POLLING_INTERVAL, default POLLING_INTERVAL_S."""
    try:
        return max(0.0, float(os.environ.get("LAUNCHER_AZURE_POLLING_INTERVAL", "")))
    except ValueError:
        return POLLING_INTERVAL_S


def _loopback_http(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme == "http" and (parsed.hostname or "") in ("127.0.0.1", "localhost", "::1")


def auth_policy(credential: Any, endpoint: str, scope: str) -> Any:
    """ARM's bearer-token policy; for a loopback http endpoint, one that allows http."""
    from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy

    if not _loopback_http(endpoint):
        return ARMChallengeAuthenticationPolicy(credential, scope)

    class LoopbackBearerPolicy(ARMChallengeAuthenticationPolicy):
        def on_request(self, request: Any) -> None:
            request.context.options["enforce_https"] = False
            super().on_request(request)

    return LoopbackBearerPolicy(credential, scope)


def token_scope(endpoint: str) -> str:
    """The OAuth scope of an ARM endpoint (public cloud: management.azure.com)."""
    if endpoint.startswith("https://management.azure.com") or _loopback_http(endpoint):
        return "https://management.azure.com/.default"
    return endpoint.rstrip("/") + "/.default"


class Clients:
    """The management clients of one subscription (built on first use, cached).
    Thread-safe; the first use imports the SDKs. Raises AuthError (no subscription)."""

    def __init__(self, settings: AzureSettings, credential: Any = None) -> None:
        self.settings = settings
        self._credential = credential
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}

    @property
    def subscription(self) -> str:
        from launcher.clouds.base import AuthError

        sub = subscription_id(self.settings)
        if not sub:
            raise AuthError("no Azure subscription (set AZURE_SUBSCRIPTION_ID or "
                            "azure.subscription_id, or run `az login`)", cloud=CLOUD)
        return sub

    def credential(self) -> Any:
        with self._lock:
            if self._credential is None:
                from azure.identity import DefaultAzureCredential

                self._credential = DefaultAzureCredential()
            return self._credential

    def _kwargs(self) -> dict[str, Any]:
        endpoint = self.settings.endpoint()
        return {
            "base_url": endpoint,
            "polling_interval": polling_interval(),
            "authentication_policy": auth_policy(self.credential(), endpoint,
                                                 token_scope(endpoint)),
            "retry_total": RETRY_TOTAL,
            "connection_timeout": CONNECT_TIMEOUT_S,
            "read_timeout": READ_TIMEOUT_S,
        }

    def _get(self, kind: str) -> Any:
        with self._lock:
            hit = self._clients.get(kind)
        if hit is not None:
            return hit
        kwargs, sub, cred = self._kwargs(), self.subscription, self.credential()
        if kind == "compute":
            from azure.mgmt.compute import ComputeManagementClient as C
        elif kind == "network":
            from azure.mgmt.network import NetworkManagementClient as C  # type: ignore[assignment]
        else:
            from azure.mgmt.resource.resources import (  # type: ignore[assignment]
                ResourceManagementClient as C,
            )
        client = C(cred, sub, **kwargs)
        with self._lock:
            return self._clients.setdefault(kind, client)

    def compute(self) -> Any:
        return self._get("compute")

    def network(self) -> Any:
        return self._get("network")

    def resource(self) -> Any:
        return self._get("resource")


def _claims(token: str) -> dict[str, Any]:
    try:
        payload = token.split(".")[1]
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def identity_name(token: str) -> str:
    """Who a token belongs to, from its claims (upn / unique_name / app id / oid)."""
    c = _claims(token)
    for key in ("upn", "unique_name", "preferred_username", "email"):
        if c.get(key):
            return str(c[key])
    if c.get("appid"):
        return f"app {c['appid']}"
    return f"object {c['oid']}" if c.get("oid") else "unknown identity"


def presence(settings: AzureSettings) -> CredentialStatus:
    """Whether credentials and a subscription are configured here, not whether they
    work. No network, no SDK import."""
    source = local_credentials_source()
    if source is None:
        return CredentialStatus(False, "no Azure credentials (run `az login`, or set "
                                       "AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET)")
    sub = subscription_id(settings)
    if not sub:
        return CredentialStatus(False, f"Azure credentials from {source}, but no subscription "
                                       "(set AZURE_SUBSCRIPTION_ID or run `az account set`)")
    return CredentialStatus(True, f"Azure credentials from {source}, subscription {sub}")


def check_credentials(settings: AzureSettings, credential: Any = None) -> CredentialStatus:
    """Are Azure credentials and a subscription usable? Never raises."""
    found = presence(settings)
    if not found.enabled:
        return found
    source = local_credentials_source()
    sub = subscription_id(settings)
    try:
        clients = Clients(settings, credential)
        endpoint = settings.endpoint()
        token = clients.credential().get_token(token_scope(endpoint), timeout=CHECK_TIMEOUT_S)
    except Exception as exc:  # never raises: the reason is the answer
        from launcher.clouds.sdk import as_missing_sdk

        missing = as_missing_sdk(exc, "azure")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return CredentialStatus(False, f"Azure credentials from {source} unusable: "
                                       f"{missing or f'{type(exc).__name__}: {first[:200]}'}")
    name = ""
    cli = _cli_default_subscription()
    if cli and cli.get("id") == sub and cli.get("name"):
        name = f" ({cli['name']})"
    return CredentialStatus(True, f"{identity_name(token.token)}, subscription {sub}{name}")
