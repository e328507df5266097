"""A small GraphQL client for RunPod (`requests`, imported on first use).

`GraphQL(endpoint, key).call(query, variables, action=...)` POSTs
`{"query", "variables"}` with `Authorization: Bearer <key>` and returns `data`; raises
the typed error of errors.py. HTTP 429 is retried with backoff (Retry-After honoured,
RETRIES attempts); 5xx and connection errors are retried only for queries (`mutating=
False`): a mutation that may have been applied is never sent twice (the caller's record
finds what it created). Every request has a timeout.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from launcher.clouds.base import CloudError
from launcher.clouds.runpod.errors import CLOUD, classify, from_http

RETRIES = 6
BACKOFF_S = 0.5
MAX_BACKOFF_S = 10.0
TIMEOUT_S = 30.0

POD_FIELDS = """id name desiredStatus costPerHr gpuCount imageName
  lastStatusChange dataCenterId
  machine { podHostId gpuDisplayName }
  runtime { uptimeInSeconds ports { ip isIpPublic privatePort publicPort type } }"""

DEPLOY_ON_DEMAND = ("mutation Deploy($input: PodFindAndDeployOnDemandInput!) "
                    "{ podFindAndDeployOnDemand(input: $input) { " + POD_FIELDS + " } }")
DEPLOY_SPOT = ("mutation DeploySpot($input: PodRentInterruptableInput!) "
               "{ podRentInterruptable(input: $input) { " + POD_FIELDS + " } }")
GET_POD = "query Pod($input: PodFilter!) { pod(input: $input) { " + POD_FIELDS + " } }"
LIST_PODS = "query Pods { myself { pods { " + POD_FIELDS + " } } }"
MYSELF = "query Myself { myself { id email } }"
TERMINATE = "mutation Terminate($input: PodTerminateInput!) { podTerminate(input: $input) }"
STOP = "mutation Stop($input: PodStopInput!) { podStop(input: $input) { id desiredStatus } }"


class GraphQL:
    """One endpoint + key; thread-safe (one requests.Session per thread)."""

    def __init__(self, endpoint: str, key: str, *, timeout: float = TIMEOUT_S) -> None:
        self.endpoint = endpoint
        self._key = key
        self.timeout = timeout
        self._local = threading.local()

    def _session(self) -> Any:
        session = getattr(self._local, "session", None)
        if session is None:
            import requests

            session = requests.Session()
            session.headers.update({"Authorization": f"Bearer {self._key}",
                                    "Content-Type": "application/json",
                                    "User-Agent": "launcher"})
            self._local.session = session
        return session

    def call(self, query: str, variables: dict[str, Any] | None = None, *, action: str,
             mutating: bool = False, region: str | None = None,
             zone: str | None = None) -> dict[str, Any]:
        """`data` of the answer; raises CapacityError/QuotaError/AuthError/
        InvalidRequestError/CloudError."""
        import requests

        body = {"query": query, "variables": variables or {}}
        delay = BACKOFF_S
        for attempt in range(RETRIES):
            last = attempt == RETRIES - 1
            try:
                resp = self._session().post(self.endpoint, json=body, timeout=self.timeout)
            except requests.RequestException as exc:
                if mutating or last:
                    raise CloudError(f"RunPod {action}: {type(exc).__name__}: {exc}",
                                     cloud=CLOUD, region=region, zone=zone) from exc
                time.sleep(delay)
                delay = min(MAX_BACKOFF_S, delay * 2)
                continue
            if resp.status_code == 429 or (resp.status_code >= 500 and not mutating):
                if last:
                    raise from_http(resp.status_code, resp.text, region=region, zone=zone,
                                    action=action)
                time.sleep(_retry_after(resp.headers.get("Retry-After"), delay))
                delay = min(MAX_BACKOFF_S, delay * 2)
                continue
            return _data(resp, action, region, zone)
        raise AssertionError("unreachable")


def _retry_after(header: str | None, delay: float) -> float:
    try:
        return min(MAX_BACKOFF_S, max(0.0, float(header))) if header else \
            delay * (0.5 + random.random() / 2)
    except ValueError:
        return delay


def _data(resp: Any, action: str, region: str | None, zone: str | None) -> dict[str, Any]:
    try:
        payload = resp.json()
    except ValueError:
        payload = None
    if resp.status_code != 200 and not (isinstance(payload, dict) and payload.get("errors")):
        raise from_http(resp.status_code, resp.text, region=region, zone=zone, action=action)
    if not isinstance(payload, dict):
        raise CloudError(f"RunPod {action}: not JSON: {resp.text[:200]}", cloud=CLOUD)
    errors = payload.get("errors") or []
    if errors:
        first: dict[str, Any] = errors[0] if isinstance(errors[0], dict) else \
            {"message": str(errors[0])}
        code = str((first.get("extensions") or {}).get("code") or "")
        if resp.status_code in (401, 403):
            code = code or "UNAUTHENTICATED"
        raise classify(str(first.get("message") or first), code, region=region, zone=zone,
                       action=action)
    data = payload.get("data")
    return data if isinstance(data, dict) else {}


LOWEST_PRICE = ("query LowestPrice($id: String!, $lowest: GpuLowestPriceInput!) "
                "{ gpuTypes(input: {id: $id}) { id lowestPrice(input: $lowest) "
                "{ minimumBidPrice uninterruptablePrice } } }")
