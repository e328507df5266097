"""A local Compute Engine v1 REST fake (stdlib `ThreadingHTTPServer` on 127.0.0.1 or
the netns lab's gateway), speaking the wire format google-cloud-compute's REST
transport sends and parses (camelCase JSON, `/compute/v1/projects/...` paths):

- instances: insert (with `requestId` idempotency: the same id returns the first
  operation), get, list and aggregatedList (with `filter` on `labels.KEY = "V"`,
  `labels.KEY:*`, `status = X`; `maxResults`/`pageToken` paging), delete, stop, start;
- zoneOperations / regionOperations / globalOperations: get, wait, list (filter on
  `operationType`); numeric ids, names `operation-<ms>-<hex>`; a mutating call takes
  effect at once (an inserted instance exists, PROVISIONING) and returns a RUNNING
  operation that is DONE at the first get/wait (the instance RUNNING then; a get of
  the instance also moves it PROVISIONING -> STAGING -> RUNNING);
  failures inside the operation are `error.errors[]` with `code`/`message` and
  `httpErrorStatusCode`, as GCP reports ZONE_RESOURCE_POOL_EXHAUSTED;
- firewalls (get/list/insert/delete), resourcePolicies (get/insert/delete), images
  getFromFamily, machineTypes get (a small table; other types 404), `/token` (an
  OAuth token endpoint for ADC files whose `token_uri` points here);
- recorded pages a test sets in `recorded` (Cloud Billing Catalog SKUs,
  machineTypes/acceleratorTypes aggregatedList), served by `pageToken` ("p1", "p2"...).
HTTP errors are `{"error": {"code", "message", "errors": [{"reason", "message",
"domain"}]}}`.

Private IPs (`networkInterfaces[0].networkIP`, and the `natIP` too) come from one /28
per zone inside the lab's /24 (`ZONE_OFFSETS`); nothing outside it is ever handed out.
Tests steer it with `exhaust(zone)`, `fail_call(n, fault)` (the n-th API call from now
fails), `preempt(names)` (body killed, instance deleted, a
`compute.instances.preempted` operation recorded), and read `calls`, `leaks()`.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

GOOGLE = "https://www.googleapis.com/compute/v1"
PROJECT = "launcher-test"
# zone -> offset of its /28 inside the lab's /24 (same ranges the AWS fixture reserves)
ZONE_OFFSETS = {
    "us-central1-a": 64, "us-central1-b": 80, "us-central1-c": 96, "us-central1-f": 112,
    "us-east1-b": 128, "us-east1-c": 144, "us-east1-d": 160,
    "us-west1-a": 176, "us-west1-b": 192,
}
MACHINE_TYPES: dict[str, tuple[int, int, list[tuple[str, int]]]] = {
    "n2-standard-2": (2, 8192, []), "n2-standard-4": (4, 16384, []),
    "e2-standard-2": (2, 8192, []), "n1-standard-4": (4, 15360, []),
    "n1-standard-8": (8, 30720, []), "a2-highgpu-1g": (12, 87040, [("nvidia-tesla-a100", 1)]),
    "a2-highgpu-8g": (96, 696320, [("nvidia-tesla-a100", 8)]),
    "a3-highgpu-8g": (208, 1916928, [("nvidia-h100-80gb", 8)]),
}


@dataclass
class Fault:
    """An injected failure: an HTTP error of the call (`http` > 0), or, for a mutating
    call, an error inside its operation (`in_operation`)."""

    http: int = 503
    reason: str = "backendError"
    message: str = "injected fault"
    in_operation: bool = False


@dataclass
class Call:
    method: str
    kind: str  # e.g. "instances.insert", "zoneOperations.wait"
    path: str


@dataclass
class FakeState:
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: dict[str, Any] = field(default_factory=dict)  # op name -> effect
    firewalls: dict[str, dict[str, Any]] = field(default_factory=dict)
    policies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    request_ids: dict[str, str] = field(default_factory=dict)  # requestId -> op name


class GCPFake:
    """The fake's state and behaviour; `serve()` starts the HTTP server."""

    def __init__(self, lab_subnet: str, host: str = "127.0.0.1") -> None:
        self.net = ipaddress.ip_network(lab_subnet)
        self.host = host
        self.state = FakeState()
        self.lock = threading.RLock()
        self.calls: list[Call] = []
        self.faults: dict[int, Fault] = {}  # call index -> fault
        self.exhausted: dict[str, str] = {}  # zone -> error code of inserts there
        self.quota: dict[str, str] = {}  # region -> quota message of inserts there
        self.unoffered: set[tuple[str, str]] = set()  # (zone, machine type)
        self.holds: dict[int, threading.Event] = {}  # call index -> released when set
        self.held = threading.Event()  # a held call has arrived
        self.recorded: dict[str, list[Any]] = {}  # "skus" / "machineTypes" / ... -> pages
        self.on_delete: list[Any] = []  # callbacks([instance id]) when an instance goes
        self._ids = itertools.count(int(time.time()) * 1000 + 1)
        self.server: ThreadingHTTPServer | None = None
        self.endpoint = ""

    # ---- life ---------------------------------------------------------------------

    def serve(self) -> GCPFake:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _do(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, body = fake.handle(method, self.path, raw)
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the caller was killed
                    self.close_connection = True

            def do_GET(self) -> None:
                self._do("GET")

            def do_POST(self) -> None:
                self._do("POST")

            def do_DELETE(self) -> None:
                self._do("DELETE")

        self.server = ThreadingHTTPServer((self.host, 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://{self.host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def reset(self) -> None:
        with self.lock:
            self.state = FakeState()
            self.calls.clear()
            self.faults.clear()
            self.exhausted.clear()
            self.quota.clear()
            self.unoffered.clear()
            self.recorded.clear()
            for event in self.holds.values():
                event.set()
            self.holds.clear()
            self.held.clear()

    # ---- test controls ---------------------------------------------------------------

    def fail_call(self, index: int, fault: Fault) -> None:
        """The call numbered `index` (0 = the next call) fails with `fault`."""
        with self.lock:
            self.faults[len(self.calls) + index] = fault

    def hold_call(self, index: int) -> threading.Event:
        """The call numbered `index` (0 = the next) waits, before it is served, until the
        returned event is set; `held` is set when it arrives."""
        event = threading.Event()
        with self.lock:
            self.holds[len(self.calls) + index] = event
            self.held.clear()
        return event

    def exhaust(self, zone: str, code: str = "ZONE_RESOURCE_POOL_EXHAUSTED") -> None:
        self.exhausted[zone] = code

    def live(self) -> list[dict[str, Any]]:
        """Instances that exist (any status), as the API shows them."""
        with self.lock:
            return [dict(i) for i in self.state.instances.values()]

    def list_instances(self) -> list[tuple[str, str | None, str | None]]:
        """For tests/cloud_bodies.py: RUNNING/STAGING/PROVISIONING instances as
        (numeric id, networkIP, the `ssh-keys` metadata key). Ids, not names: a later
        gang in another zone may reuse a name."""
        out = []
        for inst in self.live():
            if inst["status"] not in ("PROVISIONING", "STAGING", "RUNNING"):
                continue
            key = None
            for item in inst.get("metadata", {}).get("items", []):
                if item.get("key") == "ssh-keys":
                    key = item["value"].split("\n")[0].split(":", 1)[1]
            out.append((inst["id"], inst["networkInterfaces"][0]["networkIP"], key))
        return out

    def preempt(self, names: list[str]) -> None:
        """Spot preemption as GCE does it with instanceTerminationAction DELETE: the VM
        is gone, and the zone has a DONE `compute.instances.preempted` operation."""
        gone = []
        with self.lock:
            for (zone, name), inst in list(self.state.instances.items()):
                if name in names:
                    gone.append(inst["id"])
                    for cb in self.on_delete:  # the body dies first: no notice
                        cb([inst["id"]])
                    del self.state.instances[(zone, name)]
                    self._op("compute.instances.preempted", inst["selfLink"], zone=zone,
                             done=True, user="system")

    def leaks(self) -> dict[str, list[str]]:
        """What a torn-down cluster must not leave: instances, placement policies,
        per-cluster firewall rules (`-ports`)."""
        with self.lock:
            return {
                "instances": sorted(n for _, n in self.state.instances),
                "policies": sorted(n for _, n in self.state.policies),
                "firewalls": sorted(n for n in self.state.firewalls if n.endswith("-ports")),
            }

    # ---- the API -----------------------------------------------------------------------

    def handle(self, method: str, raw_path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        url = urlparse(raw_path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        path = unquote(url.path)
        if path == "/token":
            return 200, {"access_token": "fake-token", "expires_in": 3600, "token_type": "Bearer"}
        if path.startswith("/v1/services/") and path.endswith("/skus"):
            with self.lock:
                self.calls.append(Call(method, "billing.skus", path))
            return self._paged(self.recorded.get("skus", []), query)
        body = json.loads(raw) if raw else {}
        m = re.match(r"/compute/v1/projects/([^/]+)/(.*)$", path)
        if not m:
            return self._error(404, "notFound", f"no such path {path}")
        project, rest = m.groups()
        kind, args = _route(method, rest)
        with self.lock:
            index = len(self.calls)
            self.calls.append(Call(method, kind, path))
            fault = self.faults.pop(index, None)
            hold = self.holds.get(index)
        if hold is not None:  # the caller may be killed meanwhile; GCE carries on anyway
            self.held.set()
            hold.wait(timeout=60)
        if kind == "unknown":
            return self._error(404, "notFound", f"The resource '{path}' was not found")
        if fault is not None and not fault.in_operation:
            return self._error(fault.http, fault.reason, fault.message)
        with self.lock:
            return getattr(self, "_" + kind.replace(".", "_"))(project, query, body, fault, *args)

    # instances

    def _instances_insert(self, project: str, q: dict[str, str], body: dict[str, Any],
                          fault: Fault | None, zone: str) -> tuple[int, dict[str, Any]]:
        rid = q.get("requestId")
        if rid and rid in self.state.request_ids:
            return 200, self.state.operations[self.state.request_ids[rid]]
        name = body.get("name", "")
        target = f"{GOOGLE}/projects/{project}/zones/{zone}/instances/{name}"
        mt = body.get("machineType", "").rsplit("/", 1)[-1]
        if (zone, name) in self.state.instances:
            return self._error(409, "alreadyExists", f"The resource '{target}' already exists")
        if mt not in MACHINE_TYPES:
            return self._error(400, "invalid", f"Invalid value for field 'resource.machineType'"
                                               f": '{mt}'.")
        region = zone.rsplit("-", 1)[0]
        error = None
        if fault is not None:
            error = (fault.http, fault.reason, fault.message)
        elif zone in self.exhausted:
            error = (503, self.exhausted[zone], f"The zone '{zone}' does not have enough "
                     "resources available to fulfill the request.")
        elif region in self.quota:
            return self._error(403, "quotaExceeded", self.quota[region])
        op = self._op("insert", target, zone=zone, error=error)
        if rid:
            self.state.request_ids[rid] = op["name"]
        if error is None:  # GCE creates it whether or not anyone waits on the operation
            self._create(zone, project, body)
            self.state.pending[op["name"]] = ("status", zone, name, "RUNNING")
        return 200, op

    def _create(self, zone: str, project: str, body: dict[str, Any]) -> None:
        name = body["name"]
        ip = self._allocate(zone)
        nic = dict((body.get("networkInterfaces") or [{}])[0])
        nic.update(name="nic0", networkIP=ip)
        if nic.get("accessConfigs"):
            nic["accessConfigs"] = [dict(nic["accessConfigs"][0], natIP=ip)]
        inst = dict(body)
        inst.update(
            kind="compute#instance", id=str(next(self._ids)), status="PROVISIONING",
            zone=f"{GOOGLE}/projects/{project}/zones/{zone}",
            machineType=f"{GOOGLE}/projects/{project}/zones/{zone}/machineTypes/"
                        + body["machineType"].rsplit("/", 1)[-1],
            selfLink=f"{GOOGLE}/projects/{project}/zones/{zone}/instances/{name}",
            networkInterfaces=[nic], creationTimestamp="2026-01-01T00:00:00.000-07:00")
        self.state.instances[(zone, name)] = inst

    def _allocate(self, zone: str) -> str:
        base = self.net.network_address + ZONE_OFFSETS[zone]
        used = {i["networkInterfaces"][0]["networkIP"] for i in self.state.instances.values()}
        for k in range(2, 14):  # GCE keeps .0/.1 and the last two of a subnet
            ip = str(base + k)
            if ip not in used:
                assert ipaddress.ip_address(ip) in self.net
                return ip
        raise RuntimeError(f"no free address in {zone}")

    def _instances_get(self, project: str, q: dict[str, str], body: dict[str, Any],
                       fault: Fault | None, zone: str, name: str) -> tuple[int, dict[str, Any]]:
        inst = self.state.instances.get((zone, name))
        if inst is None:
            return self._error(404, "notFound", f"The resource 'projects/{project}/zones/"
                                                f"{zone}/instances/{name}' was not found")
        # booting goes on whether or not anyone waits on the operation
        inst["status"] = {"PROVISIONING": "STAGING", "STAGING": "RUNNING"}.get(
            inst["status"], inst["status"])
        return 200, inst

    def _instances_list(self, project: str, q: dict[str, str], body: dict[str, Any],
                        fault: Fault | None, zone: str) -> tuple[int, dict[str, Any]]:
        items = [i for (z, _), i in sorted(self.state.instances.items())
                 if z == zone and _matches(i, q.get("filter", ""))]
        page, token = _page(items, q)
        out: dict[str, Any] = {"kind": "compute#instanceList", "items": page}
        if token:
            out["nextPageToken"] = token
        return 200, out

    def _instances_aggregated(self, project: str, q: dict[str, str], body: dict[str, Any],
                              fault: Fault | None) -> tuple[int, dict[str, Any]]:
        items: dict[str, Any] = {}
        for (zone, _), inst in sorted(self.state.instances.items()):
            if _matches(inst, q.get("filter", "")):
                items.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(inst)
        for zone in ZONE_OFFSETS:
            items.setdefault(f"zones/{zone}", {"warning": {
                "code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope "
                f"'zones/{zone}' on this page."}})
        return 200, {"kind": "compute#instanceAggregatedList", "items": items}

    def _instances_delete(self, project: str, q: dict[str, str], body: dict[str, Any],
                          fault: Fault | None, zone: str, name: str) -> tuple[int, dict[str, Any]]:
        status, got = self._instances_get(project, q, body, fault, zone, name)
        if status != 200:
            return status, got
        op = self._op("delete", got["selfLink"], zone=zone, error=_op_error(fault))
        if fault is None:
            self._apply(("delete", zone, name))
        return 200, op

    def _instances_stop(self, project: str, q: dict[str, str], body: dict[str, Any],
                        fault: Fault | None, zone: str, name: str) -> tuple[int, dict[str, Any]]:
        status, got = self._instances_get(project, q, body, fault, zone, name)
        if status != 200:
            return status, got
        op = self._op("stop", got["selfLink"], zone=zone, error=_op_error(fault))
        if fault is None:
            got["status"] = "TERMINATED"
        return 200, op

    def _instances_start(self, project: str, q: dict[str, str], body: dict[str, Any],
                         fault: Fault | None, zone: str, name: str) -> tuple[int, dict[str, Any]]:
        status, got = self._instances_get(project, q, body, fault, zone, name)
        if status != 200:
            return status, got
        op = self._op("start", got["selfLink"], zone=zone, error=_op_error(fault))
        if fault is None:
            got["status"] = "STAGING"
            self.state.pending[op["name"]] = ("status", zone, name, "RUNNING")
        return 200, op

    # operations

    def _op(self, op_type: str, target: str, *, zone: str | None = None,
            region: str | None = None, error: tuple[int, str, str] | None = None,
            done: bool = False, user: str = "launcher@example.com") -> dict[str, Any]:
        op_id = next(self._ids)
        name = f"operation-{op_id}-{op_id % 0xFFFFFF:06x}"
        scope = (f"zones/{zone}" if zone else f"regions/{region}" if region else "global")
        project = target.split("/projects/")[1].split("/")[0]
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": str(op_id), "name": name,
            "operationType": op_type, "targetLink": target, "targetId": str(op_id + 7),
            "status": "DONE" if done else "RUNNING", "user": user,
            "progress": 100 if done else 0, "insertTime": "2026-01-01T00:00:00.000-07:00",
            "selfLink": f"{GOOGLE}/projects/{project}/{scope}/operations/{name}",
        }
        if zone:
            op["zone"] = f"{GOOGLE}/projects/{project}/zones/{zone}"
        if region:
            op["region"] = f"{GOOGLE}/projects/{project}/regions/{region}"
        if error is not None:
            op["pending_error"] = error
        self.state.operations[name] = op
        return dict((k, v) for k, v in op.items() if k != "pending_error")

    def _finish(self, name: str) -> dict[str, Any]:
        op = self.state.operations[name]
        if op["status"] != "DONE":
            op.update(status="DONE", progress=100, endTime="2026-01-01T00:00:01.000-07:00")
            err = op.pop("pending_error", None)
            if err is not None:
                code, reason, message = err
                op["error"] = {"errors": [{"code": reason, "message": message}]}
                op["httpErrorStatusCode"] = code
                op["httpErrorMessage"] = "SERVICE UNAVAILABLE" if code == 503 else "ERROR"
            effect = self.state.pending.pop(name, None)
            if effect is not None:
                self._apply(effect)
        return op

    def _apply(self, effect: tuple[Any, ...]) -> None:
        if effect[0] == "delete":
            gone = self.state.instances.pop((effect[1], effect[2]), None)
            if gone is not None:
                for cb in self.on_delete:
                    cb([gone["id"]])
        elif effect[0] == "status":
            inst = self.state.instances.get((effect[1], effect[2]))
            if inst is not None:
                inst["status"] = effect[3]
        elif effect[0] == "policy":
            self.state.policies[(effect[1], effect[2]["name"])] = effect[2]
        elif effect[0] == "policy-delete":
            self.state.policies.pop((effect[1], effect[2]), None)
        elif effect[0] == "firewall":
            self.state.firewalls[effect[1]["name"]] = effect[1]
        elif effect[0] == "firewall-delete":
            self.state.firewalls.pop(effect[1], None)

    def _operations_get(self, project: str, q: dict[str, str], body: dict[str, Any],
                        fault: Fault | None, name: str) -> tuple[int, dict[str, Any]]:
        if name not in self.state.operations:
            return self._error(404, "notFound", f"operation {name} not found")
        return 200, self._finish(name)

    _operations_wait = _operations_get

    def _operations_list(self, project: str, q: dict[str, str], body: dict[str, Any],
                         fault: Fault | None, zone: str) -> tuple[int, dict[str, Any]]:
        items = [op for op in self.state.operations.values()
                 if op.get("zone", "").endswith(f"/zones/{zone}")
                 and _matches(op, q.get("filter", ""))]
        return 200, {"kind": "compute#operationList",
                     "items": [{k: v for k, v in o.items() if k != "pending_error"}
                               for o in items]}

    # firewalls, policies, images, machine types

    def _firewalls_get(self, project: str, q: dict[str, str], body: dict[str, Any],
                       fault: Fault | None, name: str) -> tuple[int, dict[str, Any]]:
        if name not in self.state.firewalls:
            return self._error(404, "notFound", f"firewall {name} not found")
        return 200, self.state.firewalls[name]

    def _firewalls_list(self, project: str, q: dict[str, str], body: dict[str, Any],
                        fault: Fault | None) -> tuple[int, dict[str, Any]]:
        items = [f for _, f in sorted(self.state.firewalls.items())
                 if _matches(f, q.get("filter", ""))]
        page, token = _page(items, q)
        out: dict[str, Any] = {"kind": "compute#firewallList", "items": page}
        if token:
            out["nextPageToken"] = token
        return 200, out

    def _firewalls_insert(self, project: str, q: dict[str, str], body: dict[str, Any],
                          fault: Fault | None) -> tuple[int, dict[str, Any]]:
        if body["name"] in self.state.firewalls:
            return self._error(409, "alreadyExists", f"firewall {body['name']} already exists")
        op = self._op("insert", f"{GOOGLE}/projects/{project}/global/firewalls/{body['name']}",
                      error=_op_error(fault))
        if fault is None:
            self._apply(("firewall", dict(body, kind="compute#firewall")))
        return 200, op

    def _firewalls_delete(self, project: str, q: dict[str, str], body: dict[str, Any],
                          fault: Fault | None, name: str) -> tuple[int, dict[str, Any]]:
        if name not in self.state.firewalls:
            return self._error(404, "notFound", f"firewall {name} not found")
        op = self._op("delete", f"{GOOGLE}/projects/{project}/global/firewalls/{name}",
                      error=_op_error(fault))
        if fault is None:
            self._apply(("firewall-delete", name))
        return 200, op

    def _policies_insert(self, project: str, q: dict[str, str], body: dict[str, Any],
                         fault: Fault | None, region: str) -> tuple[int, dict[str, Any]]:
        if (region, body["name"]) in self.state.policies:
            return self._error(409, "alreadyExists", f"policy {body['name']} already exists")
        target = f"{GOOGLE}/projects/{project}/regions/{region}/resourcePolicies/{body['name']}"
        op = self._op("insert", target, region=region, error=_op_error(fault))
        if fault is None:
            self._apply(("policy", region, dict(body, selfLink=target)))
        return 200, op

    def _policies_delete(self, project: str, q: dict[str, str], body: dict[str, Any],
                         fault: Fault | None, region: str, name: str) -> tuple[int, dict[str, Any]]:
        if (region, name) not in self.state.policies:
            return self._error(404, "notFound", f"policy {name} not found")
        if any(name in "".join(i.get("resourcePolicies", [])) for i in self.state.instances.values()):
            return self._error(400, "resourceInUseByAnotherResource", f"policy {name} is in use")
        op = self._op("delete", f"{GOOGLE}/projects/{project}/regions/{region}/resourcePolicies/"
                      f"{name}", region=region, error=_op_error(fault))
        if fault is None:
            self._apply(("policy-delete", region, name))
        return 200, op

    def _images_family(self, project: str, q: dict[str, str], body: dict[str, Any],
                       fault: Fault | None, family: str) -> tuple[int, dict[str, Any]]:
        name = f"{family}-v20260101"
        return 200, {"kind": "compute#image", "id": "5550001", "name": name, "family": family,
                     "status": "READY",
                     "selfLink": f"{GOOGLE}/projects/{project}/global/images/{name}"}

    def _machine_types_get(self, project: str, q: dict[str, str], body: dict[str, Any],
                           fault: Fault | None, zone: str, mt: str) -> tuple[int, dict[str, Any]]:
        if mt not in MACHINE_TYPES or (zone, mt) in self.unoffered:
            return self._error(404, "notFound", f"The resource 'projects/{project}/zones/{zone}"
                                                f"/machineTypes/{mt}' was not found")
        cpus, mem, accs = MACHINE_TYPES[mt]
        out: dict[str, Any] = {"kind": "compute#machineType", "id": "801016", "name": mt,
                               "guestCpus": cpus, "memoryMb": mem, "zone": zone}
        if accs:
            out["accelerators"] = [{"guestAcceleratorType": a, "guestAcceleratorCount": c}
                                   for a, c in accs]
        return 200, out

    def _recorded_aggregated(self, project: str, q: dict[str, str], body: dict[str, Any],
                             fault: Fault | None, what: str) -> tuple[int, dict[str, Any]]:
        return self._paged(self.recorded.get(what, []), q)

    def _paged(self, pages: list[dict[str, Any]], q: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """Recorded pages, in order: page N answers pageToken "pN" (page 0: none); a page
        that is an int is that HTTP error."""
        index = int(q.get("pageToken", "p0")[1:] or 0)
        page = pages[index] if index < len(pages) else {}
        if isinstance(page, int):
            return self._error(page, "backendError", "recorded failure")
        return 200, page

    @staticmethod
    def _error(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
        return code, {"error": {"code": code, "message": message,
                                "errors": [{"message": message, "domain": "global",
                                            "reason": reason}]}}


def _op_error(fault: Fault | None) -> tuple[int, str, str] | None:
    return (fault.http, fault.reason, fault.message) if fault is not None else None


_ROUTES: list[tuple[str, str, str]] = [
    ("POST", r"zones/([^/]+)/instances", "instances.insert"),
    ("GET", r"zones/([^/]+)/instances", "instances.list"),
    ("GET", r"zones/([^/]+)/instances/([^/]+)", "instances.get"),
    ("DELETE", r"zones/([^/]+)/instances/([^/]+)", "instances.delete"),
    ("POST", r"zones/([^/]+)/instances/([^/]+)/stop", "instances.stop"),
    ("POST", r"zones/([^/]+)/instances/([^/]+)/start", "instances.start"),
    ("GET", r"aggregated/instances", "instances.aggregated"),
    ("GET", r"aggregated/(machineTypes|acceleratorTypes)", "recorded.aggregated"),
    ("GET", r"zones/[^/]+/operations/([^/]+)", "operations.get"),
    ("POST", r"zones/[^/]+/operations/([^/]+)/wait", "operations.wait"),
    ("GET", r"zones/([^/]+)/operations", "operations.list"),
    ("GET", r"regions/[^/]+/operations/([^/]+)", "operations.get"),
    ("POST", r"regions/[^/]+/operations/([^/]+)/wait", "operations.wait"),
    ("GET", r"global/operations/([^/]+)", "operations.get"),
    ("POST", r"global/operations/([^/]+)/wait", "operations.wait"),
    ("GET", r"global/firewalls/([^/]+)", "firewalls.get"),
    ("GET", r"global/firewalls", "firewalls.list"),
    ("POST", r"global/firewalls", "firewalls.insert"),
    ("DELETE", r"global/firewalls/([^/]+)", "firewalls.delete"),
    ("POST", r"regions/([^/]+)/resourcePolicies", "policies.insert"),
    ("DELETE", r"regions/([^/]+)/resourcePolicies/([^/]+)", "policies.delete"),
    ("GET", r"global/images/family/([^/]+)", "images.family"),
    ("GET", r"zones/([^/]+)/machineTypes/([^/]+)", "machine_types.get"),
]


def _route(method: str, rest: str) -> tuple[str, tuple[str, ...]]:
    for m, pattern, kind in _ROUTES:
        hit = re.fullmatch(pattern, rest)
        if m == method and hit:
            return kind, hit.groups()
    return "unknown", ()


_TERM = re.compile(r'\(?\s*([\w.-]+)\s*(=|!=|:|eq|ne)\s*"?([^")]*)"?\s*\)?')


def _field(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def _matches(obj: dict[str, Any], filter_: str) -> bool:
    """Compute's list filter, the subset launcher sends: terms ANDed (`a = "x"`,
    `labels.k:*`, `a != "x"`)."""
    for term in re.split(r"\s+AND\s+", filter_.strip()) if filter_.strip() else []:
        m = _TERM.fullmatch(term.strip())
        if not m:
            raise ValueError(f"fake cannot parse filter term {term!r}")
        path, op, value = m.groups()
        got = _field(obj, path)
        if op == ":" and value == "*":
            ok = got is not None
        elif op in ("=", "eq", ":"):
            ok = got is not None and str(got) == value
        else:
            ok = got is None or str(got) != value
        if not ok:
            return False
    return True


def _page(items: list[Any], q: dict[str, str]) -> tuple[list[Any], str | None]:
    size = int(q.get("maxResults") or 500)
    start = int(q.get("pageToken") or 0)
    nxt = start + size
    return items[start:nxt], (str(nxt) if nxt < len(items) else None)
