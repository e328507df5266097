"""Calling the Compute API and waiting on its operations.

- `call(fn, ...)`: one API call with typed errors (errors.py); throttling (429,
  `rateLimitExceeded`) retried in place with exponential backoff.
- `wait(clients, project, op, ...)`: a mutating call returns an Operation; poll it
  through the operations client of its scope (zone, region or global: `zoneOperations.wait`
  etc., each built with the same endpoint and credentials as the calling client; the
  server answers when the operation is DONE or after up to 2 minutes) until DONE or the
  deadline, then raise the typed error carried in the operation body
  (`error.errors[]`), if any. Operation names are the API's (`operation-<numeric id>...`
  on real GCP); nothing here parses them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from launcher.clouds.base import CloudError
from launcher.clouds.gcp.errors import CLOUD, gcp_errors, is_retryable, operation_error

Sleep = Callable[[float], None]
RETRIES = 5


def call(fn: Callable[..., Any], *, action: str, region: str | None = None,
         zone: str | None = None, sleep: Sleep = time.sleep, **kwargs: Any) -> Any:
    """`fn(**kwargs)`, typed errors, throttling retried (RETRIES times, 1 s doubling)."""
    delay = 1.0
    for attempt in range(RETRIES + 1):
        with gcp_errors(region=region, zone=zone, action=action):
            try:
                return fn(**kwargs)
            except Exception as exc:
                if attempt == RETRIES or not is_retryable(exc):
                    raise
        sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def status_name(op: Any) -> str:
    """An Operation's status as its name ("DONE"): compute_v1 gives an enum member."""
    status = getattr(op, "status", "")
    return str(getattr(status, "name", status))


def _last(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1] if url else ""


def wait(clients: Any, project: str, op: Any, *, deadline: float, action: str,
         region: str | None = None, zone: str | None = None, poll: float = 1.0,
         sleep: Sleep = time.sleep) -> Any:
    """Wait until `op` is DONE (see the module docstring). Returns the DONE operation.
    Raises its typed error, or CloudError at `deadline` (monotonic)."""
    op_zone, op_region = _last(getattr(op, "zone", "") or ""), _last(getattr(op, "region", "") or "")
    where_region = region or (op_region or None)
    where_zone = zone or (op_zone or None)
    while status_name(op) != "DONE":
        if time.monotonic() >= deadline:
            raise CloudError(f"{action}: operation {op.name} not done in time ({status_name(op)}).",
                             cloud=CLOUD, region=where_region, zone=where_zone)
        op = call(_waiter(clients, project, op_zone, op_region), action=action,
                  region=where_region, zone=where_zone, sleep=sleep, operation=op.name)
        if status_name(op) != "DONE":
            sleep(poll)
    err = operation_error(op, region=where_region, zone=where_zone, action=action)
    if err is not None:
        raise err
    return op


def _waiter(clients: Any, project: str, zone: str, region: str) -> Callable[..., Any]:
    """`operation name -> Operation` through the operations client of the op's scope."""
    if zone:
        zops = clients.zone_operations()
        return lambda operation: zops.wait(project=project, zone=zone, operation=operation)
    if region:
        rops = clients.region_operations()
        return lambda operation: rops.wait(project=project, region=region, operation=operation)
    gops = clients.global_operations()
    return lambda operation: gops.wait(project=project, operation=operation)
