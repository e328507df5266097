"""RunPod's errors -> the typed errors that drive failover (launcher/clouds/base.py).

GraphQL answers HTTP 200 with `{"errors": [{"message": ..., "path": [...],
"extensions": {"code": ...}}], "data": ...}`; auth failures come as HTTP 401 (or an
"Unauthorized" message); rate limiting as HTTP 429 (retried by api.py). Mapping by
message (RunPod sends no stable codes for these):
- capacity -> CapacityError (block the data center): "There are no longer any instances
  available with the requested specifications", "... with enough disk space", "This
  machine does not have the resources to deploy your pod", a spot bid below the minimum;
- quota    -> CloudQuotaError (block the cloud: the balance spans every region):
  "insufficient funds", "You have reached the limit of ...", "balance";
- auth     -> AuthError (block the cloud): 401/403, "Unauthorized", "api key";
- request  -> InvalidRequestError (stop): GraphQL validation ("Variable ... got invalid
  value", "Cannot query field", GRAPHQL_VALIDATION_FAILED / BAD_USER_INPUT), an unknown
  GPU type or image;
anything else: a plain CloudError.
"""

from __future__ import annotations

import re
from typing import Any

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    CloudQuotaError,
    InvalidRequestError,
)

CLOUD = "runpod"

_CAPACITY = re.compile(
    r"no longer any instances available|not have the resources to deploy|"
    r"no (gpu|instances?|machines?) (is |are )?available|out of stock|"
    r"bid.*(too low|below|minimum)|minimum bid", re.I)
_QUOTA = re.compile(r"insufficient (funds|balance)|not enough (funds|balance|credit)|"
                    r"balance is too low|reached (the|your) (max|limit)|spend limit", re.I)
_AUTH = re.compile(r"unauthori[sz]ed|forbidden|invalid api key|api key (is )?(invalid|"
                   r"missing|required)|not authenticated|permission denied", re.I)
_INVALID = re.compile(r"got invalid value|cannot query field|unknown argument|"
                      r"syntax error|is not a valid|invalid (gpu|image|input|cloud)|"
                      r"does not exist|must be|not supported", re.I)
_INVALID_CODES = frozenset({"GRAPHQL_VALIDATION_FAILED", "GRAPHQL_PARSE_FAILED",
                            "BAD_USER_INPUT"})


def classify(message: str, code: str = "", *, region: str | None = None,
             zone: str | None = None, action: str = "") -> CloudError:
    """The typed error for one RunPod error message (and its extensions.code)."""
    text = f"RunPod {action}: {message}" if action else f"RunPod: {message}"
    where: dict[str, Any] = {"cloud": CLOUD, "region": region, "zone": zone}
    if code in ("UNAUTHENTICATED", "FORBIDDEN") or _AUTH.search(message):
        return AuthError(text, **where)
    if _CAPACITY.search(message):
        return CapacityError(text, **where)
    if _QUOTA.search(message):
        return CloudQuotaError(text, **where)
    if code in _INVALID_CODES or _INVALID.search(message):
        return InvalidRequestError(text, **where)
    return CloudError(text, **where)


def from_http(status: int, body: str, *, region: str | None = None, zone: str | None = None,
              action: str = "") -> CloudError:
    """The typed error for a non-200 answer (after retries)."""
    where: dict[str, Any] = {"cloud": CLOUD, "region": region, "zone": zone}
    snippet = body.strip()[:300]
    if status in (401, 403):
        return AuthError(f"RunPod {action}: HTTP {status} (API key refused): {snippet}", **where)
    if status == 400:
        return classify(snippet or "bad request", "BAD_USER_INPUT", region=region, zone=zone,
                        action=action)
    return CloudError(f"RunPod {action}: HTTP {status}: {snippet}", **where)
