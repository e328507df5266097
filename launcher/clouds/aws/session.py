"""boto3 clients for the AWS cloud, and the credential check.

- `local_credentials_source()` says, without importing boto3 and without any network,
  whether the standard credential chain can possibly find credentials here: the
  `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` variables, `AWS_PROFILE`, a web identity
  token file, a container credentials endpoint, the shared credentials/config files
  (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`, default `~/.aws/...`, which also
  hold SSO profiles), or this machine being an EC2 instance (DMI vendor / hypervisor
  uuid), where the instance role is read from IMDS. When none of these holds, `check()`
  answers at once and boto3 is never imported: a laptop without AWS pays nothing.
- `ClientFactory` makes (and caches, per service and region) boto3 clients from one
  boto3 Session, with botocore's own retry of throttling errors (`RequestLimitExceeded`,
  `Throttling`: retry mode "adaptive", client-side rate limiting and backoff), short
  connect/read timeouts, and a short IMDS timeout (1 s, one attempt) so a machine that
  only looks like EC2 never stalls. Capacity and quota errors are never retried there:
  EC2 answers `InsufficientInstanceCapacity` with HTTP 500, which botocore's retry
  modes treat as transient (8 attempts with backoff: ~20 s in one zone before failover
  could block it); they go straight to failover (`_no_retry_for_failover`).
  `AWS_PROFILE`, `AWS_REGION` and `AWS_ENDPOINT_URL` are honoured by botocore itself.
  Thread-safe.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from launcher.clouds.status import CredentialStatus

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 60
MAX_ATTEMPTS = 8  # throttling and transient errors, with botocore's backoff
CHECK_TIMEOUT_S = 5  # sts get-caller-identity in `check()`
IMDS_TIMEOUT_S = 1


def _is_ec2_host() -> bool:
    """This machine is an EC2 instance (Nitro: DMI vendor; Xen: hypervisor uuid)."""
    for path, marker in (
        ("/sys/devices/virtual/dmi/id/board_vendor", "amazon ec2"),
        ("/sys/devices/virtual/dmi/id/sys_vendor", "amazon ec2"),
        ("/sys/hypervisor/uuid", "ec2"),
    ):
        try:
            text = Path(path).read_text(encoding="ascii", errors="replace").strip().lower()
        except OSError:
            continue
        if text.startswith(marker):
            return True
    return False


def local_credentials_source() -> str | None:
    """Where the standard chain would find credentials, or None when it cannot.

    No network, no boto3 import. A source named here may still turn out unusable
    (an expired key, an empty profile): `check()` then asks STS."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return "environment variables"
    if env.get("AWS_PROFILE"):
        return f"profile {env['AWS_PROFILE']!r}"
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return "web identity token"
    if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or env.get(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI"
    ):
        return "container credentials"
    home = Path.home()
    for var, default in (
        ("AWS_SHARED_CREDENTIALS_FILE", home / ".aws" / "credentials"),
        ("AWS_CONFIG_FILE", home / ".aws" / "config"),
    ):
        path = Path(env[var]).expanduser() if env.get(var) else default
        if path.is_file():
            return f"{path}"
    if _is_ec2_host():
        return "EC2 instance role"
    return None


NO_CREDENTIALS = ("no AWS credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or "
                  "AWS_PROFILE, run `aws configure` or `aws sso login`)")


def presence() -> CredentialStatus:
    """Whether credentials are configured here (`local_credentials_source`), not whether
    they work. No network, no boto3 import."""
    source = local_credentials_source()
    if source is None:
        return CredentialStatus(False, NO_CREDENTIALS)
    return CredentialStatus(True, f"AWS credentials from {source}")


_core_lock = threading.Lock()
_core: Any = None


