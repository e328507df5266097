"""`VastCloud`: the `vast` cloud on the Vast.ai marketplace (Cloud, SupportsOrphans,
SupportsCleanup: the SSH key it registers, cleanup.py).

An offer is one host: `max_nodes = 1` (the catalog says so, so the optimizer never
plans a gang here; a multi-node request is InvalidRequestError). Spot = an interruptible
instance: a bid at the offer's `min_bid`.

provision (blocking, all or nothing): the user's SSH key registered on the account once
(`GET/POST /ssh/`: Vast puts account keys on new instances) -> `POST /bundles/` for
offers of the shape in the region, cheapest first -> for up to MAX_OFFERS offers: the
label `launcher-<cluster>-0` recorded (rest_records) BEFORE `PUT /asks/<offer>/`
(image, disk, label, `runtype: ssh_direc ssh_proxy`, `price` when a bid, the task's
ports as `-p N:N` in `env`); an offer taken
meanwhile (`no_such_ask`) -> the next one -> `GET /instances/` until `actual_status`
is `running` with the public IP and the host port mapped to 22/tcp -> the node waiter.
Any failure (or Ctrl-C) destroys what was created (by id, and by label for a create
whose answer never came), waits until it is no longer listed, drops the record.

query: `actual_status` loading/created -> PENDING, running -> RUNNING; exited/stopped
while `intended_status` is still running on an interruptible instance -> PREEMPTED
(outbid: Vast stops it and would resume it when the bid wins again), else STOPPED;
not listed -> TERMINATED. terminate (idempotent, blocking): `DELETE /instances/<id>/`.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from launcher.clouds.rest_cloud import (
    KeyedRestCloud,
    by_cluster,
    with_recorded,
)
from launcher.clouds.rest_records import Records
from launcher.clouds.vast.api import CLOUD, NotFound, VastAPI, api_key, key_files
from launcher.clouds.vast.offers import bid_price, in_region, parse_shape, search_body
from launcher.config.gpu_clouds import VastSettings

MAX_OFFERS = 3
_LABEL = re.compile(r"^launcher-(.+)-(\d+)$")
RECORDS = Records(CLOUD)


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Seconds: boot (create to running), the SSH wait, deletion; the poll interval."""

    boot: float = 1200.0
    ssh: float = 900.0
    teardown: float = 600.0
    poll: float = 5.0


def label(cluster: str) -> str:
    return f"launcher-{cluster}-0"


def node_state(inst: dict[str, Any] | None) -> NodeState:
    """Vast's view of one instance (see the module docstring)."""
    if inst is None:
        return NodeState.TERMINATED
    actual = str(inst.get("actual_status") or "")
    if actual == "running":
        return NodeState.RUNNING
    if actual in ("", "loading", "created", "scheduling"):
        return NodeState.PENDING
    if actual in ("exited", "stopped"):
        if inst.get("is_bid") and inst.get("intended_status") == "running":
            return NodeState.PREEMPTED
        return NodeState.STOPPED
    return NodeState.UNKNOWN


def _settings() -> VastSettings:
    from launcher.config.settings import load_config

    return load_config().vast


