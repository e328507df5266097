"""GCP credentials, project and Compute API clients.

- `local_credentials()` says, without importing any Google library and without any
  network, whether Application Default Credentials can be found here and which project
  and account they mean: `GOOGLE_APPLICATION_CREDENTIALS` (a service-account or
  authorized-user JSON file), gcloud's ADC file
  (`$CLOUDSDK_CONFIG/application_default_credentials.json`, default
  `~/.config/gcloud/`), or this machine being a GCE VM (its service account). The
  project: the `gcp.project` setting, else `GOOGLE_CLOUD_PROJECT` /
  `CLOUDSDK_CORE_PROJECT`, else the credential file's `project_id` /
  `quota_project_id`, else gcloud's active configuration (`[core] project`). The
  account: gcloud's `[core] account`, else the service account's `client_email`.
- `Clients` builds (and caches) compute_v1 REST clients from one set of credentials
  (`google.auth.default`, cloud-platform scope). The API endpoint is Google's unless
  the `gcp.api_endpoint` setting or gcloud's own `CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE`
  variable names another (a private endpoint, a proxy; the tests' local fake).
  Every operations client is built with the same options, so waiting on an operation
  asks the same endpoint. Thread-safe.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.clouds.status import CredentialStatus
from launcher.config.settings import GCPSettings

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
ENDPOINT_ENV = "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE"
TIMEOUT_S = 60.0
CHECK_TIMEOUT_S = 5.0  # the token request of `launcher check`


@dataclass(frozen=True)
class LocalCredentials:
    """What the environment says about GCP credentials (no network involved)."""

    source: str | None  # where ADC would come from; None: nowhere
    project: str | None
    account: str | None


def gcloud_dir() -> Path:
    env = os.environ.get("CLOUDSDK_CONFIG")
    return Path(env).expanduser() if env else Path.home() / ".config" / "gcloud"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _gcloud_core() -> dict[str, str]:
    """gcloud's active configuration's [core] section ({} when none)."""
    base = gcloud_dir()
    active = os.environ.get("CLOUDSDK_ACTIVE_CONFIG_NAME")
    if not active:
        try:
            active = (base / "active_config").read_text(encoding="utf-8").strip() or "default"
        except OSError:
            active = "default"
    import configparser  # only here: reading the key files needs none of it

    parser = configparser.ConfigParser()
    try:
        parser.read(base / "configurations" / f"config_{active}", encoding="utf-8")
    except configparser.Error:
        return {}
    return dict(parser["core"]) if parser.has_section("core") else {}


def _is_gce_host() -> bool:
    try:
        name = Path("/sys/class/dmi/id/product_name").read_text(encoding="ascii").strip()
    except OSError:
        return False
    return name.startswith("Google Compute Engine")


def local_credentials(settings: GCPSettings | None = None) -> LocalCredentials:
    """See the module docstring. Never raises, never touches the network."""
    env = os.environ
    core = _gcloud_core()
    source: str | None = None
    info: dict[str, Any] = {}
    explicit = env.get("GOOGLE_APPLICATION_CREDENTIALS")
    adc = gcloud_dir() / "application_default_credentials.json"
    if explicit and Path(explicit).expanduser().is_file():
        source, info = explicit, _read_json(Path(explicit).expanduser())
    elif adc.is_file():
        source, info = str(adc), _read_json(adc)
    elif _is_gce_host():
        source = "GCE metadata server"
    project = ((settings.project if settings else None) or env.get("GOOGLE_CLOUD_PROJECT")
               or env.get("CLOUDSDK_CORE_PROJECT") or info.get("project_id")
               or info.get("quota_project_id") or core.get("project"))
    account = core.get("account") or info.get("client_email")
    return LocalCredentials(source, str(project) if project else None,
                            str(account) if account else None)


def presence(settings: GCPSettings) -> CredentialStatus:
    """Whether credentials and a project are configured here (`local_credentials`), not
    whether they work. No network, no Google library import."""
    return presence_of(local_credentials(settings))


def presence_of(local: LocalCredentials) -> CredentialStatus:
    """`presence` from credentials already looked up."""
    if local.source is None:
        return CredentialStatus(False, "no GCP credentials (run `gcloud auth application-"
                                       "default login`, or set GOOGLE_APPLICATION_CREDENTIALS)")
    if not local.project:
        return CredentialStatus(False, f"credentials from {local.source}, but no project "
                                       "(gcp.project, GOOGLE_CLOUD_PROJECT or gcloud config)")
    return CredentialStatus(True, f"GCP credentials from {local.source}, project {local.project}")


def api_endpoint(settings: GCPSettings) -> str | None:
    """The Compute API endpoint to use (None: Google's own). gcloud's override variable
    holds a URL with the API path (`https://HOST/compute/v1/`): only scheme and host
    (and port) are kept, the client adds the path."""
    raw = settings.api_endpoint or os.environ.get(ENDPOINT_ENV)
    if not raw:
        return None
    raw = raw.rstrip("/")
    for suffix in ("/compute/v1", "/compute/beta"):
        if raw.endswith(suffix):
            raw = raw[: -len(suffix)]
    return raw


class Clients:
    """Cached compute_v1 clients (see the module docstring). The first call imports
    google-cloud-compute. `credentials`: given (tests: AnonymousCredentials), else ADC."""

    def __init__(self, settings: GCPSettings, *, credentials: Any = None,
                 endpoint: str | None = None) -> None:
        self._settings = settings
        self._credentials = credentials
        self._endpoint = endpoint or api_endpoint(settings)
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}

    @property
    def endpoint(self) -> str | None:
        return self._endpoint

    def credentials(self) -> Any:
        if self._credentials is None:
            import google.auth

            creds, _ = google.auth.default(scopes=list(SCOPES))
            self._credentials = creds
        return self._credentials

    def get(self, kind: str) -> Any:
        """The client of compute_v1 class `kind` (e.g. "InstancesClient")."""
        with self._lock:
            hit = self._clients.get(kind)
            if hit is None:
                from google.cloud import compute_v1

                options = {"api_endpoint": self._endpoint} if self._endpoint else None
                hit = getattr(compute_v1, kind)(credentials=self.credentials(),
                                                client_options=options)
                self._clients[kind] = hit
            return hit

    def instances(self) -> Any:
        return self.get("InstancesClient")

    def zone_operations(self) -> Any:
        return self.get("ZoneOperationsClient")

    def region_operations(self) -> Any:
        return self.get("RegionOperationsClient")

    def global_operations(self) -> Any:
        return self.get("GlobalOperationsClient")

    def firewalls(self) -> Any:
        return self.get("FirewallsClient")

    def resource_policies(self) -> Any:
        return self.get("ResourcePoliciesClient")

    def images(self) -> Any:
        return self.get("ImagesClient")

    def machine_types(self) -> Any:
        return self.get("MachineTypesClient")


def check_token(clients: Clients, source: str, project: str,
                account: str | None) -> CredentialStatus:
    """Obtain a token from the credentials (short timeout): enabled with project and
    account, or why not. Never raises."""
    try:
        creds = clients.credentials()
        if not getattr(creds, "token", None) and hasattr(creds, "refresh"):
            from google.auth.transport.requests import Request

            class _Short(Request):  # google-auth's default is 120 s per token request
                def __call__(self, *args: Any, **kwargs: Any) -> Any:
                    kwargs["timeout"] = CHECK_TIMEOUT_S
                    return super().__call__(*args, **kwargs)

            creds.refresh(_Short())
    except Exception as exc:  # never raises: the reason is the answer
        from launcher.clouds.sdk import as_missing_sdk

        missing = as_missing_sdk(exc, "gcp")
        return CredentialStatus(False, f"GCP credentials from {source} unusable: "
                                       f"{missing or f'{type(exc).__name__}: {exc}'}")
    who = account or getattr(creds, "service_account_email", None) or "application default"
    return CredentialStatus(True, f"project {project}, account {who}")
