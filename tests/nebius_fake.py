"""An in-process fake of the Nebius API: a real `grpcio` server speaking the services the
`nebius` SDK defines, with the SDK's own message types.

The SDK (0.6.x) ships its protos as descriptors in its registry and its own message
classes (`nebius.api.nebius.compute.v1.Instance`, ...), not protoc `*_pb2_grpc` modules, so
the servicers here are `grpc.method_handlers_generic_handler`s for the service and method
names in `REGISTRY.service_descriptor(...)`, (de)serializing with those classes. Served:
compute.v1 InstanceService / DiskService / GpuClusterService (Get, List, Create, Delete),
vpc.v1 SubnetService.List and common.v1 OperationService.Get. Create/Delete answer an
Operation that is not done; its first OperationService.Get says done (status OK, or the
fault's status). The product reaches it through its documented settings
(`nebius.api_endpoint: 127.0.0.1:PORT`, `nebius.plaintext: true`).

Instances get private IPs in order from `hosts` (inside the netns lab's /24) and a
public IP from 192.0.2.0/24 (TEST-NET-1, never connected to: tests use internal IPs or
an injected node waiter); the SSH key is read from the cloud-init user data.
`faults["InstanceService.Create"] = [kind, ...]` makes the next calls of that RPC fail
(kinds: capacity, quota, auth, invalid, unavailable, internal; `op-capacity` /
`op-quota` fail the operation instead of the call). `preempt(id)` stops a preemptible
instance the way Nebius does (on_preemption STOP). `hold = (rpc, index)` carries that
call out and then holds its answer (`held` is set) until `release`: a client killed there
has created the resource without learning its id.
"""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from nebius.api.nebius.common.v1 import (
    GetOperationRequest,
    NotEnoughResources,
    Operation,
    QuotaFailure,
    ResourceMetadata,
    ServiceError,
)
from nebius.api.nebius.compute.v1 import (
    REGISTRY,
    CreateDiskRequest,
    CreateGpuClusterRequest,
    CreateInstanceRequest,
    DeleteDiskRequest,
    DeleteGpuClusterRequest,
    DeleteInstanceRequest,
    Disk,
    DiskStatus,
    GetDiskRequest,
    GetGpuClusterRequest,
    GetInstanceRequest,
    GpuCluster,
    Instance,
    InstanceStatus,
    IPAddressStatus,
    ListDisksRequest,
    ListDisksResponse,
    ListGpuClustersRequest,
    ListGpuClustersResponse,
    ListInstancesRequest,
    ListInstancesResponse,
    NetworkInterfaceStatus,
    PublicIPAddressStatus,
)
from nebius.api.nebius.vpc.v1 import ListSubnetsRequest, ListSubnetsResponse, Subnet

Status = REGISTRY.message_class("google.rpc.Status")
AnyMsg = REGISTRY.message_class("google.protobuf.Any")
SUBNET_ID = "vpcsubnet-e00fake"
PROJECT = "project-e00fake"
FAULT_KINDS = ("capacity", "quota", "auth", "invalid", "unavailable", "internal")
PROVISION_RPCS = ("SubnetService.List", "GpuClusterService.Create", "DiskService.Create",
                  "InstanceService.Create", "InstanceService.Get", "OperationService.Get")
_CODES = {"capacity": grpc.StatusCode.RESOURCE_EXHAUSTED, "quota": grpc.StatusCode.RESOURCE_EXHAUSTED,
          "auth": grpc.StatusCode.PERMISSION_DENIED, "invalid": grpc.StatusCode.INVALID_ARGUMENT,
          "unavailable": grpc.StatusCode.UNAVAILABLE, "internal": grpc.StatusCode.INTERNAL}


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def service_error(kind: str) -> Any:
    """The ServiceError detail Nebius attaches for `kind` (None: none)."""
    if kind == "quota":
        return ServiceError(service="compute", code="QuotaFailure", quota_failure=QuotaFailure(
            violations=[QuotaFailure.Violation(quota="compute.instance.gpu.h100", limit="8",
                                               requested="16", message="GPU quota exceeded")]))
    if kind == "capacity":
        return ServiceError(service="compute", code="NotEnoughResources",
                            not_enough_resources=NotEnoughResources(violations=[
                                NotEnoughResources.Violation(resource_type="gpu-h100-sxm",
                                                             requested="8",
                                                             message="no capacity")]))
    return None


def rpc_status(kind: str) -> Any:
    code = _CODES[kind]
    details = []
    err = service_error(kind)
    if err is not None:
        details.append(AnyMsg(type_url="type.googleapis.com/nebius.common.v1.ServiceError",
                              value=err.SerializeToString()))
    return Status(code=code.value[0], message=f"fake fault ({code.name})", details=details)


