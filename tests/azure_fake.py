"""A local Azure Resource Manager: a stdlib HTTP server speaking ARM's REST wire format
for what launcher's Azure provisioner calls, plus the pytest fixtures that wire it up.

Paths and bodies are ARM's (the azure-mgmt-* SDKs parse them): resource groups
(PUT/GET/DELETE, list with `$filter=tagName eq '...'`), and under
`/subscriptions/{s}/resourceGroups/{g}/providers/{Namespace}/{type}/{name}` network
security groups, virtual networks (subnets get ids), public IPs (203.0.113.x, a
documentation range never contacted), NICs (private IPs handed out in order from the
subnet's prefix, from .4 as Azure does, and only inside the lab's subnet), proximity
placement groups (synchronous) and VMs (PUT/GET with `$expand=instanceView`, DELETE,
POST deallocate/start/powerOff, GET instanceView, list). Long-running operations answer
201/202 with an `Azure-AsyncOperation` header (and `Location` for DELETE/POST; a resource
group's DELETE has `Location` only) whose URL reports `InProgress` for `op_polls` polls
and then `Succeeded` (or `Failed` with the error). Errors are ARM's
`{"error": {"code", "message"}}` with the real HTTP status; 429 carries `Retry-After`.
Every request must carry `Authorization: Bearer <the token the fake az CLI issues>`.

Faults: `fake.fail(method, pattern, status, code, message, times=1, in_operation=False)`
answers the next `times` matching requests with the error (or, `in_operation`, accepts
them and fails their long-running operation, as ARM does for `AllocationFailed`).
`fake.evict(vm_id)` does what a Spot eviction with policy Delete does: the body dies,
the VM and its NIC (deleteOption Delete) disappear, the group stays.

Fixtures: `azure_fake` (fake + credentials the documented way: a fake `az` on PATH that
the SDK's AzureCliCredential runs, `AZURE_CONFIG_DIR` with an azureProfile.json,
`AZURE_TOKEN_CREDENTIALS=AzureCliCredential`; config `azure.resource_manager_endpoint`
pointing at the fake; `LAUNCHER_AZURE_POLLING_INTERVAL=0`), and `azure_cloud` (plus
sshd bodies at the NICs' IPs, config `azure: {use_internal_ips: true, ssh_user: root}`).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

SUBSCRIPTION = "00000000-0000-0000-0000-00000000a2e0"
TENANT = "11111111-1111-1111-1111-111111111111"
USER = "tester@example.com"
CLUSTER_TAG = "launcher-cluster"
LAB_RANGE = ".32/27"  # inside the netns lab's /24: Azure bodies' addresses (AWS uses .64+)
LRO_TYPES = {"networksecuritygroups", "virtualnetworks", "publicipaddresses",
             "networkinterfaces", "virtualmachines"}


def fake_token() -> str:
    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
    return ".".join([b64({"alg": "none", "typ": "JWT"}),
                     b64({"upn": USER, "tid": TENANT, "oid": "o-1"}), "sig"])


TOKEN = fake_token()


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    code: str
    message: str
    times: int
    in_operation: bool
    retry_after: int | None


@dataclass
class Operation:
    polls_left: int
    on_success: Any  # callable run once when it succeeds
    error: dict[str, Any] | None = None
    location_style: bool = False  # resource group delete: Location polling (202 -> 200)
    done: bool = False
    status: str = "InProgress"


class AzureFake:
    """ARM state + the HTTP server. Thread-safe (one lock)."""

    def __init__(self, lab_subnet: str, *, op_polls: int = 1) -> None:
        self.lab = ipaddress.ip_network(lab_subnet)
        self.op_polls = op_polls
        self.lock = threading.RLock()
        self.groups: dict[str, dict[str, Any]] = {}  # lower name -> body
        self.resources: dict[str, dict[str, Any]] = {}  # lower "g/ns/type/name" -> body
        self.ops: dict[str, Operation] = {}
        self.faults: list[Fault] = []
        self.calls: list[tuple[str, str]] = []  # (method, path) of every request
        self.ip_used: set[str] = set()
        self.public_next = 10
        self.bodies: Any = None
        self.vm_op_polls: int | None = None  # VM creations' polls (None: op_polls)
        self.skus: list[dict[str, Any]] = []  # Microsoft.Compute/skus (resource SKUs)
        self.retail_pages: list[dict[str, Any]] = []  # Retail Prices pages (?page=N)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> AzureFake:
        self._thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- what tests do -------------------------------------------------------------

    def fail(self, method: str, pattern: str, status: int, code: str, message: str = "",
             *, times: int = 1, in_operation: bool = False, retry_after: int | None = None) -> None:
        self.faults.append(Fault(method.upper(), re.compile(pattern, re.I), status, code,
                                 message or f"fake {code}", times, in_operation, retry_after))

    def vms(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r for k, r in self.resources.items() if "/virtualmachines/" in k]

    def vm(self, vm_id: str) -> dict[str, Any]:
        return next(v for v in self.vms() if v["id"].lower() == vm_id.lower()
                    or v["name"] == vm_id)

    def evict(self, vm_ids: list[str], *, deallocate: bool = False) -> None:
        """Spot eviction: bodies die; the VMs (and NICs) are deleted, or deallocated."""
        if self.bodies is not None:
            self.bodies.kill([self.vm(v)["properties"]["vmId"] for v in vm_ids])
        with self.lock:
            for vid in vm_ids:
                vm = self.vm(vid)
                if deallocate:
                    vm["_power"] = "deallocated"
                    continue
                self._delete_key(self._key_of(vm["id"]))
                for n in vm["properties"]["networkProfile"]["networkInterfaces"]:
                    self._delete_key(self._key_of(n["id"]))

    def inventory(self) -> list[str]:
        """Every resource group and resource the fake holds (ids)."""
        with self.lock:
            return sorted([g["id"] for g in self.groups.values()]
                          + [r["id"] for r in self.resources.values()])

    def list_instances(self) -> list[tuple[str, str | None, str | None]]:
        """Live VMs for the bodies: (vmId, its NIC's private IP, its SSH public key)."""
        out = []
        with self.lock:
            for vm in self.vms():
                if vm.get("_power") not in ("running", "starting"):
                    continue
                props = vm["properties"]
                nic = self.resources.get(self._key_of(
                    props["networkProfile"]["networkInterfaces"][0]["id"]))
                ip = None if nic is None else nic["properties"]["ipConfigurations"][0][
                    "properties"].get("privateIPAddress")
                keys = props["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
                # the body is keyed by the VM's unique vmId (a resource id has slashes and
                # is reused by a VM of the same name)
                out.append((props["vmId"], ip, keys[0]["keyData"] if keys else None))
        return out

    # ---- state helpers ---------------------------------------------------------------

    @staticmethod
    def _key_of(rid: str) -> str:
        m = re.match(r"/subscriptions/[^/]+/resourcegroups/([^/]+)/providers/([^/]+)/(.+)$",
                     rid, re.I)
        assert m, rid
        return f"{m.group(1)}/{m.group(2)}/{m.group(3)}".lower()

    def _delete_key(self, key: str) -> None:
        res = self.resources.pop(key, None)
        if res is None:
            return
        for sub in [k for k in self.resources if k.startswith(key + "/")]:
            self.resources.pop(sub)
        if "/networkinterfaces/" in key:
            ip = res["properties"]["ipConfigurations"][0]["properties"].get("privateIPAddress")
            self.ip_used.discard(ip)

    def _new_op(self, on_success: Any, error: dict[str, Any] | None = None,
                location_style: bool = False, polls: int | None = None) -> str:
        op_id = uuid.uuid4().hex
        self.ops[op_id] = Operation(self.op_polls if polls is None else polls, on_success,
                                    error, location_style)
        return f"{self.endpoint}/fake-operations/{op_id}?api-version=2024-01-01"

    def _allocate_ip(self, subnet_prefix: str) -> str | None:
        net = ipaddress.ip_network(subnet_prefix)
        if not net.subnet_of(self.lab):  # type: ignore[arg-type]
            return None
        hosts = list(net.hosts())[3:]  # Azure keeps .1-.3 (and the network/broadcast)
        for ip in hosts[:-1] if len(hosts) > 1 else hosts:
            if str(ip) not in self.ip_used:
                self.ip_used.add(str(ip))
                return str(ip)
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any = None,
                      headers: dict[str, str] | None = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-ms-request-id", uuid.uuid4().hex)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, code: str, message: str,
                       headers: dict[str, str] | None = None) -> None:
                self._send(status, {"error": {"code": code, "message": message}}, headers)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                with fake.lock:
                    fake.calls.append((method, url.path))
                    if url.path.startswith("/fake-operations/"):
                        return self._operation(url.path.rsplit("/", 1)[1])
                    if url.path == "/api/retail/prices":  # prices.azure.com: no auth
                        page = int(query.get("page", "0"))
                        return self._send(200, fake.retail_pages[page])
                    if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                        return self._error(401, "AuthenticationFailed",
                                           "Authentication failed. The 'Authorization' header "
                                           "is missing or has an invalid token.")
                    for f in fake.faults:
                        if f.times > 0 and f.method == method and f.pattern.search(url.path):
                            f.times -= 1
                            if not f.in_operation:
                                hdr = ({"Retry-After": str(f.retry_after)}
                                       if f.retry_after is not None else None)
                                return self._error(f.status, f.code, f.message, hdr)
                            body = json.loads(raw) if raw else {}
                            return fake._route(self, method, url.path, query, body,
                                               {"code": f.code, "message": f.message})
                    body = json.loads(raw) if raw else {}
                    return fake._route(self, method, url.path, query, body, None)

            def _operation(self, op_id: str) -> None:
                op = fake.ops.get(op_id)
                if op is None:
                    return self._error(404, "NotFound", "no such operation")
                if not op.done:
                    if op.polls_left > 0:
                        op.polls_left -= 1
                    else:
                        op.done = True
                        if op.error is None:
                            op.on_success()
                            op.status = "Succeeded"
                        else:
                            op.status = "Failed"
                if op.location_style:
                    return self._send(202 if not op.done else 200,
                                      None, {"Location": self.path} if not op.done else None)
                body: dict[str, Any] = {"name": op_id, "status": op.status,
                                        "startTime": "2026-01-01T00:00:00Z"}
                if op.status == "Failed":
                    body["error"] = op.error
                return self._send(200, body)

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET")

            def do_PUT(self) -> None:  # noqa: N802
                self._handle("PUT")

            def do_DELETE(self) -> None:  # noqa: N802
                self._handle("DELETE")

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

            def do_HEAD(self) -> None:  # noqa: N802
                self._handle("HEAD")

        return Handler

    # ---- routing ----------------------------------------------------------------------

    def _route(self, h: Any, method: str, path: str, query: dict[str, str],
               body: dict[str, Any], op_error: dict[str, Any] | None) -> None:
        from tests.azure_fake_routes import route

        route(self, h, method, path, query, body, op_error)


# ---- credentials the documented way: the Azure CLI's login, faked ------------------------

AZ_SCRIPT = """#!/bin/sh
# a stand-in for the Azure CLI: `az account get-access-token` as AzureCliCredential runs it
case "$1 $2" in
  "account get-access-token")
    printf '%s' '{"accessToken": "TOKEN", "expiresOn": "2099-01-01 00:00:00.000000",
      "expires_on": 4070908800, "subscription": "SUB", "tenant": "TENANT",
      "tokenType": "Bearer"}' ;;
  *) echo "fake az: unsupported: $*" >&2; exit 2 ;;
esac
"""


def install_cli_login(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake `az` on PATH and an Azure CLI profile (AZURE_CONFIG_DIR) with a default
    subscription; the SDK chain narrowed to AzureCliCredential (AZURE_TOKEN_CREDENTIALS)."""
    import os

    bindir = root / "az-bin"
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "az"
    script.write_text(AZ_SCRIPT.replace("TOKEN", TOKEN).replace("SUB", SUBSCRIPTION)
                      .replace("TENANT", TENANT))
    script.chmod(0o755)
    cfg = root / "azure-config"
    cfg.mkdir(exist_ok=True)
    (cfg / "azureProfile.json").write_text(json.dumps({"subscriptions": [{
        "id": SUBSCRIPTION, "name": "launcher-test", "isDefault": True, "tenantId": TENANT,
        "state": "Enabled", "user": {"name": USER, "type": "user"}}]}))
    for var in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET",
                "AZURE_SUBSCRIPTION_ID", "IDENTITY_ENDPOINT", "MSI_ENDPOINT",
                "AZURE_RESOURCE_MANAGER_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(cfg))
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "AzureCliCredential")
    monkeypatch.setenv("LAUNCHER_AZURE_POLLING_INTERVAL", "0")


def write_config(launcher_home: Path, endpoint: str, vnet_cidr: str, **extra: Any) -> None:
    config = launcher_home / "config.yaml"
    body: dict[str, Any] = yaml.safe_load(config.read_text()) if config.exists() else {}
    body = body or {}
    body["azure"] = {"resource_manager_endpoint": endpoint, "vnet_cidr": vnet_cidr, **extra}
    config.write_text(yaml.safe_dump(body))


def lab_range(lab_subnet: str) -> str:
    net = ipaddress.ip_network(lab_subnet)
    return f"{net.network_address + int(LAB_RANGE[1:].split('/')[0])}/{LAB_RANGE.split('/')[1]}"


def _lab_or_none(request: pytest.FixtureRequest) -> Any:
    try:
        lab = request.getfixturevalue("netns_lab")
    except pytest.skip.Exception:
        return None
    return lab if lab.netns_mode else None


@pytest.fixture
def azure_fake(request: pytest.FixtureRequest, launcher_home: Path, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[AzureFake]:
    """The ARM fake, credentials (fake az CLI login) and config pointing at it."""
    lab = _lab_or_none(request)
    subnet = lab.subnet if lab is not None else "10.123.255.0/24"
    fake = AzureFake(subnet).start()
    install_cli_login(tmp_path, monkeypatch)
    write_config(launcher_home, fake.endpoint, lab_range(subnet))
    try:
        yield fake
    finally:
        fake.close()


_reserved: set[int] = set()


@pytest.fixture
def azure_cloud(request: pytest.FixtureRequest, azure_fake: AzureFake,
                launcher_home: Path) -> Iterator[AzureFake]:
    """`azure_fake` plus an sshd body per running VM, and config
    `azure: {use_internal_ips: true, ssh_user: root}`."""
    from tests.aws_moto import ConnectGuard
    from tests.cloud_bodies import CloudBodies

    lab = _lab_or_none(request)
    if lab is None:
        pytest.skip("Azure bodies need network-namespace sshd nodes (netns lab unavailable)")
    if id(lab) not in _reserved:
        lab.reserve(lab_range(lab.subnet))
        _reserved.add(id(lab))
    write_config(launcher_home, azure_fake.endpoint, lab_range(lab.subnet),
                 use_internal_ips=True, ssh_user="root")
    bodies = CloudBodies(lab, azure_fake.list_instances, name="azure").start()
    azure_fake.bodies = bodies
    try:
        with ConnectGuard(lab.subnet) as guard:
            yield azure_fake
    finally:
        azure_fake.bodies = None
        bodies.close()
    assert not guard.violations, f"connected outside the lab: {sorted(set(guard.violations))}"


