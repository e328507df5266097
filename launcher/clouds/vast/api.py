"""Vast.ai REST API v0: the API key, one HTTP call with 429 backoff, typed errors.

Key: `VAST_API_KEY`, else `~/.config/vastai/vast_api_key` (the file `vastai set
api-key` writes; the older `~/.vast_api_key` too). Base URL: `vast.api_endpoint` /
VAST_API_ENDPOINT. Bearer auth. Failures answer `{"success": false, "error": "<code>",
"msg": "..."}` (some only `{"detail": ...}`); `call` maps them:

    401/403, not_authorized, invalid_user, unauthorized  -> AuthError
    no_such_ask, ask_not_available, bad_ask              -> CapacityError (offer gone)
    insufficient_credit, insufficient_funds              -> CloudQuotaError (whole account)
    invalid_args, invalid_image, other 400               -> InvalidRequestError
    anything else (5xx, unreachable, not JSON)           -> CloudError
HTTP 429 ("API requests too frequent") is retried (Retry-After honoured, MAX_RETRIES).
`requests` is imported here only, when a call is made.
"""

from __future__ import annotations

from typing import Any

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    CloudQuotaError,
    InvalidRequestError,
)
from launcher.clouds.rest_cloud import RestAPI
from launcher.clouds.vast.credentials import api_key, key_files, presence

__all__ = ["CLOUD", "NotFound", "VastAPI", "api_key", "error_for", "key_files", "presence"]

CLOUD = "vast"
MAX_RETRIES = 6
_AUTH = {"not_authorized", "invalid_user", "unauthorized", "forbidden"}
_CAPACITY = {"no_such_ask", "ask_not_available", "bad_ask"}
_CREDIT = {"insufficient_credit", "insufficient_funds"}


class NotFound(CloudError):
    """The instance (or key) does not exist (HTTP 404): already deleted."""


def error_for(status: int, body: Any, action: str, region: str | None = None) -> CloudError:
    """The typed error for one failed answer (see the module docstring)."""
    body = body if isinstance(body, dict) else {}
    code = str(body.get("error") or "")
    msg = str(body.get("msg") or body.get("detail") or body.get("message") or "")
    text = f"{action}: {code or f'HTTP {status}'}: {msg or body!r}"
    kw: dict[str, Any] = {"cloud": CLOUD, "region": region}
    if code in _CREDIT:
        return CloudQuotaError(text, **kw)
    if code in _AUTH or status in (401, 403):
        return AuthError(text, **kw)
    if code in _CAPACITY:
        return CapacityError(text, **kw)
    if status == 404:
        return NotFound(text, **kw)
    if status == 400 or code in ("invalid_args", "invalid_image"):
        return InvalidRequestError(text, **kw)
    return CloudError(text, **kw)


class VastAPI(RestAPI):
    """One account's API at one base URL. Thread-safe (a request per call)."""

    cloud = CLOUD
    service = "Vast"
    max_retries = MAX_RETRIES

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
             action: str, region: str | None = None) -> Any:
        """The JSON of a successful answer (an object; `GET /ssh/` answers a list).
        Raises the typed errors above."""
        status, payload = self.request(method, path, body, action=action, region=region)
        if status >= 400 or not isinstance(payload, dict | list) or (
                isinstance(payload, dict) and payload.get("success") is False):
            raise error_for(status, payload, action, region)
        return payload