def _core_session() -> Any:
    """The process's botocore session: service models are loaded once per process (a
    fresh session costs ~0.3 s per client), credentials resolved once (refreshable ones
    refresh themselves)."""
    global _core
    with _core_lock:
        if _core is None:
            import botocore.session

            core = botocore.session.get_session()
            # the instance-role provider must not stall a machine that only looks like EC2
            core.set_config_variable("metadata_service_timeout", IMDS_TIMEOUT_S)
            core.set_config_variable("metadata_service_num_attempts", 1)
            _core = core
        return _core


def _no_retry_for_failover(response: Any = None, **_: Any) -> bool | None:
    """A `needs-retry` handler, registered first: False (botocore's "do not retry")
    for an error whose answer is to try elsewhere (errors.py: capacity, quota), None
    (no opinion: botocore's retry handler decides) for anything else."""
    from launcher.clouds.aws.errors import CAPACITY_CODES, QUOTA_CODES

    if not response or not isinstance(response[1], dict):
        return None
    code = (response[1].get("Error") or {}).get("Code")
    return False if code in CAPACITY_CODES or code in QUOTA_CODES else None


class ClientFactory:
    """Cached boto3 clients of one boto3 Session. Thread-safe; the first call imports
    boto3. `client(service, region)` raises nothing itself (errors come from calls)."""

    def __init__(self, *, read_timeout: float = READ_TIMEOUT_S,
                 max_attempts: int = MAX_ATTEMPTS) -> None:
        self._lock = threading.Lock()
        self._session: Any = None
        self._clients: dict[tuple[str, str], Any] = {}
        self._read_timeout = read_timeout
        self._max_attempts = max_attempts

    def _boto_session(self) -> Any:
        if self._session is None:
            import boto3

            self._session = boto3.session.Session(botocore_session=_core_session())
        return self._session

    def client(self, service: str, region: str) -> Any:
        """The boto3 client of `service` in `region` (cached)."""
        from botocore.config import Config

        with self._lock:
            hit = self._clients.get((service, region))
            if hit is None:
                config = Config(
                    retries={"mode": "adaptive", "max_attempts": self._max_attempts},
                    connect_timeout=CONNECT_TIMEOUT_S,
                    read_timeout=self._read_timeout,
                )
                hit = self._boto_session().client(service, region_name=region, config=config)
                service_id = hit.meta.service_model.service_id.hyphenize()
                hit.meta.events.register_first(f"needs-retry.{service_id}",
                                               _no_retry_for_failover)
                self._clients[(service, region)] = hit
            return hit

    def ec2(self, region: str) -> Any:
        return self.client("ec2", region)

    def ssm(self, region: str) -> Any:
        return self.client("ssm", region)


def check_credentials(clients: ClientFactory | None = None, region: str | None = None) -> CredentialStatus:
    """Are AWS credentials usable? Never raises.

    No credentials source at all: answered without network and without importing
    boto3. Otherwise `sts get-caller-identity` with a short timeout and no retries."""
    source = local_credentials_source()
    if source is None:
        return CredentialStatus(False, NO_CREDENTIALS)
    try:
        from botocore.config import Config

        factory = clients or ClientFactory()
        session = factory._boto_session()
        region_name = region or session.region_name or "us-east-1"
        sts = session.client(
            "sts",
            region_name=region_name,
            config=Config(connect_timeout=CHECK_TIMEOUT_S, read_timeout=CHECK_TIMEOUT_S,
                          retries={"mode": "standard", "max_attempts": 1}),
        )
        ident = sts.get_caller_identity()
    except Exception as exc:  # never raises: the reason is the answer
        from launcher.clouds.sdk import as_missing_sdk

        missing = as_missing_sdk(exc, "aws")
        return CredentialStatus(False, f"AWS credentials from {source} unusable: "
                                       f"{missing or _short_reason(exc)}")
    return CredentialStatus(True, f"{ident.get('Arn')} (account {ident.get('Account')})")


def _short_reason(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error") or {}
        return f"{err.get('Code', type(exc).__name__)}: {err.get('Message', '')}".strip()
    return f"{type(exc).__name__}: {exc}"
