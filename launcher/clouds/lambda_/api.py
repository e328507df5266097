"""Lambda Cloud API v1: the API key, one HTTP call with 429 backoff, typed errors.

Key: `LAMBDA_API_KEY`, else `~/.lambda_cloud/lambda_keys` (a line `api_key = ...`, as
Lambda's docs and SkyPilot write it). Base URL: `lambda.api_endpoint` / LAMBDA_API_ENDPOINT.
Every answer is JSON; success bodies carry `data`, failures
`{"error": {"code": "...", "message": "...", "suggestion": "..."}}`. `call` maps the
error code (not only the HTTP status) to launcher's typed errors:

    instance-operations/launch/insufficient-capacity -> CapacityError
    global/quota-exceeded                            -> QuotaError
    global/invalid-api-key, global/account-inactive,
      global/forbidden (and any 401/403)            -> AuthError
    global/invalid-parameters, global/object-does-not-exist,
      instance-operations/launch/file-system-in-wrong-region, ssh-keys/* -> InvalidRequestError
    anything else (5xx, unreachable, not JSON)       -> CloudError
HTTP 429 is retried (Retry-After honoured, at most MAX_RETRIES times, then CloudError).
`requests` is imported here only, when a call is made.
"""

from __future__ import annotations

from typing import Any

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    InvalidRequestError,
    QuotaError,
)
from launcher.clouds.lambda_.credentials import api_key, keys_file, presence
from launcher.clouds.rest_cloud import RestAPI

__all__ = ["CLOUD", "LambdaAPI", "api_key", "error_for", "keys_file", "presence"]

CLOUD = "lambda"
MAX_RETRIES = 6
_CAPACITY = {"instance-operations/launch/insufficient-capacity"}
_QUOTA = {"global/quota-exceeded"}
_AUTH = {"global/invalid-api-key", "global/account-inactive", "global/forbidden"}
_INVALID = {"global/invalid-parameters", "global/object-does-not-exist",
            "instance-operations/launch/file-system-in-wrong-region",
            "instance-operations/launch/file-systems-not-supported"}


def error_for(status: int, body: Any, action: str, region: str | None = None) -> CloudError:
    """The typed error for one failed answer (see the module docstring)."""
    err = body.get("error") if isinstance(body, dict) else None
    code = str(err.get("code", "")) if isinstance(err, dict) else ""
    message = str(err.get("message", "")) if isinstance(err, dict) else ""
    suggestion = str(err.get("suggestion") or "") if isinstance(err, dict) else ""
    text = f"{action}: {code or f'HTTP {status}'}: {message or body!r}"
    if suggestion:
        text += f" ({suggestion})"
    kw: dict[str, Any] = {"cloud": CLOUD, "region": region}
    if code in _CAPACITY:
        return CapacityError(text, **kw)
    if code in _QUOTA:
        return QuotaError(text, **kw)
    if code in _AUTH or status in (401, 403):
        return AuthError(text, **kw)
    if code in _INVALID or code.startswith("ssh-keys/") or status in (400, 404):
        return InvalidRequestError(text, **kw)
    return CloudError(text, **kw)


class LambdaAPI(RestAPI):
    """One account's API at one base URL. Thread-safe (a session per call)."""

    cloud = CLOUD
    service = "Lambda"
    max_retries = MAX_RETRIES

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
             action: str, region: str | None = None) -> Any:
        """The `data` of a successful answer. Raises the typed errors above."""
        status, payload = self.request(method, path, body, action=action, region=region)
        if status >= 400 or not isinstance(payload, dict) or "data" not in payload:
            raise error_for(status, payload, action, region)
        return payload["data"]

    def delete(self, path: str, *, action: str) -> None:
        """DELETE `path`: any 2xx answer (whatever its body) is done, and so is a 404 (gone
        already). Raises the typed errors above."""
        status, payload = self.request("DELETE", path, None, action=action, region=None)
        if status >= 400 and status != 404:
            raise error_for(status, payload, action, None)
