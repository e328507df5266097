"""`LambdaCloud`: the `lambda` cloud on Lambda Cloud API v1 (Cloud, SupportsOrphans,
SupportsCleanup: the SSH key and `ports:` firewall rules it adds, cleanup.py).

provision (blocking, all or nothing):
1. `GET /instance-types`: an unknown type is InvalidRequestError; a region missing from
   `regions_with_capacity_available` is CapacityError before anything is created;
2. the task's `ports:` opened in the account's firewall rules (firewall.py), then
   the user's SSH public key registered once (`GET/POST /ssh-keys`, name
   `launcher-<fingerprint>`; an existing key with the same public key is reused);
3. per rank, one `POST /instance-operations/launch` (quantity 1, name
   `launcher-<cluster>-<rank>`), the name recorded (rest_records) BEFORE the call and
   the id after it: a gang is several launches, Lambda has no gang request;
4. `GET /instances` until every node is `active` with an IP (`unhealthy` or gone: the
   gang fails); then the node waiter (default: the SSH waiter shared with AWS).
Any failure (or Ctrl-C) terminates every instance launched so far (by id, and by name
for a launch whose answer never came), waits until Lambda lists them terminated, drops
the records and raises the typed error (launcher.clouds.lambda_.api).

No spot (Lambda sells on-demand only: a spot request is InvalidRequestError), no zones,
no stop/start (Lambda instances cannot be stopped), no inter-node InfiniBand on on-demand
instances (1-Click Clusters are not provisionable through the public API).
query: instances named for the cluster -> NodeState (booting PENDING, active RUNNING,
unhealthy UNKNOWN, terminating/terminated or gone TERMINATED).
terminate (idempotent, blocking): terminate recorded and named instances, wait.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import itertools
import re
import time
from typing import Any

from launcher.clouds.base import (
    CapacityError,
    CloudError,
    ClusterInfo,
    InvalidRequestError,
    Leftover,
    NodeInfo,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.lambda_.api import CLOUD, LambdaAPI, api_key, keys_file
from launcher.clouds.rest_cloud import (
    KeyedRestCloud,
    by_cluster,
    with_recorded,
)
from launcher.clouds.rest_records import Records
from launcher.config.gpu_clouds import LambdaSettings

_NAME = re.compile(r"^launcher-(.+)-(\d+)$")
_STATES = {"booting": NodeState.PENDING, "active": NodeState.RUNNING,
           "unhealthy": NodeState.UNKNOWN, "terminating": NodeState.TERMINATED,
           "terminated": NodeState.TERMINATED}
RECORDS = Records(CLOUD)


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Seconds: boot (launch to `active`), the SSH wait, termination; the poll interval."""

    boot: float = 1200.0
    ssh: float = 900.0
    teardown: float = 600.0
    poll: float = 5.0


def instance_name(cluster: str, rank: int) -> str:
    return f"launcher-{cluster}-{rank}"


def _settings() -> LambdaSettings:
    from launcher.config.settings import load_config

    return load_config().lambda_


