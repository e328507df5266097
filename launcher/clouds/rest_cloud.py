"""What the REST GPU clouds (Lambda, Vast, RunPod) share: the constructor and its
injected node waiter, the credential check cache, the JSON HTTP call with 429 backoff,
recorded-but-gone instances in `query`, terminate-and-wait, and orphan grouping.

Each cloud keeps its own API paths, error mapping and state mapping; this module holds
only the loops and bookkeeping they had written the same way. `requests` is imported
only when a call is made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from launcher.clouds.base import CloudError, CredentialStatus, NodeState
from launcher.clouds.rest_records import Records

NodeWaiter = Any  # Callable[[ClusterInfo, float], ClusterInfo] (aws/nodes.py)
CHECK_TTL_S = 60.0
S = TypeVar("S")
T = TypeVar("T")


class RestCloudBase(Generic[S, T]):
    """The constructor, `settings()`, the node waiter and the check cache. A subclass
    sets `_load_settings` (the configured settings, read when none were injected) and
    `_default_timeouts` (its Timeouts class). Constructing it imports nothing and calls
    nothing."""

    _load_settings: Callable[[], S]
    _default_timeouts: Callable[[], T]

    def __init__(self, *, node_waiter: NodeWaiter = None, settings: S | None = None,
                 timeouts: T | None = None) -> None:
        self._node_waiter = node_waiter
        self._settings = settings
        self._timeouts: T = timeouts if timeouts is not None else self._default_timeouts()
        self._checked: tuple[float, str, CredentialStatus] | None = None

    def settings(self) -> S:
        return self._settings or self._load_settings()

    def _waiter(self) -> NodeWaiter:
        if self._node_waiter is None:
            from launcher.clouds.aws.nodes import wait_for_ssh

            return wait_for_ssh
        return self._node_waiter

    def _cached_check(self, token: str, probe: Callable[[], CredentialStatus]) -> CredentialStatus:
        """`probe()` (which never raises), its positive answer reused for CHECK_TTL_S
        while `token` (the key, or the endpoint) is the same."""
        now = time.monotonic()
        if self._checked and self._checked[1] == token and now - self._checked[0] < CHECK_TTL_S:
            return self._checked[2]
        status = probe()
        if status.enabled:
            self._checked = (now, token, status)
        return status


def request_json(method: str, url: str, body: dict[str, Any] | None, *, key: str,
                 timeout: float, action: str, region: str | None, cloud: str, service: str,
                 endpoint: str, max_retries: int) -> tuple[int, Any]:
    """(HTTP status, parsed JSON or None) of one call, HTTP 429 retried up to
    `max_retries` times (Retry-After honoured). Raises CloudError when unreachable or
    still rate limited."""
    import requests

    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    for attempt in range(max_retries + 1):
        try:
            resp = requests.request(method, url, json=body, headers=headers, timeout=timeout)
        except requests.RequestException as exc:
            raise CloudError(f"{action}: {service} API unreachable at {endpoint}: {exc}",
                             cloud=cloud, region=region) from exc
        try:
            payload = resp.json()
        except ValueError:
            payload = None
        if resp.status_code == 429:
            if attempt < max_retries:
                time.sleep(retry_after(resp.headers.get("Retry-After"), attempt))
                continue
            raise CloudError(f"{action}: rate limited by the {service} API ({max_retries} "
                             "retries)", cloud=cloud, region=region)
        return resp.status_code, payload
    raise AssertionError("unreachable")


def retry_after(header: str | None, attempt: int) -> float:
    """Seconds to wait before retrying a 429: Retry-After (at most 30), else backoff."""
    try:
        return max(0.0, min(float(header or ""), 30.0))
    except ValueError:
        return min(0.5 * 2 ** attempt, 8.0)


def with_recorded(out: dict[str, NodeState], records: Records,
                  cluster: str) -> dict[str, NodeState]:
    """`out` plus every recorded instance id the cloud no longer lists, as TERMINATED."""
    for entry in records.entries(cluster) or []:
        if entry.instance_id and entry.instance_id not in out:
            out[entry.instance_id] = NodeState.TERMINATED
    return out


def recorded_ids(records: Records, cluster: str) -> set[str]:
    return {e.instance_id for e in records.entries(cluster) or [] if e.instance_id}


def terminate_and_wait(live: Callable[[], list[str]], kill: Callable[[list[str]], None], *,
                       cluster: str, cloud: str, timeout: float, poll: float) -> None:
    """Until `live()` is empty: `kill` the ids not asked for yet (also ones that appear
    meanwhile: a create whose answer was lost), then poll. Raises CloudError after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    asked: set[str] = set()
    while True:
        found = live()
        if not found:
            return
        todo = [i for i in found if i not in asked]
        if todo:
            kill(todo)
            asked.update(todo)
        if time.monotonic() > deadline:
            raise CloudError(f"instances {found} of {cluster} still listed after "
                             f"{timeout:.0f}s", cloud=cloud)
        time.sleep(min(poll, 1.0))


def by_cluster(pairs: Iterable[tuple[str | None, str]]) -> dict[str, list[str]]:
    """(cluster or None, id) pairs -> cluster -> sorted ids (list_tagged_clusters)."""
    out: dict[str, list[str]] = {}
    for cluster, iid in pairs:
        if cluster:
            out.setdefault(cluster, []).append(iid)
    return {k: sorted(v) for k, v in out.items()}
