"""A local RunPod GraphQL API: a stdlib HTTP server answering the operations launcher's
RunPod provisioner sends, in RunPod's wire format, plus the pytest fixtures.

`POST /graphql` with `{"query", "variables"}`; the root field is read from the query
text: `podFindAndDeployOnDemand` / `podRentInterruptable` (input: name, imageName,
gpuTypeId, gpuCount, cloudType SECURE|COMMUNITY|ALL, dataCenterId, ports, env [{key,
value}] incl. PUBLIC_KEY, bidPerGpu for spot) -> a Pod; `pod(input: {podId})` -> Pod or
null; `myself { pods }`, `myself { id email }`; `podTerminate` -> null (an unknown pod:
the "pod not found" error); `podStop`; `gpuTypes(input: {id}) { lowestPrice }`.
A Pod is `{id, name, desiredStatus, costPerHr, gpuCount, imageName, lastStatusChange,
dataCenterId, machine {podHostId gpuDisplayName}, runtime: null | {uptimeInSeconds,
ports: [{ip, isIpPublic, privatePort, publicPort, type}]}}`; a pod's runtime appears
`start_polls` reads after its creation. Its IP comes from the lab's `LAB_RANGE` (/28),
its SSH port 22 is published as 10000+n. Errors are RunPod's: HTTP 200 with
`{"errors": [{"message", "path", "extensions": {"code"}}], "data": null}`; a missing or
wrong key: HTTP 401 `{"errors": [{"message": "Unauthorized"}]}`; `fake.rate_limit(op)`:
HTTP 429 with Retry-After.

Faults: `fake.hold_answers.clear()` applies deploys but holds their answers
(a client killed meanwhile); `fake.fail(op, message, times=1)` answers the next `times` calls of root field
`op` with that error; `fake.capacity[dc] = 0` makes deploys in data center `dc` fail with
RunPod's capacity message. `fake.interrupt(pod_id)`: what RunPod does to an outbid
interruptible pod (desiredStatus EXITED, runtime gone, the body dies).
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

KEY = "rp-test-key-0123456789"
EMAIL = "tester@example.com"
LAB_RANGE = ".240/28"  # RunPod bodies' addresses inside the netns lab's /24
NO_CAPACITY = ("There are no longer any instances available with the requested "
               "specifications. Please refresh and try again.")
GPU_TYPES = {"NVIDIA A100 80GB PCIe": 1.39, "NVIDIA H100 80GB HBM3": 2.69,
             "NVIDIA H100 PCIe": 2.39, "NVIDIA A100-SXM4-80GB": 1.49}
OPS = ("podFindAndDeployOnDemand", "podRentInterruptable", "podTerminate", "podStop",
       "gpuTypes", "pods", "myself", "pod")


def lab_range(subnet: str) -> ipaddress.IPv4Network:
    net = ipaddress.ip_network(subnet)
    off, bits = LAB_RANGE[1:].split("/")
    return ipaddress.ip_network(f"{net.network_address + int(off)}/{bits}")  # type: ignore[return-value]


class RunPodFake:
    """See the module docstring. `pods` is the live state (id -> record)."""

    def __init__(self, subnet: str, *, start_polls: int = 1) -> None:
        self.hosts = [str(h) for h in lab_range(subnet).hosts()]
        self.start_polls = start_polls
        self.pods: dict[str, dict[str, Any]] = {}
        self.capacity: dict[str, int] = {}
        self.calls: list[str] = []  # root field of every request, in order
        self.spot_available = True
        self.hold_answers = threading.Event()  # cleared: deploy answers wait (applied)
        self.hold_answers.set()
        self.gpu_types_listing: list[dict[str, Any]] = []  # `gpuTypes { ... }` with no id
        self._faults: dict[str, list[tuple[str, int]]] = {}
        self._ports = itertools.count(10001)
        self._lock = threading.RLock()
        self.bodies: Any = None
        self._server: ThreadingHTTPServer | None = None

    # ---- life ----
    def start(self) -> RunPodFake:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                key = key or (parse_qs(urlparse(self.path).query).get("api_key") or [""])[0]
                status, body, headers = fake.handle(key, raw)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/graphql"

    def close(self) -> None:
        self.hold_answers.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # ---- test controls ----
    def fail(self, op: str, message: str = NO_CAPACITY, times: int = 1) -> None:
        self._faults.setdefault(op, []).extend([(message, 200)] * times)

    def rate_limit(self, op: str, times: int = 1) -> None:
        self._faults.setdefault(op, []).extend([("Too many requests", 429)] * times)

    def interrupt(self, pod_id: str) -> None:
        with self._lock:
            pod = self.pods[pod_id]
            pod.update(desiredStatus="EXITED", runtime=None,
                       lastStatusChange="Exited by RunPod: interrupted (outbid)")
        if self.bodies is not None:
            self.bodies.kill([pod_id])

    def inventory(self) -> list[str]:
        with self._lock:
            return sorted(self.pods)

    def list_instances(self) -> list[tuple[str, str, str, int]]:
        """Live pods as (id, ip, PUBLIC_KEY, ssh port) for tests/cloud_bodies.py."""
        with self._lock:
            return [(i, p["_ip"], p["_env"].get("PUBLIC_KEY", ""), p["_port"])
                    for i, p in self.pods.items() if p["desiredStatus"] == "RUNNING"]

    # ---- the API ----
    def handle(self, key: str, raw: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        if key != KEY:
            return 401, {"errors": [{"message": "Unauthorized"}]}, {}
        try:
            req = json.loads(raw)
            query, variables = str(req["query"]), dict(req.get("variables") or {})
        except (ValueError, KeyError, TypeError):
            return 400, {"errors": [{"message": "Syntax Error: bad JSON body",
                                     "extensions": {"code": "GRAPHQL_PARSE_FAILED"}}]}, {}
        op = _root_field(query)
        with self._lock:
            self.calls.append(op)
            faults = self._faults.get(op) or []
            if faults:
                message, status = faults.pop(0)
                if status == 429:
                    return 429, {"errors": [{"message": message}]}, {"Retry-After": "0"}
                return 200, _error(op, message), {}
            try:
                answer = 200, {"data": self._answer(op, variables)}, {}
            except _GraphQLError as exc:
                return 200, _error(op, str(exc), exc.code), {}
        if op in ("podFindAndDeployOnDemand", "podRentInterruptable"):
            self.hold_answers.wait(60)  # applied; the answer is held (a client killed now)
        return answer

    def _answer(self, op: str, v: dict[str, Any]) -> dict[str, Any]:
        if op in ("podFindAndDeployOnDemand", "podRentInterruptable"):
            return {op: self._public(self._deploy(v.get("input") or {}, op))}
        if op == "pod":
            pod = self.pods.get(str((v.get("input") or {}).get("podId")))
            if pod is not None and pod["runtime"] is None and pod["desiredStatus"] == "RUNNING":
                pod["_polls"] += 1
                if pod["_polls"] >= self.start_polls:
                    pod["runtime"] = {"uptimeInSeconds": 1, "ports": [
                        {"ip": pod["_ip"], "isIpPublic": True, "privatePort": 22,
                         "publicPort": pod["_port"], "type": "tcp"}]}
            return {"pod": self._public(pod) if pod else None}
        if op == "pods":
            return {"myself": {"pods": [self._public(p) for p in self.pods.values()]}}
        if op == "myself":
            return {"myself": {"id": "user-1", "email": EMAIL}}
        if op in ("podTerminate", "podStop"):
            pod_id = str((v.get("input") or {}).get("podId"))
            if pod_id not in self.pods:
                raise _GraphQLError("Pod not found")
            if op == "podTerminate":
                del self.pods[pod_id]
                return {op: None}
            self.pods[pod_id].update(desiredStatus="EXITED", runtime=None)
            return {op: {"id": pod_id, "desiredStatus": "EXITED"}}
        if op == "gpuTypes":
            if "id" not in v:  # the catalog fetcher's price list
                return {"gpuTypes": self.gpu_types_listing}
            gid = str(v.get("id"))
            if gid not in GPU_TYPES:
                return {"gpuTypes": []}
            count = int((v.get("lowest") or {}).get("gpuCount") or 1)
            bid = round(GPU_TYPES[gid] * 0.5, 3) if self.spot_available else None
            return {"gpuTypes": [{"id": gid, "lowestPrice": {
                "minimumBidPrice": bid, "uninterruptablePrice": GPU_TYPES[gid] * count}}]}
        raise _GraphQLError(f'Cannot query field "{op}" on type "Query".',
                            "GRAPHQL_VALIDATION_FAILED")

    def _deploy(self, inp: dict[str, Any], op: str) -> dict[str, Any]:
        for field in ("gpuTypeId", "gpuCount", "imageName", "cloudType"):
            if field not in inp:
                raise _GraphQLError(f'Variable "$input" got invalid value; Field "{field}" of '
                                    "required type was not provided.", "BAD_USER_INPUT")
        if inp["cloudType"] not in ("SECURE", "COMMUNITY", "ALL"):
            raise _GraphQLError(f'Variable "$input" got invalid value "{inp["cloudType"]}" '
                                'at "input.cloudType"', "BAD_USER_INPUT")
        if op == "podRentInterruptable" and not inp.get("bidPerGpu"):
            raise _GraphQLError('Variable "$input" got invalid value; Field "bidPerGpu" of '
                                "required type was not provided.", "BAD_USER_INPUT")
        dc = str(inp.get("dataCenterId") or "")
        if inp["gpuTypeId"] not in GPU_TYPES or self.capacity.get(dc, 1) <= 0:
            raise _GraphQLError(NO_CAPACITY)
        used = {p["_ip"] for p in self.pods.values()}
        free = [h for h in self.hosts if h not in used]
        if not free:
            raise _GraphQLError(NO_CAPACITY)
        env = {str(e["key"]): str(e["value"]) for e in inp.get("env") or []}
        pod_id = uuid.uuid4().hex[:14]
        pod = {"id": pod_id, "name": inp.get("name") or "", "desiredStatus": "RUNNING",
               "costPerHr": GPU_TYPES[inp["gpuTypeId"]] * int(inp["gpuCount"]),
               "gpuCount": int(inp["gpuCount"]), "imageName": inp["imageName"],
               "lastStatusChange": "Rented by User", "dataCenterId": dc or "US-KS-2",
               "machine": {"podHostId": f"{pod_id}-64410e2d", "gpuDisplayName":
                           inp["gpuTypeId"]}, "runtime": None,
               "_ip": free[0], "_port": next(self._ports), "_env": env, "_input": inp,
               "_polls": 0, "_op": op}
        self.pods[pod_id] = pod
        return pod

    @staticmethod
    def _public(pod: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if pod is None else {k: v for k, v in pod.items() if not k.startswith("_")}


class _GraphQLError(Exception):
    def __init__(self, message: str, code: str = "INTERNAL_SERVER_ERROR") -> None:
        super().__init__(message)
        self.code = code


def _root_field(query: str) -> str:
    body = query[query.index("{") + 1:] if "{" in query else query
    m = re.match(r"\s*(\w+)", body)
    field = m.group(1) if m else ""
    if field == "myself" and re.search(r"myself\s*{\s*pods\b", body):
        return "pods"
    return field


def _error(op: str, message: str, code: str = "INTERNAL_SERVER_ERROR") -> dict[str, Any]:
    return {"errors": [{"message": message, "path": [op], "extensions": {"code": code}}],
            "data": None}


def write_config(home: Path, endpoint: str) -> None:
    config = home / "config.yaml"
    body = yaml.safe_load(config.read_text()) if config.exists() else {}
    body = body or {}
    body["runpod"] = {"api_endpoint": endpoint}
    config.write_text(yaml.safe_dump(body))


@pytest.fixture
def runpod_fake(request: pytest.FixtureRequest, launcher_home: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[RunPodFake]:
    """The fake, RUNPOD_API_KEY, and config `runpod.api_endpoint` pointing at it."""
    subnet = "10.123.255.0/24"
    try:
        lab = request.getfixturevalue("netns_lab")
        subnet = lab.subnet if lab.netns_mode else subnet
    except pytest.skip.Exception:
        pass
    fake = RunPodFake(subnet).start()
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    monkeypatch.delenv("RUNPOD_API_BASE_URL", raising=False)
    write_config(launcher_home, fake.endpoint)
    try:
        yield fake
    finally:
        fake.close()


_reserved: set[int] = set()


@pytest.fixture
def runpod_cloud(request: pytest.FixtureRequest, runpod_fake: RunPodFake) -> Iterator[RunPodFake]:
    """`runpod_fake` plus an sshd body per running pod at its IP, listening on its port."""
    from tests.aws_moto import ConnectGuard
    from tests.cloud_bodies import CloudBodies

    lab = request.getfixturevalue("netns_lab")
    if not lab.netns_mode:
        pytest.skip("RunPod bodies need network-namespace sshd nodes")
    if id(lab) not in _reserved:
        lab.reserve(str(lab_range(lab.subnet)))
        _reserved.add(id(lab))
    bodies = CloudBodies(lab, runpod_fake.list_instances, name="runpod",
                         env_for=_gpu_image_for(runpod_fake, lab.workdir)).start()
    runpod_fake.bodies = bodies
    try:
        with ConnectGuard(lab.subnet) as guard:
            yield runpod_fake
    finally:
        runpod_fake.bodies = None
        bodies.close()
    assert not guard.violations, f"connected outside the lab: {sorted(set(guard.violations))}"


def _gpu_image_for(fake: RunPodFake, workdir: Path) -> Callable[[str], dict[str, str]]:
    """Each pod's image: its GPUs (fake nvidia-smi, tests/fakes) for the health gate."""
    from tests.fakes import gpu_image

    def env(pod_id: str) -> dict[str, str]:
        pod = fake.pods[pod_id]
        config_dir = Path(workdir) / f"gpu-image-runpod-{pod_id}"
        config_dir.mkdir(exist_ok=True)
        return gpu_image(config_dir, count=pod["gpuCount"],
                         name=pod["machine"]["gpuDisplayName"])

    return env
