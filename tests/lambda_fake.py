"""A local Lambda Cloud API v1 (tests/rest_fake.py), and its pytest fixtures.

Routes and bodies as Lambda documents them (`/api/v1/...`, bearer API key): instance
types (`{"data": {name: {"instance_type": {...}, "regions_with_capacity_available":
[{"name", "description"}]}}}`), launch (`{"data": {"instance_ids": [...]}}`), terminate
(`{"data": {"terminated_instances": [...]}}`), instances (list and by id: id, name, ip,
private_ip, status booting/active/unhealthy/terminating/terminated, ssh_key_names,
region, instance_type, hostname), ssh-keys (list, add, delete), firewall-rules (list,
replace). Errors are Lambda's
`{"error": {"code", "message", "suggestion"}}`: 401 global/invalid-api-key, 404
global/object-does-not-exist, 400 global/invalid-parameters,
instance-operations/launch/insufficient-capacity, global/quota-exceeded; 429 with
Retry-After. A launched instance is `booting` for `boot_polls` instance listings, then
`active`; terminate makes it `terminating` for one listing, then it is gone.
Private IPs come from the lab's .16/29 (RANGE); public IPs from 198.51.100.0/24
(documentation addresses, never contacted: tests reach nodes on private IPs).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rest_fake import Answer, RestFake, configured_fake, fake_with_bodies

RANGE = ".16/29"
TYPES: dict[str, dict[str, Any]] = {
    "cpu_4x_general": {"description": "4x CPU General", "gpu_description": "", "price": 20,
                       "specs": {"vcpus": 4, "memory_gib": 16, "storage_gib": 100, "gpus": 0}},
    "gpu_1x_a10": {"description": "1x A10 (24 GB PCIe)", "gpu_description": "A10 (24 GB PCIe)",
                   "price": 75, "specs": {"vcpus": 30, "memory_gib": 200, "storage_gib": 1400,
                                          "gpus": 1}},
    "gpu_8x_h100_sxm5": {"description": "8x H100 (80 GB SXM5)",
                         "gpu_description": "H100 (80 GB SXM5)", "price": 2392,
                         "specs": {"vcpus": 208, "memory_gib": 1800, "storage_gib": 24780,
                                   "gpus": 8}},
}
REGIONS = {"us-east-1": "Virginia, USA", "us-west-1": "California, USA",
           "us-south-1": "Texas, USA"}


def err(status: int, code: str, message: str, suggestion: str | None = None) -> Answer:
    body: dict[str, Any] = {"code": code, "message": message}
    if suggestion:
        body["suggestion"] = suggestion
    return status, {"error": body}


CAPACITY = err(400, "instance-operations/launch/insufficient-capacity",
               "Not enough capacity to fulfill launch request.",
               "Choose an instance type with more availability, or try again later.")
QUOTA = err(400, "global/quota-exceeded", "Quota exceeded.",
            "Contact Support to increase your quota.")
BAD_KEY = err(401, "global/invalid-api-key", "API key was invalid, expired, or deleted.",
              "Check your API key or create a new one, then try again.")


class LambdaFake(RestFake):
    def __init__(self, subnet: str) -> None:
        super().__init__(subnet, RANGE)
        self.instances: dict[str, dict[str, Any]] = {}
        self.ssh_keys: list[dict[str, Any]] = []
        self.firewall: list[dict[str, Any]] = [
            {"protocol": "tcp", "port_range": [22, 22], "source_network": "0.0.0.0/0",
             "description": "Allow SSH"}]
        self.no_capacity: set[tuple[str, str]] = set()  # (type, region) not listed as available
        self.boot_polls = 1
        self._polls: dict[str, int] = {}
        self._public = itertools.count(2)

    def unauthorized(self) -> Answer:
        return BAD_KEY

    def too_many(self) -> Any:
        return {"error": {"code": "global/too-many-requests", "message": "Too many requests"}}

    def route_name(self, method: str, path: str) -> str:
        rest = path.removeprefix("/api/v1/").strip("/")
        if rest.startswith("instances/"):
            return "instance"
        return {"instance-operations/launch": "launch",
                "instance-operations/terminate": "terminate"}.get(rest, rest) + (
            "" if method == "GET" or rest.startswith("instance-operations") else f" {method}")

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Answer:
        name = self.route_name(method, path)
        if name == "instance-types":
            return 200, {"data": {t: self._type_entry(t) for t in TYPES}}
        if name == "instances":
            return 200, {"data": self._listing()}
        if name == "instance":
            iid = path.rstrip("/").rsplit("/", 1)[1]
            if iid not in self.instances:
                return err(404, "global/object-does-not-exist", "Specified instance does not exist.")
            return 200, {"data": self.instances[iid]}
        if name == "ssh-keys":
            return 200, {"data": self.ssh_keys}
        if name == "firewall-rules":
            return 200, {"data": self.firewall}
        if name == "firewall-rules PUT":
            rules = (body or {}).get("data")
            if not isinstance(rules, list) or not all(
                    r.get("protocol") in ("tcp", "udp", "icmp", "all") and r.get("source_network")
                    for r in rules):
                return err(400, "global/invalid-parameters", "Invalid firewall rules.")
            self.firewall = rules
            return 200, {"data": rules}
        if name == "ssh-keys POST":
            if any(k["name"] == body.get("name") for k in self.ssh_keys):
                return err(400, "global/invalid-parameters", "SSH key name already in use.")
            key = {"id": uuid.uuid4().hex, "name": body["name"], "public_key": body["public_key"]}
            self.ssh_keys.append(key)
            return 200, {"data": key}
        if name.startswith("ssh-keys/") and name.endswith(" DELETE"):
            kid = name.split("/", 1)[1].split()[0]
            if not any(k["id"] == kid for k in self.ssh_keys):
                return err(404, "global/object-does-not-exist", "SSH key does not exist.")
            self.ssh_keys = [k for k in self.ssh_keys if k["id"] != kid]
            return 200, {"data": {}}
        if name == "launch":
            return self._launch(body or {})
        if name == "terminate":
            return self._terminate(body or {})
        return err(404, "global/object-does-not-exist", f"No route {method} {path}")

    def _type_entry(self, t: str) -> dict[str, Any]:
        spec = TYPES[t]
        return {"instance_type": {"name": t, "description": spec["description"],
                                  "gpu_description": spec["gpu_description"],
                                  "price_cents_per_hour": spec["price"], "specs": spec["specs"]},
                "regions_with_capacity_available": [
                    {"name": r, "description": d} for r, d in REGIONS.items()
                    if (t, r) not in self.no_capacity]}

    def _launch(self, body: dict[str, Any]) -> Answer:
        t, region = body.get("instance_type_name"), body.get("region_name")
        keys = body.get("ssh_key_names") or []
        if t not in TYPES or region not in REGIONS or len(keys) != 1 or body.get("quantity", 1) != 1:
            return err(400, "global/invalid-parameters", f"Invalid launch request {body!r}")
        if not any(k["name"] == keys[0] for k in self.ssh_keys):
            return err(400, "global/invalid-parameters", f"SSH key {keys[0]} does not exist")
        if (t, region) in self.no_capacity:
            return CAPACITY
        iid = uuid.uuid4().hex
        taken = {str(i["private_ip"]) for i in self.instances.values()}
        private = self.free_ip(taken)
        spec = self._type_entry(str(t))["instance_type"]
        self.instances[iid] = {
            "id": iid, "name": body.get("name"), "ip": f"198.51.100.{next(self._public) % 250}",
            "private_ip": private, "status": "booting", "ssh_key_names": keys,
            "file_system_names": [], "region": {"name": region, "description": REGIONS[region]},
            "instance_type": spec, "hostname": f"{private.replace('.', '-')}.cloud.lambdalabs.com",
            "jupyter_token": "x", "jupyter_url": "https://jupyter.invalid", "is_reserved": False}
        self._polls[iid] = 0
        return 200, {"data": {"instance_ids": [iid]}}

    def _terminate(self, body: dict[str, Any]) -> Answer:
        ids = body.get("instance_ids") or []
        missing = [i for i in ids if i not in self.instances]
        if missing:
            return err(404, "global/object-does-not-exist", f"Instances {missing} do not exist.")
        for i in ids:
            self.instances[i]["status"] = "terminating"
        self.deleted(list(ids))
        return 200, {"data": {"terminated_instances": [self.instances[i] for i in ids]}}

    def _listing(self) -> list[dict[str, Any]]:
        for iid, inst in list(self.instances.items()):
            if inst["status"] == "terminating":
                if self._polls.get(iid, 0) < 0:
                    del self.instances[iid]
                    continue
                self._polls[iid] = -1
            elif inst["status"] == "booting":
                self._polls[iid] += 1
                if self._polls[iid] > self.boot_polls:
                    inst["status"] = "active"
        return [dict(i) for i in self.instances.values()]

    # ---- what tests ask ----
    def live(self) -> list[dict[str, Any]]:
        with self.lock:
            return [i for i in self.instances.values() if i["status"] in ("booting", "active")]

    def list_instances(self) -> list[tuple[str, str | None, str | None]]:
        with self.lock:
            keys = {k["name"]: k["public_key"] for k in self.ssh_keys}
            return [(i["id"], i["private_ip"], keys.get(i["ssh_key_names"][0]))
                    for i in self.live()]

    def reset(self) -> None:
        with self.lock:
            self.instances.clear()
            self.ssh_keys.clear()
            self.firewall = self.firewall[:1]
            self.no_capacity.clear()
            self.faults.clear()
            self.calls.clear()
            self.on_delete.clear()
            self.boot_polls = 1


_server: list[LambdaFake] = []


@pytest.fixture
def lambda_fake(launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaFake]:
    """The fake (one per session, reset per test), LAMBDA_API_KEY and `lambda:` config
    pointing at it (`use_internal_ips: true`, `ssh_user: root`)."""
    with configured_fake(
            _server, lambda: LambdaFake("10.123.255.0/24"), launcher_home, monkeypatch,
            "LAMBDA", "lambda", lambda fake: {"api_endpoint": f"{fake.endpoint}/api/v1",
                                              "use_internal_ips": True, "ssh_user": "root"},
    ) as fake:
        yield fake


@pytest.fixture
def lambda_cloud(request: pytest.FixtureRequest, lambda_fake: LambdaFake) -> Iterator[LambdaFake]:
    """`lambda_fake` with private IPs inside the lab and an sshd body per live instance."""
    with fake_with_bodies(request, lambda_fake, RANGE, "lambda", "Lambda",
                          gpu_image=_gpu_image) as fake:
        yield fake


def _gpu_image(workdir: Path) -> dict[str, str]:
    """The bodies' image: 1 x A10 machines (fake nvidia-smi, tests/fakes) for the health gate."""
    from tests.fakes import gpu_image

    config_dir = Path(workdir) / "gpu-image-lambda"
    config_dir.mkdir(exist_ok=True)
    return gpu_image(config_dir, count=1, name="NVIDIA A10")