class VastCloud(KeyedRestCloud[VastSettings, Timeouts, VastAPI]):
    """See the module docstring. Constructing it imports nothing and calls nothing."""

    name = CLOUD
    _load_settings = staticmethod(_settings)
    _default_timeouts = Timeouts
    _records = RECORDS
    _find_key = staticmethod(api_key)
    _client = VastAPI

    def _no_key(self, for_check: bool) -> str:
        if for_check:
            return f"no API key: set VAST_API_KEY or write it to {key_files()[0]}"
        return (f"no Vast API key (set VAST_API_KEY or run `vastai set api-key`, "
                f"which writes {key_files()[0]})")

    def _whoami(self, api: VastAPI, source: str) -> str:
        """`check`: the account of the key (`GET /users/current/`)."""
        user = api.call("GET", "users/current/", action="check credentials")
        who = user.get("email") or user.get("username") or user.get("id") or "?"
        return f"{who} (API key from {source})"

    # ---- Cloud (check, terminate: KeyedRestCloud) ----

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Create the one node (see the module docstring). Raises CapacityError,
        AuthError, CloudQuotaError, InvalidRequestError or CloudError; nothing is left
        on failure."""
        from launcher.runtime.keys import ensure_user_key
        from launcher.task.config_section import apply_overrides

        if req.num_nodes != 1:
            raise InvalidRequestError(f"Vast offers are single hosts: max 1 node, asked for "
                                      f"{req.num_nodes}.", cloud=CLOUD, region=req.region)
        shape = parse_shape(req.instance_type)
        env = port_env(req.ports)
        settings = apply_overrides(self.settings(), req.settings.get("vast") or {})
        api = self.api(settings)
        user_key = ensure_user_key()
        self._ensure_key(api, req.ssh_public_key or user_key.public_key())
        disk = int(req.disk_size_gb or settings.disk_gb)
        found = api.call("POST", "bundles/", search_body(shape, req.use_spot, disk),
                         action="search offers", region=req.region)
        offers = [o for o in found.get("offers") or [] if in_region(o, req.region)]
        if not offers:
            raise CapacityError(f"no rentable {req.instance_type} offer in {req.region} now",
                                cloud=CLOUD, region=req.region)
        name = label(req.cluster_name)
        try:
            iid = self._create(api, req, offers, name, settings, disk, env)
            inst = self._wait_running(api, iid, req.region)
            ip, port = ssh_address(inst)
            node = NodeInfo(rank=0, node_id=iid, internal_ip=ip, external_ip=ip,
                            ssh_user=settings.ssh_user, ssh_port=port)
            info = ClusterInfo(cluster_name=req.cluster_name, cloud=CLOUD, region=req.region,
                               zone=None, instance_type=req.instance_type,
                               use_spot=req.use_spot, nodes=(node,),
                               ssh_key_path=user_key.private_path)
            return self._waiter()(info, time.monotonic() + self._timeouts.ssh)
        except BaseException:
            with contextlib.suppress(Exception):
                self._teardown(api, req.cluster_name)
            raise

    def _create(self, api: VastAPI, req: ProvisionRequest, offers: list[dict[str, Any]],
                name: str, settings: VastSettings, disk: int, env: dict[str, str]) -> str:
        last: CapacityError | None = None
        for offer in offers[:MAX_OFFERS]:
            body: dict[str, Any] = {"client_id": "me", "image": req.image_id or settings.image,
                                    "disk": disk, "label": name, "runtype": "ssh_direc ssh_proxy",
                                    "env": env, "onstart": ""}
            if req.use_spot:
                body["price"] = bid_price(offer)
            RECORDS.add_pending(req.cluster_name, name, req.region, spot=req.use_spot)
            try:
                out = api.call("PUT", f"asks/{offer['id']}/", body,
                               action=f"create instance on offer {offer['id']}", region=req.region)
            except CapacityError as err:  # taken meanwhile: the next offer
                last = err
                continue
            iid = str(out.get("new_contract") or "")
            if not iid:
                raise CloudError(f"create on offer {offer['id']}: no new_contract in {out!r}",
                                 cloud=CLOUD, region=req.region)
            RECORDS.set_id(req.cluster_name, name, iid)
            return iid
        raise CapacityError(f"{req.instance_type} in {req.region}: {len(offers[:MAX_OFFERS])} "
                            f"offers tried, none rentable ({last})", cloud=CLOUD,
                            region=req.region)

    def _ensure_key(self, api: VastAPI, public_key: str) -> None:
        listed = api.call("GET", "ssh/", action="list SSH keys")
        keys = listed if isinstance(listed, list) else (listed or {}).get("keys") or []
        mine = public_key.split()[:2]
        if any(str(k.get("public_key") or k.get("key") or "").split()[:2] == mine
               for k in keys if isinstance(k, dict)):
            return
        api.call("POST", "ssh/", {"ssh_key": public_key.strip()}, action="register SSH key")

    def _list(self, api: VastAPI) -> list[dict[str, Any]]:
        return list(api.call("GET", "instances/", action="list instances").get("instances") or [])

    def _wait_running(self, api: VastAPI, iid: str, region: str) -> dict[str, Any]:
        deadline = time.monotonic() + self._timeouts.boot
        for n in itertools.count():
            inst = next((i for i in self._list(api) if str(i.get("id")) == iid), None)
            state = node_state(inst)
            if state in (NodeState.TERMINATED, NodeState.PREEMPTED, NodeState.STOPPED):
                raise CapacityError(f"instance {iid} is {inst and inst.get('actual_status') or 'gone'}"
                                    f" while starting ({inst and inst.get('status_msg') or ''})",
                                    cloud=CLOUD, region=region)
            if state is NodeState.RUNNING and inst is not None:
                with contextlib.suppress(CloudError):
                    ssh_address(inst)
                    return inst
            if time.monotonic() > deadline:
                raise CloudError(f"instance {iid} not running after {self._timeouts.boot:.0f}s",
                                 cloud=CLOUD, region=region)
            time.sleep(min(self._timeouts.poll, 0.25 * 2 ** n))
        raise AssertionError("unreachable")

    def query(self, cluster: str) -> dict[str, NodeState]:
        """Instance id -> Vast's view (see the module docstring). Raises CloudError."""
        listed = self._list(self.api())
        out = {str(i["id"]): node_state(i) for i in listed
               if str(i.get("label") or "") == label(cluster)}
        return with_recorded(out, RECORDS, cluster)

    def _live_ids(self, api: VastAPI, cluster: str, recorded: set[str]) -> list[str]:
        return [str(i["id"]) for i in self._list(api)
                if str(i["id"]) in recorded or str(i.get("label") or "") == label(cluster)]

    def _kill(self, api: VastAPI, cluster: str, ids: list[str]) -> None:
        for iid in ids:
            with contextlib.suppress(NotFound):
                api.call("DELETE", f"instances/{iid}/", action=f"destroy instance {iid}")

    # ---- SupportsOrphans ----

    def list_tagged_clusters(self) -> dict[str, list[str]]:
        """cluster (from the label) -> ids of its instances. Raises CloudError."""
        return by_cluster((m.group(1), str(inst["id"])) for inst in self._list(self.api())
                          if (m := _LABEL.match(str(inst.get("label") or ""))))


    # ---- SupportsCleanup ----

    def list_leftovers(self, region: str | None = None) -> list[Leftover]:
        """The launcher SSH key registered on the account (account-wide)."""
        from launcher.clouds.vast import cleanup

        api = self.api()
        return cleanup.leftovers(api, self._list(api))

    def delete_leftover(self, item: Leftover) -> None:
        from launcher.clouds.vast import cleanup

        cleanup.delete(self.api(), item)


