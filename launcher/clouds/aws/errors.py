"""EC2/botocore errors -> the typed errors that drive failover (launcher/clouds/base.py).

Mapping by the API's error code (EC2 API reference, "Error codes"):
- capacity  -> CapacityError (block the zone): no capacity for the type or the spot price
  in this AZ now, or the type is not offered in it (`Unsupported`), or the subnet is full;
- quota     -> QuotaError (block the region): vCPU / spot / instance / placement-group /
  address limits of the account;
- auth      -> AuthError (block the cloud): missing, expired or refused credentials, a
  region the account has not opted in to;
- request   -> InvalidRequestError (stop): a bad AMI, parameter or combination; retrying
  elsewhere would fail the same way.
- throttling -> RateLimitedError (wait, then ask again): `RequestLimitExceeded`,
  `Throttling`, ... reach here only once botocore's own retries with backoff (session.py)
  are spent. Unknown codes become a plain CloudError (failover treats
it like capacity: block the zone). Importing this module does not import botocore.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    InvalidRequestError,
    QuotaError,
    RateLimitedError,
)

CLOUD = "aws"

CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientCapacityOnHost",
    "InsufficientReservedInstanceCapacity",
    "InsufficientReservedInstancesCapacity",
    "InsufficientCapacity",
    "InsufficientFreeAddressesInSubnet",
    "InsufficientAddressCapacity",
    "Unsupported",
    "SpotMaxPriceTooLow",
    "UnfulfillableCapacity",  # spot: not enough spare capacity now
})
QUOTA_CODES = frozenset({
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "InstanceLimitExceeded",
    "PlacementGroupLimitExceeded",
    "AddressLimitExceeded",
    "SecurityGroupLimitExceeded",
    "RulesPerSecurityGroupLimitExceeded",
    "VolumeLimitExceeded",
    "MaxIOPSLimitExceeded",
    "NetworkInterfaceLimitExceeded",
    "ResourceLimitExceeded",
})
AUTH_CODES = frozenset({
    "AuthFailure",
    "UnauthorizedOperation",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "OptInRequired",
    "Blocked",
    "PendingVerification",
    "AccessDenied",
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidToken",
})
INVALID_CODES = frozenset({
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "InvalidParameter",
    "MissingParameter",
    "InvalidInstanceType",
    "InvalidBlockDeviceMapping",
    "InvalidKeyPair.Format",
    "InvalidUserData.Malformed",
    "IdempotentParameterMismatch",
    "ParameterNotFound",  # SSM: no such public AMI parameter in this region
    "NoSuchEntity",  # IAM: the configured instance profile does not exist
})
INVALID_PREFIXES = ("InvalidAMIID.", "InvalidAMIName.", "InvalidSnapshot.")
THROTTLE_CODES = frozenset({
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestThrottled",
})


def classify(code: str) -> type[CloudError]:
    """The typed error class for an EC2 error code."""
    if code in CAPACITY_CODES:
        return CapacityError
    if code in QUOTA_CODES:
        return QuotaError
    if code in AUTH_CODES:
        return AuthError
    if code in INVALID_CODES or code.startswith(INVALID_PREFIXES):
        return InvalidRequestError
    if code in THROTTLE_CODES:
        return RateLimitedError
    return CloudError


def error_code(exc: BaseException) -> str | None:
    """The API error code of a botocore ClientError (None for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = (response.get("Error") or {}).get("Code")
        return str(code) if code else None
    return None


def to_cloud_error(exc: BaseException, *, region: str | None = None,
                   zone: str | None = None, action: str = "") -> CloudError | None:
    """The typed error for a botocore exception, or None when `exc` is not one."""
    prefix = f"{action}: " if action else ""
    code = error_code(exc)
    if code is not None:
        message = (getattr(exc, "response", {}).get("Error") or {}).get("Message") or str(exc)
        cls = classify(code)
        return cls(f"{prefix}{code}: {message}", cloud=CLOUD, region=region, zone=zone)
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if not module.startswith(("botocore", "boto3", "urllib3")):
        return None
    if name in ("NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError",
                "SSOTokenLoadError", "UnauthorizedSSOTokenError", "TokenRetrievalError",
                "CredentialRetrievalError", "ProfileNotFound", "InvalidConfigError"):
        return AuthError(f"{prefix}AWS credentials: {exc}", cloud=CLOUD, region=region, zone=zone)
    if name in ("ParamValidationError",):
        return InvalidRequestError(f"{prefix}{exc}", cloud=CLOUD, region=region, zone=zone)
    # EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError...: the region's
    # endpoint is unreachable from here; another region may answer
    return QuotaError(f"{prefix}AWS endpoint unreachable ({name}): {exc}",
                      cloud=CLOUD, region=region, zone=zone) if region else CloudError(
        f"{prefix}{name}: {exc}", cloud=CLOUD, region=region, zone=zone)


@contextlib.contextmanager
def aws_errors(*, region: str | None = None, zone: str | None = None,
               action: str = "") -> Iterator[None]:
    """Re-raise botocore errors raised inside as typed CloudErrors (chained)."""
    try:
        yield
    except CloudError:
        raise
    except Exception as exc:
        typed = to_cloud_error(exc, region=region, zone=zone, action=action)
        if typed is None:
            raise
        raise typed from exc
