"""ARM errors -> the typed errors that drive failover (launcher/clouds/base.py).

ARM reports an error as `{"error": {"code": ..., "message": ..., "details": [...]}}`,
either on the request itself (e.g. 409 `SkuNotAvailable`, 409 `OperationNotAllowed`
for quota) or inside a long-running operation (`{"status": "Failed", "error": {...}}`,
e.g. `AllocationFailed`). Mapping by code (and, for the generic ones, message):
- capacity -> CapacityError (block the zone/location): no capacity for the size here now;
- quota    -> QuotaError (block the region): core/spot/public-IP quota of the subscription;
- auth     -> AuthError (block the cloud): 401/403, missing or refused credentials;
- request  -> InvalidRequestError (stop): a bad parameter, image or size.
Throttling (429) and transient 5xx are retried inside the SDK (honouring Retry-After);
409 conflicts of concurrent operations are retried by `retry_conflicts`. Unknown codes
become a plain CloudError. Importing this module imports no SDK.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    InvalidRequestError,
    QuotaError,
)

CLOUD = "azure"
T = TypeVar("T")

CAPACITY_CODES = frozenset({
    "SkuNotAvailable",
    "AllocationFailed",
    "ZonalAllocationFailed",
    "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest",
    "AllocationFailedLowPriority",  # spot/low priority: no capacity at this price now
    "SpotVMEvictedDuringCreation",
    "OperationPreempted",
})
QUOTA_CODES = frozenset({
    "QuotaExceeded",
    "PublicIPCountLimitReached",
    "LowPriorityCoresQuotaExceeded",
    "SubscriptionNotRegistered",  # the provider is not registered in this subscription
})
AUTH_CODES = frozenset({
    "AuthorizationFailed",
    "AuthenticationFailed",
    "InvalidAuthenticationToken",
    "InvalidAuthenticationTokenTenant",
    "ExpiredAuthenticationToken",
    "LinkedAuthorizationFailed",
    "SubscriptionNotFound",
    "ReadOnlyDisabledSubscription",
    "DisallowedByPolicy",
    "RequestDisallowedByPolicy",
})
INVALID_CODES = frozenset({
    "InvalidParameter",
    "InvalidRequestFormat",
    "InvalidTemplate",
    "BadRequest",
    "ImageNotFound",
    "PlatformImageNotFound",
    "InvalidResourceName",
    "MarketplacePurchaseEligibilityFailed",
    "ResourcePurchaseValidationFailed",
    "VMMarketplaceInvalidInput",
    "LocationNotAvailableForResourceType",
    "NoRegisteredProviderFound",
    "InvalidResourceReference",
    "PropertyChangeNotAllowed",
})
# 409s that say "another operation is running on this resource": try again shortly
CONFLICT_RETRY_CODES = frozenset({
    "AnotherOperationInProgress", "RetryableError", "OperationNotAllowedOnDeletingResource",
    "Conflict", "ResourceGroupBeingDeleted",
})
_QUOTA_MESSAGE = re.compile(r"quota|exceeding approved|cores limit|limit exceeded", re.I)


def classify(code: str, message: str = "", status: int | None = None) -> type[CloudError]:
    """The typed error class for an ARM error code (and its message and HTTP status)."""
    if code in CAPACITY_CODES:
        return CapacityError
    if code in QUOTA_CODES:
        return QuotaError
    if code == "OperationNotAllowed":
        return QuotaError if _QUOTA_MESSAGE.search(message) else InvalidRequestError
    if code in AUTH_CODES or status in (401, 403):
        return AuthError
    if code in INVALID_CODES:
        return InvalidRequestError
    return CloudError


def error_info(exc: BaseException) -> tuple[str | None, str, int | None]:
    """(ARM error code, message, HTTP status) of an azure-core exception; code None when
    the exception carries no ARM error. For a failed long-running operation the error is
    read from the operation's body."""
    status = getattr(exc, "status_code", None)
    err = getattr(exc, "error", None)
    code = getattr(err, "code", None)
    message = getattr(err, "message", None)
    if not code:
        response = getattr(exc, "response", None)
        body: Any = None
        with contextlib.suppress(Exception):
            body = json.loads(response.text()) if response is not None else None
        if isinstance(body, dict):
            inner: dict[str, Any] = body["error"] if isinstance(body.get("error"), dict) else body
            code = inner.get("code")
            message = inner.get("message") or message
            if status is None and response is not None:
                status = getattr(response, "status_code", None)
    if not message:
        message = str(getattr(exc, "message", "") or exc)
    return (str(code) if code else None), str(message), status


def to_cloud_error(exc: BaseException, *, region: str | None = None, zone: str | None = None,
                   action: str = "") -> CloudError | None:
    """The typed error for an azure-core / azure-identity exception, or None."""
    module = type(exc).__module__ or ""
    if not module.startswith(("azure.", "msal")):
        return None
    prefix = f"{action}: " if action else ""
    name = type(exc).__name__
    if name in ("CredentialUnavailableError", "ClientAuthenticationError"):
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return AuthError(f"{prefix}Azure credentials: {first}", cloud=CLOUD, region=region,
                         zone=zone)
    code, message, status = error_info(exc)
    if code is None and status is None:
        # ServiceRequestError / ServiceResponseError: ARM unreachable (not a region's fault)
        return CloudError(f"{prefix}{name}: {exc}", cloud=CLOUD, region=region, zone=zone)
    cls = classify(code or "", message, status)
    label = code or f"HTTP {status}"
    return cls(f"{prefix}{label}: {message}", cloud=CLOUD, region=region, zone=zone)


@contextlib.contextmanager
def azure_errors(*, region: str | None = None, zone: str | None = None,
                 action: str = "") -> Iterator[None]:
    """Re-raise Azure SDK errors raised inside as typed CloudErrors (chained)."""
    try:
        yield
    except CloudError:
        raise
    except Exception as exc:
        typed = to_cloud_error(exc, region=region, zone=zone, action=action)
        if typed is None:
            raise
        raise typed from exc


def retry_conflicts(fn: Callable[[], T], *, attempts: int = 6, delay: float = 2.0,
                    sleep: Callable[[float], None] = time.sleep) -> T:
    """Call `fn`, retrying 409s of concurrent operations (CONFLICT_RETRY_CODES) with
    backoff; anything else (and the last conflict) propagates unchanged."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:
            code, _, status = error_info(exc)
            if i == attempts - 1 or status != 409 or code not in CONFLICT_RETRY_CODES:
                raise
            retry_after = _retry_after(exc)
            sleep(retry_after if retry_after is not None else delay * (2 ** i))
    raise AssertionError("unreachable")


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    with contextlib.suppress(Exception):
        value = response.headers.get("Retry-After") if response is not None else None
        return float(value) if value is not None else None
    return None


def is_not_found(exc: BaseException) -> bool:
    """ARM said the resource (or its group) does not exist."""
    code, _, status = error_info(exc)
    return status == 404 or code in ("ResourceNotFound", "ResourceGroupNotFound", "NotFound")


def wait_lro(poller: Any, timeout: float, what: str = "operation") -> Any:
    """The result of a long-running operation, waiting at most `timeout` seconds.
    Raises CloudError when it has not finished by then (ARM errors propagate)."""
    result = poller.result(timeout=timeout)
    if not poller.done():
        raise CloudError(f"{what}: not finished after {timeout:.0f}s", cloud=CLOUD)
    return result