class NebiusFake:
    """See the module docstring. `start()` binds 127.0.0.1:0; `endpoint` is host:port."""

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = list(hosts)
        self.lock = threading.RLock()
        self.instances: dict[str, Instance] = {}
        self.disks: dict[str, Disk] = {}
        self.gpu_clusters: dict[str, GpuCluster] = {}
        self.ops: dict[str, tuple[Operation, Callable[[], None] | None, str | None]] = {}
        self.faults: dict[str, list[str]] = {}
        self.calls: list[str] = []
        self.tokens: set[str] = set()
        # (rpc, index): that call is carried out, then its answer held until `release`
        self.hold: tuple[str, int] | None = None
        self.held = threading.Event()
        self.release = threading.Event()
        self._ids = itertools.count(1)
        self._server: Any = None
        self.endpoint = ""
        self.bodies: Any = None

    # ---- server ----

    def start(self) -> NebiusFake:
        server = grpc.server(ThreadPoolExecutor(8))
        server.add_generic_rpc_handlers(self._handlers())
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server, self.endpoint = server, f"127.0.0.1:{port}"
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.stop(0)

    def _handlers(self) -> list[Any]:
        table: dict[str, dict[str, tuple[Any, Callable[..., Any]]]] = {
            "nebius.compute.v1.InstanceService": {
                "Get": (GetInstanceRequest, lambda r: self._get(self.instances, r.id)),
                "List": (ListInstancesRequest, lambda r: ListInstancesResponse(
                    items=self._list(self.instances, r.parent_id))),
                "Create": (CreateInstanceRequest, self._create_instance),
                "Delete": (DeleteInstanceRequest, lambda r: self._delete(self.instances, r.id)),
            },
            "nebius.compute.v1.DiskService": {
                "Get": (GetDiskRequest, lambda r: self._get(self.disks, r.id)),
                "List": (ListDisksRequest, lambda r: ListDisksResponse(
                    items=self._list(self.disks, r.parent_id))),
                "Create": (CreateDiskRequest, self._create_disk),
                "Delete": (DeleteDiskRequest, lambda r: self._delete(self.disks, r.id)),
            },
            "nebius.compute.v1.GpuClusterService": {
                "Get": (GetGpuClusterRequest, lambda r: self._get(self.gpu_clusters, r.id)),
                "List": (ListGpuClustersRequest, lambda r: ListGpuClustersResponse(
                    items=self._list(self.gpu_clusters, r.parent_id))),
                "Create": (CreateGpuClusterRequest, self._create_gpu_cluster),
                "Delete": (DeleteGpuClusterRequest,
                           lambda r: self._delete(self.gpu_clusters, r.id)),
            },
            "nebius.vpc.v1.SubnetService": {
                "List": (ListSubnetsRequest, lambda r: ListSubnetsResponse(items=[Subnet(
                    metadata=ResourceMetadata(id=SUBNET_ID, parent_id=r.parent_id,
                                              name="default-subnet"))])),
            },
            "nebius.common.v1.OperationService": {
                "Get": (GetOperationRequest, self._get_operation),
            },
        }
        handlers = []
        for service, methods in table.items():
            declared = {m.name for m in REGISTRY.service_descriptor(service).methods}
            assert set(methods) <= declared, (service, set(methods) - declared)
            handlers.append(grpc.method_handlers_generic_handler(service, {
                name: grpc.unary_unary_rpc_method_handler(
                    self._wrap(f"{service.rsplit('.', 1)[1]}.{name}", fn),
                    request_deserializer=cls.FromString,
                    response_serializer=lambda m: m.SerializeToString())
                for name, (cls, fn) in methods.items()}))
        return handlers

    def _wrap(self, key: str, fn: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
        def handler(request: Any, context: Any) -> Any:
            md = dict(context.invocation_metadata())
            with self.lock:
                self.calls.append(key)
                self.tokens.add(str(md.get("authorization", "")))
                queue = self.faults.get(key) or []
                kind = queue.pop(0) if queue else None
            if kind and not kind.startswith("op-"):
                status = rpc_status(kind)
                context.set_trailing_metadata(
                    (("grpc-status-details-bin", status.SerializeToString()),))
                context.abort(_CODES[kind], status.message)
            result = fn(request)
            with self.lock:
                hold = self.hold is not None and self.hold == (key, self.calls.count(key) - 1)
            if hold:
                self.held.set()
                self.release.wait(30)
            if isinstance(result, grpc.StatusCode):
                context.abort(result, f"{key}: not found")
            if kind and isinstance(result, Operation):
                with self.lock:
                    op, done, _ = self.ops[result.id]
                    self.ops[result.id] = (op, None, kind[3:])
            return result
        return handler

    # ---- resources ----

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-e00{next(self._ids):06d}"

    def _operation(self, resource_id: str, on_done: Callable[[], None] | None) -> Operation:
        op = Operation(id=self._new_id("op"), resource_id=resource_id, created_at=_now())
        with self.lock:
            self.ops[op.id] = (op, on_done, None)
        return op

    def _get_operation(self, req: Any) -> Any:
        with self.lock:
            if req.id not in self.ops:
                return grpc.StatusCode.NOT_FOUND
            op, on_done, fail = self.ops[req.id]
            if op.status is None:
                if fail:
                    op.status = rpc_status(fail)
                else:
                    if on_done is not None:
                        on_done()
                    op.status = Status(code=0)
                op.finished_at = _now()
            return op

    def _get(self, table: dict[str, Any], rid: str) -> Any:
        with self.lock:
            return table.get(rid, grpc.StatusCode.NOT_FOUND)

    def _list(self, table: dict[str, Any], parent: str) -> list[Any]:
        with self.lock:
            return [r for r in table.values() if r.metadata.parent_id == parent]

    def _meta(self, md: Any, rid: str) -> Any:
        return ResourceMetadata(id=rid, parent_id=md.parent_id, name=md.name,
                                labels=dict(md.labels or {}), created_at=_now())

    def _create_disk(self, req: Any) -> Any:
        rid = self._new_id("computedisk")
        disk = Disk(metadata=self._meta(req.metadata, rid), spec=req.spec,
                    status=DiskStatus(state=DiskStatus.State.CREATING))
        with self.lock:
            self.disks[rid] = disk

        def ready() -> None:
            disk.status.state = DiskStatus.State.READY
        return self._operation(rid, ready)

    def _create_gpu_cluster(self, req: Any) -> Any:
        rid = self._new_id("computegpucluster")
        with self.lock:
            self.gpu_clusters[rid] = GpuCluster(metadata=self._meta(req.metadata, rid),
                                                spec=req.spec)
        return self._operation(rid, None)

    def _create_instance(self, req: Any) -> Any:
        rid = self._new_id("computeinstance")
        with self.lock:
            used = {self.private_ip(i) for i in self.instances.values()}
            free = [h for h in self.hosts if h not in used]
            if not free:
                return grpc.StatusCode.RESOURCE_EXHAUSTED
            ip = free[0]
            boot = self.boot_disk(req)
            if boot not in self.disks:
                return grpc.StatusCode.INVALID_ARGUMENT
            iface = NetworkInterfaceStatus(index=0, name="eth0",
                                           ip_address=IPAddressStatus(address=f"{ip}/32"))
            if req.spec.network_interfaces and \
                    req.spec.network_interfaces[0].check_presence("public_ip_address"):
                iface.public_ip_address = PublicIPAddressStatus(
                    address=f"192.0.2.{self.hosts.index(ip) + 10}/32")
            inst = Instance(metadata=self._meta(req.metadata, rid), spec=req.spec,
                            status=InstanceStatus(state=InstanceStatus.InstanceState.CREATING,
                                                  network_interfaces=[iface]))
            self.instances[rid] = inst

        def running() -> None:
            inst.status.state = InstanceStatus.InstanceState.RUNNING
        return self._operation(rid, running)

    def _delete(self, table: dict[str, Any], rid: str) -> Any:
        with self.lock:
            if rid not in table:
                return grpc.StatusCode.NOT_FOUND
            if table is self.disks and any(
                    self.boot_disk(i) == rid for i in self.instances.values()):
                return grpc.StatusCode.FAILED_PRECONDITION
            if table is self.gpu_clusters and any(
                    i.spec.check_presence("gpu_cluster") and i.spec.gpu_cluster.id == rid
                    for i in self.instances.values()):
                return grpc.StatusCode.FAILED_PRECONDITION

        def gone() -> None:
            table.pop(rid, None)
        return self._operation(rid, gone)

    # ---- test helpers ----

    @staticmethod
    def boot_disk(inst: Any) -> str:
        disk = inst.spec.boot_disk
        return str(disk.existing_disk.id) if disk and disk.existing_disk else ""

    @staticmethod
    def private_ip(inst: Any) -> str:
        return str(inst.status.network_interfaces[0].ip_address.address).split("/")[0]

    @staticmethod
    def ssh_key(inst: Any) -> str:
        data = str(inst.spec.cloud_init_user_data or "")
        body = json.loads(data.split("\n", 1)[1]) if data.startswith("#cloud-config") else {}
        keys = [k for u in body.get("users", []) for k in u.get("ssh_authorized_keys", [])]
        return keys[0] if keys else ""

    def list_instances(self) -> Iterator[tuple[str, str, str]]:
        """(id, private IP, SSH key) of every running instance (for CloudBodies)."""
        with self.lock:
            live = [i for i in self.instances.values()
                    if i.status.state == InstanceStatus.InstanceState.RUNNING]
        return iter([(str(i.metadata.id), self.private_ip(i), self.ssh_key(i)) for i in live])

    def preempt(self, rid: str) -> None:
        """What Nebius does to a preemptible instance (on_preemption STOP): it stops."""
        with self.lock:
            inst = self.instances[rid]
            assert inst.spec.check_presence("preemptible"), "only preemptible instances stop so"
            inst.status.state = InstanceStatus.InstanceState.STOPPED
        if self.bodies is not None:
            self.bodies.kill([rid])

    def inventory(self) -> list[str]:
        """Ids of everything that exists (instances, disks, GPU clusters)."""
        with self.lock:
            return sorted([*self.instances, *self.disks, *self.gpu_clusters])


# ---- pytest fixtures (imported by tests/clouds/nebius/conftest.py) ----

# Nebius bodies' addresses inside the netns lab's /24: .2-.9 (below the .10+ that
# automatic lab nodes take; .16/29 Lambda, .24/29 Vast, .32/27 Azure, .64+ AWS/GCP/RunPod)
LAB_RANGES = (".0/29", ".8/31")
FABRIC = "fabric-3"


def _ranges(lab_subnet: str) -> list[str]:
    base = ipaddress.ip_network(lab_subnet).network_address
    return [f"{base + int(r[1:].split('/')[0])}/{r.split('/')[1]}" for r in LAB_RANGES]


def lab_hosts(lab_subnet: str) -> list[str]:
    """.2 to .9 of the lab's /24 (.0 is the network, .1 the bridge)."""
    base = ipaddress.ip_network(lab_subnet).network_address
    return [str(base + i) for i in range(2, 10)]


def write_config(launcher_home: Path, endpoint: str, **extra: Any) -> None:
    """`nebius:` in config.yaml pointing at the fake (the documented settings)."""
    config = launcher_home / "config.yaml"
    body: dict[str, Any] = (yaml.safe_load(config.read_text()) if config.exists() else {}) or {}
    body["nebius"] = {"api_endpoint": endpoint, "plaintext": True, "project_id": PROJECT,
                      "fabrics": {"eu-north1": FABRIC}, **extra}
    config.write_text(yaml.safe_dump(body))


def _lab_or_none(request: pytest.FixtureRequest) -> Any:
    try:
        lab = request.getfixturevalue("netns_lab")
    except pytest.skip.Exception:
        return None
    return lab if lab.netns_mode else None


@pytest.fixture
def nebius_fake(request: pytest.FixtureRequest, launcher_home: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[NebiusFake]:
    """The gRPC fake, an IAM token in NEBIUS_IAM_TOKEN, config.yaml pointing at it."""
    lab = _lab_or_none(request)
    fake = NebiusFake(lab_hosts(lab.subnet if lab is not None else "10.123.255.0/24")).start()
    monkeypatch.setenv("NEBIUS_IAM_TOKEN", "fake-iam-token")
    monkeypatch.delenv("NEBIUS_ENDPOINT", raising=False)
    write_config(launcher_home, fake.endpoint)
    from launcher.clouds.registry import get_cloud

    get_cloud.cache_clear()
    try:
        yield fake
    finally:
        get_cloud.cache_clear()
        fake.close()


_reserved: set[int] = set()


@pytest.fixture
def nebius_cloud(request: pytest.FixtureRequest, nebius_fake: NebiusFake,
                 launcher_home: Path) -> Iterator[NebiusFake]:
    """`nebius_fake` plus an sshd body per running instance, and config
    `nebius: {use_internal_ips: true, ssh_user: root}`."""
    from tests.aws_moto import ConnectGuard
    from tests.cloud_bodies import CloudBodies

    lab = _lab_or_none(request)
    if lab is None:
        pytest.skip("Nebius bodies need network-namespace sshd nodes (netns lab unavailable)")
    if id(lab) not in _reserved:
        for cidr in _ranges(lab.subnet):
            lab.reserve(cidr)
        _reserved.add(id(lab))
    write_config(launcher_home, nebius_fake.endpoint, use_internal_ips=True, ssh_user="root")
    bodies = CloudBodies(lab, nebius_fake.list_instances, name="nebius",
                         env=_gpu_image(lab.workdir)).start()
    nebius_fake.bodies = bodies
    try:
        with ConnectGuard(lab.subnet) as guard:
            yield nebius_fake
    finally:
        nebius_fake.bodies = None
        bodies.close()
    assert not guard.violations, f"connected outside the lab: {sorted(set(guard.violations))}"


def _gpu_image(workdir: Path) -> dict[str, str]:
    """The bodies' image: H100 machines (fake nvidia-smi, tests/fakes) for the health gate."""
    from tests.fakes import gpu_image

    config_dir = Path(workdir) / "gpu-image-nebius"
    config_dir.mkdir(exist_ok=True)
    return gpu_image(config_dir)
