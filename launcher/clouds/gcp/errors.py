"""Compute API errors -> the typed errors that drive failover (launcher/clouds/base.py).

GCP reports a failure in one of two places: the HTTP error of the call
(`{"error": {"code": 503, "message": ..., "errors": [{"reason": ...}]}}`, raised by
google-api-core as a `GoogleAPICallError` whose `.errors` holds that list), or inside
a DONE operation (`error.errors[].code`, `httpErrorStatusCode`). Both are classified
by the same codes/reasons:
- capacity -> CapacityError (block the zone): `ZONE_RESOURCE_POOL_EXHAUSTED`,
  `ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS`, `insufficientCapacity`,
  `UNSUPPORTED_OPERATION` (the type/GPU is not offered in the zone), `resourceNotReady`;
- quota -> QuotaError (block the region): `QUOTA_EXCEEDED`, `quotaExceeded`; a quota
  named `GPUS_ALL_REGIONS` is project-wide: CloudQuotaError (block the cloud);
- auth -> AuthError (block the cloud): HTTP 401/403 (`forbidden`, `accessNotConfigured`,
  `SERVICE_DISABLED`...), credentials that cannot be found or refreshed;
- request -> InvalidRequestError (stop): `invalid`, `badRequest`, `invalidParameter`,
  `required`, HTTP 400 otherwise unclassified, an image that does not exist.
Unknown codes become a plain CloudError (failover blocks the zone). Importing this
module imports no Google library.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    CloudQuotaError,
    InvalidRequestError,
    QuotaError,
)

CLOUD = "gcp"

CAPACITY_CODES = frozenset({
    "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "insufficientCapacity", "UNSUPPORTED_OPERATION", "resourceNotReady",
    "RESOURCE_NOT_READY", "STOCKOUT",
})
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded", "QUOTA_LIMIT"})
AUTH_CODES = frozenset({"forbidden", "accessNotConfigured", "SERVICE_DISABLED",
                        "authError", "unauthorized", "PERMISSION_DENIED", "accessDenied"})
INVALID_CODES = frozenset({"invalid", "badRequest", "invalidParameter", "required",
                           "INVALID_ARGUMENT", "INVALID_FIELD_VALUE", "notFound",
                           "RESOURCE_NOT_FOUND", "conditionNotMet"})
PROJECT_WIDE_QUOTAS = ("GPUS_ALL_REGIONS", "PREEMPTIBLE_GPUS_ALL_REGIONS")
RETRY_CODES = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})


def classify(codes: Iterable[str], http_status: int | None, message: str = "") -> type[CloudError]:
    """The typed error class for error codes/reasons and an HTTP status."""
    found = set(codes)
    if found & CAPACITY_CODES:
        return CapacityError
    if found & QUOTA_CODES:
        if any(q in message for q in PROJECT_WIDE_QUOTAS):
            return CloudQuotaError
        return QuotaError
    if http_status in (401, 403) or found & AUTH_CODES:
        return AuthError
    if found & INVALID_CODES or http_status == 400:
        return InvalidRequestError
    return CloudError


def api_codes(exc: BaseException) -> list[str]:
    """The `reason`s of a GoogleAPICallError's error list (plus its ErrorInfo reason)."""
    out: list[str] = []
    for item in getattr(exc, "errors", None) or []:
        reason = item.get("reason") if isinstance(item, dict) else getattr(item, "reason", None)
        if reason:
            out.append(str(reason))
    reason = getattr(exc, "reason", None)
    if reason:
        out.append(str(reason))
    return out


def http_status(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    value = getattr(code, "value", None)  # grpc-style status codes
    return value if isinstance(value, int) and value >= 100 else None


def is_not_found(exc: BaseException) -> bool:
    return type(exc).__name__ == "NotFound" or http_status(exc) == 404


def is_retryable(exc: BaseException) -> bool:
    """Throttling and transient server errors worth retrying in place."""
    return bool(set(api_codes(exc)) & RETRY_CODES) or http_status(exc) == 429


def to_cloud_error(exc: BaseException, *, region: str | None = None, zone: str | None = None,
                   action: str = "") -> CloudError | None:
    """The typed error for a Google library exception, or None when `exc` is not one."""
    prefix = f"{action}: " if action else ""
    module = type(exc).__module__ or ""
    name = type(exc).__name__
    if module.startswith("google.api_core"):
        codes = api_codes(exc)
        message = getattr(exc, "message", None) or str(exc)
        cls = classify(codes, http_status(exc), message)
        label = codes[0] if codes else name
        return cls(f"{prefix}{label}: {message}", cloud=CLOUD, region=region, zone=zone)
    if module.startswith("google.auth"):
        return AuthError(f"{prefix}GCP credentials: {exc}", cloud=CLOUD, region=region, zone=zone)
    if module.startswith(("requests", "urllib3")):
        return CloudError(f"{prefix}Compute API unreachable ({name}): {exc}", cloud=CLOUD,
                          region=region, zone=zone)
    return None


def operation_error(op: Any, *, region: str | None = None, zone: str | None = None,
                    action: str = "") -> CloudError | None:
    """The typed error a DONE operation carries (None when it succeeded)."""
    errors = list(getattr(getattr(op, "error", None), "errors", None) or [])
    if not errors:
        return None
    codes = [str(e.code) for e in errors if getattr(e, "code", "")]
    message = "; ".join(f"{e.code}: {e.message}" for e in errors)
    status = int(getattr(op, "http_error_status_code", 0) or 0) or None
    cls = classify(codes, status, message)
    prefix = f"{action}: " if action else ""
    return cls(f"{prefix}{message}", cloud=CLOUD, region=region, zone=zone)


@contextlib.contextmanager
def gcp_errors(*, region: str | None = None, zone: str | None = None,
               action: str = "") -> Iterator[None]:
    """Re-raise Google library errors raised inside as typed CloudErrors (chained)."""
    try:
        yield
    except CloudError:
        raise
    except Exception as exc:
        typed = to_cloud_error(exc, region=region, zone=zone, action=action)
        if typed is None:
            raise
        raise typed from exc
