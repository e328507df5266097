"""Nebius failures -> launcher's typed errors (failover decisions).

The SDK raises `nebius.aio.service_error.RequestError` for a failed RPC and
`nebius.aio.operation.OperationError` for an operation that ended with a non-OK status;
both carry a status (`code`: a gRPC StatusCode, `message`, and `service_errors`:
`nebius.common.v1.ServiceError` details whose oneof says `quota_failure`,
`not_enough_resources`, `bad_request`, ...). Mapping:

- RESOURCE_EXHAUSTED with `quota_failure` (or a message naming a quota)  -> QuotaError
- RESOURCE_EXHAUSTED otherwise (`not_enough_resources`: no capacity)       -> CapacityError
- UNAUTHENTICATED, PERMISSION_DENIED                                        -> AuthError
- INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE                        -> InvalidRequestError
- anything else (UNAVAILABLE after our retries, DEADLINE_EXCEEDED, ...)    -> CloudError

The SDK retries RESOURCE_EXHAUSTED by default; mutating calls are sent with
`retries=1` (`ONCE`) so a capacity answer fails over at once, and `with_retries` retries
UNAVAILABLE itself (a few times, short backoff). Imported only with the SDK.
"""

from __future__ import annotations

import contextlib
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

CLOUD = "nebius"
ONCE: dict[str, Any] = {"retries": 1}
T = TypeVar("T")


def _status(exc: BaseException) -> Any:
    return getattr(exc, "status", None)


def code_name(exc: BaseException) -> str | None:
    """The gRPC status code name of an SDK error (None for anything else)."""
    status = _status(exc)
    code = getattr(status, "code", None)
    if code is None:
        return None
    name = getattr(code, "name", None)
    if name is None:
        import grpc

        with contextlib.suppress(Exception):
            name = grpc.StatusCode(code).name
        if name is None:  # an int code
            for c in grpc.StatusCode:
                if c.value[0] == code:
                    name = c.name
    return str(name) if name else None


def detail_kinds(exc: BaseException) -> set[str]:
    """The ServiceError oneof names in the error ('quota_failure', ...)."""
    kinds: set[str] = set()
    for err in getattr(_status(exc), "service_errors", None) or []:
        with contextlib.suppress(Exception):
            for name in ("quota_failure", "not_enough_resources", "bad_request",
                         "resource_not_found", "permission_denied", "too_many_requests"):
                if err.check_presence(name):
                    kinds.add(name)
    return kinds


def is_not_found(exc: BaseException) -> bool:
    return code_name(exc) == "NOT_FOUND" or "resource_not_found" in detail_kinds(exc)


def typed(exc: BaseException, *, region: str | None = None, action: str = "") -> CloudError:
    """The launcher error for an SDK error (see the module docstring)."""
    code = code_name(exc)
    status = _status(exc)
    message = getattr(status, "message", None) or str(exc)
    where = f"{action}: " if action else ""
    text = f"{where}{code or type(exc).__name__}: {message}"
    kw: dict[str, Any] = {"cloud": CLOUD, "region": region}
    if code == "RESOURCE_EXHAUSTED":
        kinds = detail_kinds(exc)
        if "quota_failure" in kinds or ("not_enough_resources" not in kinds
                                        and "quota" in message.lower()):
            return QuotaError(text, **kw)
        return CapacityError(text, **kw)
    if code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return AuthError(text, **kw)
    if code in ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "OUT_OF_RANGE"):
        return InvalidRequestError(text, **kw)
    return CloudError(text, **kw)


@contextlib.contextmanager
def nebius_errors(*, region: str | None = None, action: str = "") -> Iterator[None]:
    """Re-raise SDK errors (and timeouts) as typed CloudErrors; CloudErrors pass."""
    try:
        yield
    except CloudError:
        raise
    except TimeoutError as exc:
        raise CloudError(f"{action}: timed out ({exc})", cloud=CLOUD, region=region) from exc
    except Exception as exc:
        if code_name(exc) is None and type(exc).__module__.split(".")[0] != "nebius":
            raise
        raise typed(exc, region=region, action=action) from exc


def with_retries(fn: Callable[[], T], attempts: int = 4, backoff: float = 0.2) -> T:
    """fn(), retried while the API answers UNAVAILABLE (other errors raise at once)."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if code_name(exc) != "UNAVAILABLE" or i == attempts - 1:
                raise
            time.sleep(backoff * (2 ** i))
    raise AssertionError("unreachable")
