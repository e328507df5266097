"""What the REST GPU clouds (Lambda, Vast, RunPod) share: the constructor and its
injected node waiter, the credential check cache, the JSON HTTP call with 429 backoff,
recorded-but-gone instances in `query`, terminate-and-wait, and orphan grouping; for the
clouds reached with one bearer API key (Lambda, Vast), also finding the key, the API
client's shape (`RestAPI`) and the cloud's `api()`, `check()` and `terminate()`
(`KeyedRestCloud`).

Each cloud keeps its own API paths, error mapping and state mapping; this module holds
only the loops and bookkeeping they had written the same way. `requests` is imported
only when a call is made.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from launcher.clouds.base import AuthError, CloudError, CredentialStatus, NodeState
from launcher.clouds.rest_records import Records

NodeWaiter = Any  # Callable[[ClusterInfo, float], ClusterInfo] (aws/nodes.py)
CHECK_TTL_S = 60.0
TIMEOUT_S = 30.0


class RestSettings(Protocol):
    """A REST cloud's section of config.yaml: at least its API's base URL."""

    def endpoint(self) -> str: ...


class RestTimeouts(Protocol):
    """A REST cloud's timeouts in seconds: at least termination and the poll interval."""

    @property
    def teardown(self) -> float: ...

    @property
    def poll(self) -> float: ...


S = TypeVar("S", bound=RestSettings)
T = TypeVar("T", bound=RestTimeouts)
A = TypeVar("A", bound="RestAPI")


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


class KeyedRestCloud(RestCloudBase[S, T], Generic[S, T, A]):
    """A RestCloudBase reached with one bearer API key. A subclass sets `name`,
    `_records` (its Records), `_find_key` (a staticmethod: (key, where it came from) or
    None, no network) and `_client` (the API class: `(key, endpoint)`), and defines
    `_no_key(for_check)` (what to tell a user with no key), `_whoami(api, source)` (the
    check's probe: one cheap authenticated call, the text shown when it works),
    `_live_ids(api, cluster, recorded)` and `_kill(api, cluster, ids)` (teardown)."""

    name: str
    _records: Records
    _find_key: Callable[[], tuple[str, str] | None]
    _client: Callable[[str, str], A]

    def _no_key(self, for_check: bool) -> str:
        raise NotImplementedError

    def _whoami(self, api: A, source: str) -> str:
        raise NotImplementedError

    def _live_ids(self, api: A, cluster: str, recorded: set[str]) -> list[str]:
        raise NotImplementedError

    def _kill(self, api: A, cluster: str, ids: list[str]) -> None:
        raise NotImplementedError

    def api(self, settings: S | None = None) -> A:
        """The API client for the configured key; AuthError when there is none."""
        found = self._find_key()
        if found is None:
            raise AuthError(self._no_key(False), cloud=self.name)
        return self._client(found[0], (settings or self.settings()).endpoint())

    def check(self) -> CredentialStatus:
        """Whether the key works (`_whoami`); no network when no key is configured. A
        positive answer is reused for CHECK_TTL_S. Never raises."""
        found = self._find_key()
        if found is None:
            return CredentialStatus(False, self._no_key(True))

        def probe() -> CredentialStatus:
            try:
                who = self._whoami(self.api(), found[1])
            except Exception as exc:  # noqa: BLE001 - check never raises
                return CredentialStatus(False, f"{found[1]}: {exc}")
            return CredentialStatus(True, who)

        return self._cached_check(found[0], probe)

    def terminate(self, cluster: str) -> None:
        """Terminate every instance of `cluster` and wait; idempotent. Raises CloudError
        (the record is kept then, so a retry finds the same instances)."""
        if self._records.entries(cluster) is None and self._find_key() is None:
            return  # never launched anything from here, and cannot list: nothing to do
        self._teardown(self.api(), cluster)

    def _teardown(self, api: A, cluster: str) -> None:
        """`_kill` what `_live_ids` lists until it lists nothing, then drop the record."""
        recorded = recorded_ids(self._records, cluster)
        terminate_and_wait(lambda: self._live_ids(api, cluster, recorded),
                           lambda ids: self._kill(api, cluster, ids), cluster=cluster,
                           cloud=self.name, timeout=self._timeouts.teardown,
                           poll=self._timeouts.poll)
        self._records.drop_cluster(cluster)


def find_api_key(env: str, files: Iterable[Path],
                 parse: Callable[[str], str | None]) -> tuple[str, str] | None:
    """(key, where it came from): the variable `env` when set, else the first of `files`
    that `parse` finds a key in (the file's text -> the key or None); None when none is
    configured. No network."""
    value = os.environ.get(env)
    if value:
        return value.strip(), env
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        found = parse(text)
        if found:
            return found, str(path)
    return None


class RestAPI:
    """One account's JSON API at one base URL, bearer key; thread-safe (a request per
    call). A subclass sets `cloud`, `service` (its name in errors) and `max_retries`,
    and defines `call`, which checks the answer of `request` and maps its errors."""

    cloud: str
    service: str
    max_retries: int

    def __init__(self, key: str, endpoint: str, *, timeout: float = TIMEOUT_S) -> None:
        self.key = key
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout

    def request(self, method: str, path: str, body: dict[str, Any] | None, *, action: str,
                region: str | None) -> tuple[int, Any]:
        """(HTTP status, parsed JSON or None) of one call (`request_json`)."""
        return request_json(
            method, f"{self.endpoint}/{path.lstrip('/')}", body, key=self.key,
            timeout=self.timeout, action=action, region=region, cloud=self.cloud,
            service=self.service, endpoint=self.endpoint, max_retries=self.max_retries)


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