class LambdaCloud(KeyedRestCloud[LambdaSettings, Timeouts, LambdaAPI]):
    """See the module docstring. Constructing it imports nothing and calls nothing."""

    name = CLOUD
    _load_settings = staticmethod(_settings)
    _default_timeouts = Timeouts
    _records = RECORDS
    _find_key = staticmethod(api_key)
    _client = LambdaAPI

    def _no_key(self, for_check: bool) -> str:
        if for_check:
            return f"no API key: set LAMBDA_API_KEY or write 'api_key = ...' to {keys_file()}"
        return f"no Lambda API key (set LAMBDA_API_KEY or write 'api_key = ...' to {keys_file()})"

    def _whoami(self, api: LambdaAPI, source: str) -> str:
        """`check`: the key works when `GET /ssh-keys` answers."""
        api.call("GET", "ssh-keys", action="check credentials")
        return f"API key from {source} ({self.settings().endpoint()})"

    # ---- Cloud (check, terminate: KeyedRestCloud) ----

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Create the gang (see the module docstring). Raises CapacityError, QuotaError,
        AuthError, InvalidRequestError or CloudError; nothing is left on failure."""
        from launcher.runtime.keys import ensure_user_key
        from launcher.task.config_section import apply_overrides

        if req.num_nodes < 1:
            raise InvalidRequestError("num_nodes must be >= 1.", cloud=CLOUD, region=req.region)
        if req.use_spot:
            raise InvalidRequestError("Lambda has no spot instances.", cloud=CLOUD,
                                      region=req.region)
        if req.fabric and req.fabric != "ethernet" and req.num_nodes > 1:
            raise InvalidRequestError(f"Lambda on-demand instances have no {req.fabric} "
                                      "between nodes (1-Click Clusters are not supported).",
                                      cloud=CLOUD, region=req.region)
        settings = apply_overrides(self.settings(), req.settings.get("lambda") or {})
        api = self.api(settings)
        self._check_capacity(api, req)
        if req.ports:
            from launcher.clouds.lambda_.firewall import open_ports

            open_ports(api, req.ports, req.region)
        user_key = ensure_user_key()
        key_name = self._ensure_key(api, req.ssh_public_key or user_key.public_key())
        launched: list[str] = []
        try:
            for rank in range(req.num_nodes):
                name = instance_name(req.cluster_name, rank)
                RECORDS.add_pending(req.cluster_name, name, req.region)
                data = api.call("POST", "instance-operations/launch", {
                    "region_name": req.region, "instance_type_name": req.instance_type,
                    "ssh_key_names": [key_name], "file_system_names": [], "quantity": 1,
                    "name": name}, action=f"launch {name}", region=req.region)
                ids = [str(i) for i in (data or {}).get("instance_ids") or []]
                if len(ids) != 1:
                    raise CloudError(f"launch {name}: expected one instance id, got {data!r}",
                                     cloud=CLOUD, region=req.region)
                RECORDS.set_id(req.cluster_name, name, ids[0])
                launched.append(ids[0])
            found = self._wait_active(api, launched, req.region)
            nodes = tuple(NodeInfo(
                rank=r, node_id=i, internal_ip=str(found[i].get("private_ip") or found[i]["ip"]),
                external_ip=None if settings.use_internal_ips else str(found[i]["ip"]),
                ssh_user=settings.ssh_user) for r, i in enumerate(launched))
            info = ClusterInfo(cluster_name=req.cluster_name, cloud=CLOUD, region=req.region,
                               zone=None, instance_type=req.instance_type, use_spot=False,
                               nodes=nodes, ssh_key_path=user_key.private_path)
            return self._waiter()(info, time.monotonic() + self._timeouts.ssh)
        except BaseException:
            with contextlib.suppress(Exception):
                self._teardown(api, req.cluster_name)
            raise

    def _check_capacity(self, api: LambdaAPI, req: ProvisionRequest) -> None:
        types = api.call("GET", "instance-types", action="list instance types",
                         region=req.region) or {}
        entry = types.get(req.instance_type)
        if not isinstance(entry, dict):
            raise InvalidRequestError(f"Lambda has no instance type {req.instance_type!r}.",
                                      cloud=CLOUD, region=req.region)
        regions = {str(r.get("name")) for r in entry.get("regions_with_capacity_available") or []}
        if req.region not in regions:
            raise CapacityError(f"{req.instance_type}: no capacity in {req.region} now "
                                f"(available: {', '.join(sorted(regions)) or 'none'})",
                                cloud=CLOUD, region=req.region)

    def _ensure_key(self, api: LambdaAPI, public_key: str) -> str:
        body = public_key.split()[1] if len(public_key.split()) > 1 else public_key
        digest = hashlib.sha256(base64.b64decode(body + "==")).hexdigest()[:12]
        for key in api.call("GET", "ssh-keys", action="list SSH keys") or []:
            if str(key.get("public_key", "")).split()[:2] == public_key.split()[:2]:
                return str(key["name"])
        name = f"launcher-{digest}"
        api.call("POST", "ssh-keys", {"name": name, "public_key": public_key.strip()},
                 action="register SSH key")
        return name

    def _list(self, api: LambdaAPI) -> list[dict[str, Any]]:
        return list(api.call("GET", "instances", action="list instances") or [])

    def _wait_active(self, api: LambdaAPI, ids: list[str], region: str) -> dict[str, Any]:
        deadline = time.monotonic() + self._timeouts.boot
        for n in itertools.count():
            listed = {str(i["id"]): i for i in self._list(api)}
            bad = [i for i in ids if i not in listed
                   or listed[i].get("status") in ("unhealthy", "terminating", "terminated")]
            if bad:
                raise CapacityError(f"instances {bad} failed while booting "
                                    f"({[listed.get(i, {}).get('status', 'gone') for i in bad]})",
                                    cloud=CLOUD, region=region)
            if all(listed[i].get("status") == "active" and listed[i].get("ip") for i in ids):
                return listed
            if time.monotonic() > deadline:
                raise CloudError(f"instances {ids} not active after {self._timeouts.boot:.0f}s",
                                 cloud=CLOUD, region=region)
            time.sleep(min(self._timeouts.poll, 0.25 * 2 ** n))  # 0.25, 0.5, 1 ... poll
        raise AssertionError("unreachable")

    def query(self, cluster: str) -> dict[str, NodeState]:
        """Instance id -> Lambda's view (see the module docstring). Raises CloudError."""
        listed = self._list(self.api())
        out: dict[str, NodeState] = {}
        for inst in listed:
            m = _NAME.match(str(inst.get("name") or ""))
            if m and m.group(1) == cluster:
                out[str(inst["id"])] = _STATES.get(str(inst.get("status")), NodeState.UNKNOWN)
        return with_recorded(out, RECORDS, cluster)

    def _live_ids(self, api: LambdaAPI, cluster: str, recorded: set[str]) -> list[str]:
        return [str(i["id"]) for i in self._list(api)
                if i.get("status") != "terminated" and (
                    str(i["id"]) in recorded or (
                        (m := _NAME.match(str(i.get("name") or ""))) and m.group(1) == cluster))]

    def _kill(self, api: LambdaAPI, cluster: str, ids: list[str]) -> None:
        api.call("POST", "instance-operations/terminate", {"instance_ids": ids},
                 action=f"terminate {cluster}")

    # ---- SupportsOrphans ----

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster (from the instance name) -> ids of its live instances. Raises CloudError."""
        return by_cluster(
            (m.group(1), str(inst["id"])) for inst in self._list(self.api())
            if (m := _NAME.match(str(inst.get("name") or "")))
            and inst.get("status") not in ("terminating", "terminated"))

    # ---- SupportsCleanup ----

    def list_leftovers(self, region: str | None = None) -> list[Leftover]:
        """The account's launcher SSH key and `ports:` firewall rules (account-wide)."""
        from launcher.clouds.lambda_ import cleanup

        return cleanup.leftovers(self.api())

    def delete_leftover(self, item: Leftover) -> None:
        from launcher.clouds.lambda_ import cleanup

        cleanup.delete(self.api(), item)
