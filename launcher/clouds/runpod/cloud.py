"""`RunPodCloud`: the `runpod` cloud on RunPod's GraphQL API (Cloud, SupportsOrphans).

provision (blocking, all or nothing; one pod = one node, so `num_nodes` must be 1: RunPod
Instant Clusters have no public provisioning API): record the pod's name (records.py) ->
spot only: the minimum bid for the GPU (`gpuTypes { lowestPrice { minimumBidPrice } }`)
-> `podFindAndDeployOnDemand`, or `podRentInterruptable` with `bidPerGpu` = that bid x
(1 + runpod.bid_margin) -> record its id -> poll `pod` until it runs with port 22 mapped
to a public IP and port -> the node waiter (default: the SSH waiter shared with AWS: host
key pinned, cluster key installed). The pod runs `runpod.image` (or the task's image_id)
with `PUBLIC_KEY` (authorized for root by RunPod's images), ports `22/tcp`, in the
placement's data center (the catalog zone) and cloud type (SECURE/COMMUNITY from the
instance type). Any failure (or Ctrl-C) terminates what was recorded, waits, and raises
the typed error (errors.py).

query: pod id -> NodeState. A pod gone is TERMINATED; `EXITED` is PREEMPTED for an
interruptible pod (launcher never stops spot pods: RunPod stopped it for a higher bid)
and STOPPED otherwise; RUNNING with no runtime yet is PENDING.
terminate (idempotent, blocking): every recorded pod id and every pod of the account
named after the cluster (`launcher-<cluster>-<rank>`) -> `podTerminate`, then wait until
none is listed, then drop the record. list_tagged_clusters: pods named that way.

Tests inject `node_waiter` and `timeouts`; the endpoint comes from `runpod.api_endpoint`
(or RUNPOD_API_BASE_URL), the key from RUNPOD_API_KEY or ~/.runpod/config.toml.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from typing import Any

from launcher.clouds.base import (
    CapacityError,
    CloudError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.rest_cloud import RestCloudBase, by_cluster
from launcher.clouds.runpod import api, instance_types, records
from launcher.clouds.runpod.credentials import api_key
from launcher.clouds.runpod.errors import CLOUD
from launcher.config.runpod import RunPodSettings

_NAME = re.compile(r"^launcher-(.+)-(\d+)$")
_NOT_FOUND = re.compile(r"not found|does not exist|no pod", re.I)


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Seconds: a pod reaching RUNNING with SSH mapped, the SSH wait, termination; poll."""

    start: float = 900.0
    ssh: float = 600.0
    teardown: float = 300.0
    poll: float = 2.0


def pod_name(cluster: str, rank: int = 0) -> str:
    return f"launcher-{cluster}-{rank}"


def _settings() -> RunPodSettings:
    from launcher.config.settings import load_config

    return load_config().runpod


