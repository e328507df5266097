"""A local Vast.ai REST API v0 (tests/rest_fake.py), and its pytest fixtures.

Routes and bodies as Vast's CLI (vast.py) and docs use them (`/api/v0/...`, bearer API
key): `POST /bundles/` (a search query `{field: {eq|gte|lte: v}, "type", "order",
"limit"}` -> `{"offers": [...]}` with id, machine_id, gpu_name, num_gpus,
cpu_cores_effective, cpu_ram (MiB), disk_space, dph_total, min_bid, geolocation, rentable,
rented, verified), `PUT /asks/<offer>/` (-> `{"success": true, "new_contract": <id>}`;
an offer taken meanwhile -> `no_such_ask`), `GET /instances/` (-> `{"instances": [...]}`
with id, label, actual_status, intended_status, is_bid, public_ipaddr,
`ports: {"22/tcp": [{"HostIp", "HostPort"}]}`, ssh_host, ssh_port, status_msg),
`DELETE /instances/<id>/`, `GET/POST /ssh/`, `DELETE /ssh/<id>/` (account keys, put on
new instances), `GET
/users/current/`. Errors: `{"success": false, "error": "<code>", "msg": "..."}` (401
not_authorized, no_such_ask, insufficient_credit, invalid_args), 429 "API requests too
frequent" with Retry-After. An instance is `loading` for `boot_polls` listings, then
`running`. `fake.outbid(id)`: what Vast does to an interruptible instance outbid:
stopped (`actual_status: exited`, intended still `running`), its body dies.
Public IPs come from the lab's .24/29 (RANGE); the mapped SSH port is 22 (the bodies'
sshd listens there; real hosts map a high port, which NodeInfo.ssh_port carries).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rest_fake import Answer, RestFake, configured_fake, fake_with_bodies

RANGE = ".24/29"
H100: dict[str, Any] = {"gpu_name": "H100 SXM", "num_gpus": 1, "gpu_ram": 81559, "cpu_cores_effective": 32,
        "cpu_ram": 65536, "disk_space": 500, "verified": True, "rentable": True,
        "rented": False, "reliability2": 0.99}
OFFERS: list[dict[str, Any]] = [
    {**H100, "id": 9001, "machine_id": 101, "geolocation": "Florida, US", "dph_total": 1.80,
     "min_bid": 0.90},
    {**H100, "id": 9002, "machine_id": 102, "geolocation": "Florida, US", "dph_total": 1.95,
     "min_bid": 1.00},
    {**H100, "id": 9003, "machine_id": 103, "geolocation": "Bulgaria, BG", "dph_total": 1.98,
     "min_bid": 1.10, "gpu_name": "H100 NVL"},
    {**H100, "id": 9004, "machine_id": 104, "geolocation": "Vietnam, VN", "dph_total": 2.10,
     "min_bid": 1.20},
]


def err(status: int, code: str, msg: str) -> Answer:
    return status, {"success": False, "error": code, "msg": msg}


NO_SUCH_ASK = err(400, "no_such_ask", "Instance type by id 9001 is not available.")
NO_CREDIT = err(400, "insufficient_credit", "Your account lacks credit; see the billing page.")
BAD_KEY = err(401, "not_authorized", "Invalid API key.")
INVALID = err(400, "invalid_args", "invalid image name")


def _match(offer: dict[str, Any], query: dict[str, Any]) -> bool:
    for field, cond in query.items():
        if not isinstance(cond, dict) or field not in offer:
            continue
        v = offer[field]
        if ("eq" in cond and v != cond["eq"]) or ("gte" in cond and v < cond["gte"]) or (
                "lte" in cond and v > cond["lte"]):
            return False
    return True


class VastFake(RestFake):
    def __init__(self, subnet: str) -> None:
        super().__init__(subnet, RANGE)
        self.offers: dict[int, dict[str, Any]] = {}
        self.instances: dict[str, dict[str, Any]] = {}
        self.ssh_keys: list[dict[str, Any]] = []
        self.boot_polls = 1
        self._ids = itertools.count(7000001)
        self.reset()

    def unauthorized(self) -> Answer:
        return BAD_KEY

    def too_many(self) -> Any:
        return {"success": False, "error": "too_many_requests",
                "msg": "API requests too frequent endpoint threshold=2.0"}

    def route_name(self, method: str, path: str) -> str:
        parts = [p for p in path.removeprefix("/api/v0/").split("/") if p]
        if parts[:1] == ["asks"]:
            return "create"
        if parts[:1] == ["instances"]:
            return "instances" if len(parts) == 1 else f"instance {method}"
        return f"{parts[0] if parts else ''} {method}"

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Answer:
        name = self.route_name(method, path)
        body = body or {}
        if name == "users GET":
            return 200, {"id": 4242, "email": "tester@example.com", "credit": 25.0}
        if name == "bundles POST":
            found = sorted((o for o in self.offers.values()
                            if not o["rented"] and _match(o, body)),
                           key=lambda o: o["dph_total"])
            return 200, {"offers": found[: int(body.get("limit") or 64)]}
        if name == "ssh GET":
            return 200, list(self.ssh_keys)
        if name == "ssh POST":
            key = {"id": max((k["id"] for k in self.ssh_keys), default=0) + 1, "user_id": 4242,
                   "public_key": body["ssh_key"],
                   "created_at": "2026-11-25T00:00:00Z"}
            self.ssh_keys.append(key)
            return 200, {"success": True, "key": key}
        if name == "ssh DELETE":
            kid = int(path.rstrip("/").rsplit("/", 1)[1])
            if not any(k["id"] == kid for k in self.ssh_keys):
                return err(404, "no_such_key", f"SSH key {kid} not found.")
            self.ssh_keys = [k for k in self.ssh_keys if k["id"] != kid]
            return 200, {"success": True}
        if name == "create":
            return self._create(int(path.rstrip("/").rsplit("/", 1)[1]), body)
        if name == "instances":
            return 200, {"instances": self._listing()}
        if name == "instance DELETE":
            iid = path.rstrip("/").rsplit("/", 1)[1]
            inst = self.instances.pop(iid, None)
            if inst is None:
                return err(404, "no_such_instance", f"Instance {iid} not found.")
            self.offers[inst["_offer"]]["rented"] = False
            self.deleted([iid])
            return 200, {"success": True}
        return err(404, "not_found", f"no route {method} {path}")

    def _create(self, offer_id: int, body: dict[str, Any]) -> Answer:
        offer = self.offers.get(offer_id)
        if offer is None or offer["rented"]:
            return err(400, "no_such_ask", f"Instance type by id {offer_id} is not available.")
        if not body.get("image") or not str(body.get("runtype", "")).startswith("ssh"):
            return INVALID
        bid = "price" in body
        if bid and float(body["price"]) < offer["min_bid"]:
            return err(400, "invalid_args", f"bid {body['price']} below the minimum")
        iid = str(next(self._ids))
        ip = self.free_ip({str(i["public_ipaddr"]) for i in self.instances.values()})
        offer["rented"] = True
        self.instances[iid] = {
            "id": int(iid), "label": body.get("label"), "machine_id": offer["machine_id"],
            "actual_status": "loading", "intended_status": "running", "cur_state": "running",
            "next_state": "running", "is_bid": bid, "image_uuid": body["image"],
            "public_ipaddr": ip, "ports": {}, "ssh_host": "ssh5.vast.ai", "ssh_port": 31337,
            "gpu_name": offer["gpu_name"], "num_gpus": offer["num_gpus"],
            "dph_total": body.get("price", offer["dph_total"]),
            "geolocation": offer["geolocation"], "status_msg": "Pulling image",
            "_offer": offer_id, "_polls": 0, "_env": dict(body.get("env") or {}),
            "_keys": [k["public_key"] for k in self.ssh_keys]}
        return 200, {"success": True, "new_contract": int(iid)}

    def _listing(self) -> list[dict[str, Any]]:
        for inst in self.instances.values():
            if inst["actual_status"] == "loading":
                inst["_polls"] += 1
                if inst["_polls"] > self.boot_polls:
                    ports = {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "22"}]}
                    for opt in inst["_env"]:
                        if opt.startswith("-p "):
                            port = opt[3:].split(":")[1]
                            ports[f"{port}/tcp"] = [{"HostIp": "0.0.0.0", "HostPort": port}]
                    inst.update(actual_status="running", status_msg="success, running",
                                ports=ports)
        return [{k: v for k, v in i.items() if not k.startswith("_")}
                for i in self.instances.values()]

    # ---- what tests ask ----
    def outbid(self, iid: str) -> None:
        with self.lock:
            self.instances[iid].update(actual_status="exited", cur_state="stopped",
                                       status_msg="Instance stopped: outbid by a higher bid")
        self.deleted([iid])

    def live(self) -> list[dict[str, Any]]:
        with self.lock:
            return [i for i in self.instances.values()
                    if i["actual_status"] in ("loading", "running")]

    def list_instances(self) -> list[tuple[str, str | None, str | None]]:
        with self.lock:
            return [(str(i["id"]), i["public_ipaddr"], "\n".join(i["_keys"]))
                    for i in self.live()]

    def reset(self) -> None:
        with self.lock:
            self.offers = {int(str(o["id"])): dict(o) for o in OFFERS}
            self.instances.clear()
            self.ssh_keys.clear()
            self.faults.clear()
            self.calls.clear()
            self.on_delete.clear()
            self.boot_polls = 1


_server: list[VastFake] = []


@pytest.fixture
def vast_fake(launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[VastFake]:
    """The fake (one per session, reset per test), VAST_API_KEY and `vast:` config
    pointing at it."""
    with configured_fake(
            _server, lambda: VastFake("10.123.255.0/24"), launcher_home, monkeypatch,
            "VAST", "vast", lambda fake: {"api_endpoint": f"{fake.endpoint}/api/v0"},
    ) as fake:
        yield fake


@pytest.fixture
def vast_cloud(request: pytest.FixtureRequest, vast_fake: VastFake) -> Iterator[VastFake]:
    """`vast_fake` with public IPs inside the lab and an sshd body per live instance."""
    with fake_with_bodies(request, vast_fake, RANGE, "vast", "Vast",
                          gpu_image=_gpu_image) as fake:
        yield fake


def _gpu_image(workdir: Path) -> dict[str, str]:
    """The bodies' image: 1 x H100 machines (fake nvidia-smi, tests/fakes) for the health gate."""
    from tests.fakes import gpu_image

    config_dir = Path(workdir) / "gpu-image-vast"
    config_dir.mkdir(exist_ok=True)
    return gpu_image(config_dir, count=1)