def port_env(ports: tuple[str, ...]) -> dict[str, str]:
    """The create body's `env` mapping each task port ("8080", "8000-8003": at most 32)
    the docker way (`"-p 8080:8080": "1"`, as Vast's CLI sends `--env "-p ..."`); Vast
    then lists the host port in `ports`. Raises InvalidRequestError."""
    env: dict[str, str] = {}
    for p in ports:
        lo, _, hi = str(p).partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise InvalidRequestError(f"ports: {p!r} is not a port or a range",
                                      cloud=CLOUD) from None
        if not 1 <= a <= b <= 65535 or b - a >= 32:
            raise InvalidRequestError(f"ports: {p!r} is out of 1-65535 or over 32 ports",
                                      cloud=CLOUD)
        env.update({f"-p {n}:{n}": "1" for n in range(a, b + 1)})
    return env


def ssh_address(inst: dict[str, Any]) -> tuple[str, int]:
    """(public IP, host port mapped to the container's 22/tcp): direct SSH. Raises
    CloudError while the mapping is not there yet."""
    ip = str(inst.get("public_ipaddr") or "").strip()
    mapped = (inst.get("ports") or {}).get("22/tcp") or []
    if not ip or not mapped:
        raise CloudError(f"instance {inst.get('id')} has no direct SSH address yet", cloud=CLOUD)
    return ip, int(mapped[0]["HostPort"])