class RunPodCloud(RestCloudBase[RunPodSettings, Timeouts]):
    """See the module docstring. Constructing it touches no network."""

    name = CLOUD
    _load_settings = staticmethod(_settings)
    _default_timeouts = Timeouts

    def _client(self, settings: RunPodSettings | None = None) -> api.GraphQL:
        key, why = api_key()
        if key is None:
            from launcher.clouds.base import AuthError

            raise AuthError(f"RunPod: {why}", cloud=CLOUD)
        return api.GraphQL((settings or self.settings()).endpoint(), key)

    # ---- Cloud ----

    def check(self) -> CredentialStatus:
        """The account's email, or why not; no network when no key is configured. A
        positive answer is reused for CHECK_TTL_S."""
        key, why = api_key()
        if key is None:
            return CredentialStatus(False, why)
        endpoint = self.settings().endpoint()

        def probe() -> CredentialStatus:
            try:
                client = api.GraphQL(endpoint, key, timeout=10.0)
                me = client.call(api.MYSELF, action="check key").get("myself") or {}
            except CloudError as exc:
                return CredentialStatus(False, str(exc))
            except Exception as exc:  # never raises
                return CredentialStatus(False, f"{type(exc).__name__}: {exc}")
            return CredentialStatus(True, f"{me.get('email') or me.get('id') or 'key'} ({why})")

        return self._cached_check(endpoint, probe)

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Deploy the pod (see the module docstring). Raises CapacityError, QuotaError,
        AuthError, InvalidRequestError or CloudError; nothing is left on failure."""
        from launcher.runtime.keys import ensure_user_key
        from launcher.task.config_section import apply_overrides

        if req.num_nodes != 1:
            raise InvalidRequestError(
                f"RunPod pods are single machines: {req.num_nodes} nodes cannot be ganged "
                "(Instant Clusters have no public provisioning API); use num_nodes: 1 or "
                "another cloud.", cloud=CLOUD, region=req.region, zone=req.zone)
        shape = instance_types.parse(req.instance_type)
        settings = apply_overrides(self.settings(), req.settings.get("runpod") or {})
        client = self._client(settings)
        user_key = ensure_user_key()
        public_key = (req.ssh_public_key or user_key.public_key()).strip()
        name = pod_name(req.cluster_name)
        where = {"region": req.region, "zone": req.zone}
        records.add_pod(req.cluster_name, name, spot=req.use_spot, region=req.region,
                        zone=req.zone)  # before anything exists
        try:
            pod_input: dict[str, Any] = {
                "name": name, "imageName": req.image_id or settings.image,
                "gpuTypeId": shape.gpu_type_id, "gpuCount": shape.gpu_count,
                "cloudType": shape.cloud_type, "supportPublicIp": True, "startSsh": True,
                "containerDiskInGb": int(req.disk_size_gb or settings.container_disk_gb),
                "volumeInGb": settings.volume_gb, "volumeMountPath": "/workspace",
                "ports": ",".join(["22/tcp", *_extra_ports(req.ports)]),
                "env": [{"key": "PUBLIC_KEY", "value": public_key},
                        {"key": "LAUNCHER_CLUSTER", "value": req.cluster_name}],
            }
            if req.zone:
                pod_input["dataCenterId"] = req.zone
            if req.use_spot:
                bid = self._min_bid(client, shape, req.zone, where)
                pod_input["bidPerGpu"] = round(bid * (1 + settings.bid_margin), 4)
                data = client.call(api.DEPLOY_SPOT, {"input": pod_input}, mutating=True,
                                   action="deploy interruptible pod", **where)
                pod = data.get("podRentInterruptable")
            else:
                data = client.call(api.DEPLOY_ON_DEMAND, {"input": pod_input}, mutating=True,
                                   action="deploy pod", **where)
                pod = data.get("podFindAndDeployOnDemand")
            if not pod or not pod.get("id"):
                raise CapacityError(f"RunPod deploy returned no pod for {req.instance_type}",
                                    cloud=CLOUD, **where)
            pod_id = str(pod["id"])
            records.add_pod(req.cluster_name, name, pod_id)
            ip, port = self._wait_running(client, pod_id, where)
            node = NodeInfo(rank=0, node_id=pod_id, internal_ip=ip, external_ip=ip,
                            ssh_user="root", ssh_port=port)
            info = ClusterInfo(cluster_name=req.cluster_name, cloud=CLOUD, region=req.region,
                               zone=req.zone, instance_type=req.instance_type,
                               use_spot=req.use_spot, nodes=(node,),
                               ssh_key_path=user_key.private_path)
            waited: ClusterInfo = self._waiter()(info, time.monotonic() + self._timeouts.ssh)
            return waited
        except BaseException:
            with contextlib.suppress(Exception):
                self.terminate(req.cluster_name)
            raise

    def _min_bid(self, client: api.GraphQL, shape: instance_types.PodShape, zone: str | None,
                 where: dict[str, Any]) -> float:
        lowest_input: dict[str, Any] = {"gpuCount": shape.gpu_count,
                                        "secureCloud": shape.cloud_type == "SECURE"}
        if zone:
            lowest_input["dataCenterId"] = zone
        data = client.call(api.LOWEST_PRICE, {"id": shape.gpu_type_id, "lowest": lowest_input},
                           action="read the minimum bid", **where)
        types = data.get("gpuTypes") or []
        lowest = (types[0].get("lowestPrice") or {}) if types else {}
        bid = lowest.get("minimumBidPrice")
        if bid is None:
            raise CapacityError(f"RunPod offers no interruptible {shape.gpu_type_id} "
                                f"x{shape.gpu_count} here now", cloud=CLOUD, **where)
        return float(bid)

    def _wait_running(self, client: api.GraphQL, pod_id: str,
                      where: dict[str, Any]) -> tuple[str, int]:
        """(public ip, public port of 22) once the pod runs with SSH mapped."""
        deadline = time.monotonic() + self._timeouts.start
        while True:
            pod = client.call(api.GET_POD, {"input": {"podId": pod_id}},
                              action="read pod", **where).get("pod")
            if pod is None:
                raise CapacityError(f"RunPod pod {pod_id} vanished while starting",
                                    cloud=CLOUD, **where)
            status = str(pod.get("desiredStatus") or "")
            if status in ("EXITED", "TERMINATED"):
                raise CapacityError(f"RunPod pod {pod_id} is {status} while starting "
                                    f"({pod.get('lastStatusChange') or 'no reason given'})",
                                    cloud=CLOUD, **where)
            for p in ((pod.get("runtime") or {}).get("ports") or []):
                if p.get("privatePort") == 22 and p.get("isIpPublic") and p.get("ip"):
                    return str(p["ip"]), int(p.get("publicPort") or 22)
            if time.monotonic() > deadline:
                raise CapacityError(f"RunPod pod {pod_id} did not expose SSH in "
                                    f"{self._timeouts.start:.0f}s", cloud=CLOUD, **where)
            time.sleep(self._timeouts.poll)

    def _pods(self, client: api.GraphQL) -> list[dict[str, Any]]:
        me = client.call(api.LIST_PODS, action="list pods").get("myself") or {}
        return [p for p in me.get("pods") or [] if isinstance(p, dict)]

    def query(self, cluster: str) -> dict[str, NodeState]:
        """Pod id -> RunPod's view (see the module docstring). Raises CloudError."""
        rec = records.read(cluster) or {}
        spot = bool(rec.get("spot"))
        pods = {str(p["id"]): p for p in self._pods(self._client())}
        ids = {i for i in (rec.get("pods") or {}).values() if i}
        ids |= {i for i, p in pods.items() if _cluster_of(p) == cluster}
        return {i: pod_state(pods.get(i), spot) for i in sorted(ids)}

    def terminate(self, cluster: str) -> None:
        """Terminate every pod of `cluster` and wait until RunPod lists none; idempotent.
        Raises CloudError (the record is kept then, so a retry finds the same pods)."""
        client = self._client()
        rec = records.read(cluster) or {}
        deadline = time.monotonic() + self._timeouts.teardown
        while True:
            ours = set((rec.get("pods") or {}).values())
            live = {str(p["id"]) for p in self._pods(client)
                    if (_cluster_of(p) == cluster or str(p["id"]) in ours)
                    and str(p.get("desiredStatus")) != "TERMINATED"}
            if not live:
                break
            if time.monotonic() > deadline:
                raise CloudError(f"RunPod pods {sorted(live)} of {cluster} still listed "
                                 f"{self._timeouts.teardown:.0f}s after termination",
                                 cloud=CLOUD)
            for pod_id in sorted(live):
                try:
                    client.call(api.TERMINATE, {"input": {"podId": pod_id}}, mutating=True,
                                action=f"terminate pod {pod_id}")
                except CloudError as exc:
                    if not _NOT_FOUND.search(str(exc)):
                        raise
            time.sleep(min(self._timeouts.poll, 0.5))
        records.drop(cluster)

    # ---- SupportsOrphans ----

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster -> ids of its pods (named `launcher-<cluster>-<rank>`). Raises CloudError."""
        return by_cluster((_cluster_of(p), str(p["id"])) for p in self._pods(self._client())
                          if str(p.get("desiredStatus")) != "TERMINATED")


def _cluster_of(pod: dict[str, Any]) -> str | None:
    m = _NAME.match(str(pod.get("name") or ""))
    return m.group(1) if m else None


def _extra_ports(ports: tuple[str, ...]) -> list[str]:
    """The task's ports as RunPod port specs (`8888/http`); 22 is always there."""
    out = []
    for spec in ports:
        p = str(spec).strip()
        if p and p != "22":
            out.append(p if "/" in p else f"{p}/http")
    return out


def pod_state(pod: dict[str, Any] | None, spot: bool) -> NodeState:
    """RunPod's view of one pod (None: gone) as a NodeState."""
    if pod is None:
        return NodeState.TERMINATED
    status = str(pod.get("desiredStatus") or "").upper()
    if status == "RUNNING":
        return NodeState.RUNNING if pod.get("runtime") else NodeState.PENDING
    if status in ("CREATED", "RESTARTING"):
        return NodeState.PENDING
    if status == "EXITED":
        return NodeState.PREEMPTED if spot else NodeState.STOPPED
    if status == "TERMINATED":
        return NodeState.TERMINATED
    return NodeState.UNKNOWN
