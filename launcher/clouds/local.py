"""The embedded `local` cloud: clusters whose nodes are directories and processes here.

A local cluster of N nodes lives in `$LAUNCHER_HOME/local/<cluster>/`:
- `node-<rank>/` is node `rank`'s home directory (HOME and default cwd of every
  command run on it; `NodeInfo.local_root`). All nodes report `127.0.0.1`.
- `machines.json` is the cloud's own view of its "machines" (what a provider's API
  would answer). It is written before any node directory exists, so it is the tag
  that lets `terminate` find everything. Shape (version 1):

      {"version": 1, "cluster": "c", "created_at": 1700000000.0,
       "nodes": [{"rank": 0, "node_id": "c-0", "state": "RUNNING", "gpu_ids": [0, 1]}]}

  `state` is a NodeState value: RUNNING, STOPPED or PREEMPTED.

A node's processes are every process whose HOME is the node directory or whose
cwd is inside it (the runners set HOME for every command, and the agent gives
each rank its node's HOME), plus any process group id registered in a `*.pgid`
file under the node's `.launcher-agent/` directory. Stopping, terminating and
preempting a node kill them all with SIGKILL, as a provider does to a VM.

GPUs: when `nvidia-smi` lists GPUs, a request for K GPUs per node gets K distinct
device ids per node (not in use by another running local cluster); `gpu_ids()`
returns them so the runtime sets `CUDA_VISIBLE_DEVICES` per node.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from launcher.clouds.base import (
    CapacityError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionRequest,
)
from launcher.errors import ClusterNotFoundError

MACHINES_FILE = "machines.json"
# Fault injection: while this file exists in local_root(), every spot launch is refused
# with a CapacityError, as a provider out of spot capacity does (`launcher local
# spot-capacity off`); on-demand launches are not affected.
NO_SPOT_FILE = "no-spot-capacity"
AGENT_DIR = ".launcher-agent"  # the head-node agent's directory in a node's home
MAX_LOCAL_NODES = 64
# query_many's last reads: machines.json path -> ((inode, size, mtime_ns), its view)
_SEEN: dict[str, tuple[tuple[int, int, int], dict[str, NodeState]]] = {}
_SEEN_LOCK = threading.Lock()
_SEEN_MAX = 50_000  # forgotten all at once past this (clusters long gone, never asked again)


def local_root() -> Path:
    """`$LAUNCHER_HOME/local` (evaluated per call: tests change LAUNCHER_HOME), symlinks
    resolved: server replicas whose homes link one `local` (as a real cloud is one
    for all of them) must name its nodes alike."""
    from launcher.config.settings import launcher_home

    return (launcher_home() / "local").resolve()


@dataclass
class _Machine:
    rank: int
    node_id: str
    state: NodeState
    gpu_ids: list[int] = field(default_factory=list)


@dataclass
class _Machines:
    cluster: str
    created_at: float
    nodes: list[_Machine]

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": 1,
                "cluster": self.cluster,
                "created_at": self.created_at,
                "nodes": [
                    {
                        "rank": m.rank,
                        "node_id": m.node_id,
                        "state": m.state.value,
                        "gpu_ids": m.gpu_ids,
                    }
                    for m in self.nodes
                ],
            },
            indent=1,
        )

    @staticmethod
    def from_json(text: str) -> _Machines:
        doc = json.loads(text)
        return _Machines(
            cluster=str(doc["cluster"]),
            created_at=float(doc["created_at"]),
            nodes=[
                _Machine(
                    rank=int(n["rank"]),
                    node_id=str(n["node_id"]),
                    state=NodeState(n["state"]),
                    gpu_ids=[int(g) for g in n.get("gpu_ids", [])],
                )
                for n in doc["nodes"]
            ],
        )


def spot_capacity() -> bool:
    """False while spot capacity is switched off (`set_spot_capacity(False)`)."""
    return not (local_root() / NO_SPOT_FILE).exists()


def set_spot_capacity(available: bool) -> None:
    """Switch the local cloud's spot capacity on or off (idempotent)."""
    marker = local_root() / NO_SPOT_FILE
    if available:
        marker.unlink(missing_ok=True)
    else:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("spot launches are refused (launcher local spot-capacity on)\n")


def detect_gpu_ids(accelerator: str | None = None) -> list[int]:
    """Device indices of this machine's GPUs (of model `accelerator` when given).

    From the catalog's local probe (`nvidia-smi`, or `$LAUNCHER_LOCAL_GPUS` when set),
    so the local cloud hands out exactly the GPUs its offers advertise.
    """
    from launcher.catalog.local import local_gpus

    want = accelerator.lower() if accelerator else None
    return [i for i, g in enumerate(local_gpus()) if want is None or g.name.lower() == want]


class LocalCloud:
    """Clusters of processes on this machine. Supports stop/start and injected preemption.

    All methods are blocking; `terminate`, `stop` and `preempt` are idempotent.
    """

    name = "local"

    # -- Cloud protocol

    def check(self) -> CredentialStatus:
        from launcher.clouds.presence import LOCAL_STATUS

        return LOCAL_STATUS

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Create (or bring back) the cluster's N node directories. Blocking, all-or-nothing.

        An existing cluster of the same size is reused: RUNNING nodes are kept,
        STOPPED nodes started, PREEMPTED nodes replaced by fresh empty ones.
        Raises InvalidRequestError (bad size) or CapacityError (not enough free GPUs).
        """
        if req.num_nodes < 1 or req.num_nodes > MAX_LOCAL_NODES:
            raise InvalidRequestError(
                f"The local cloud runs 1 to {MAX_LOCAL_NODES} nodes, not {req.num_nodes}.",
                cloud=self.name,
                region=req.region,
            )
        if req.use_spot and not spot_capacity():
            raise CapacityError(
                "The local cloud has no spot capacity (switched off: `launcher local "
                "spot-capacity on` gives it back).",
                cloud=self.name,
                region=req.region,
                zone=req.zone,
            )
        cdir = self._cluster_dir(req.cluster_name)
        fresh = not (cdir / MACHINES_FILE).exists()
        try:
            return self._provision(req, cdir)
        except BaseException:
            if fresh:  # all-or-nothing: a failed new cluster leaves nothing behind
                self.terminate(req.cluster_name)
            raise

    def _provision(self, req: ProvisionRequest, cdir: Path) -> ClusterInfo:
        with self._locked(req.cluster_name, create=True):
            machines = self._read(req.cluster_name)
            if machines is not None and len(machines.nodes) != req.num_nodes:
                raise InvalidRequestError(
                    f"Local cluster {req.cluster_name!r} already has {len(machines.nodes)} "
                    f"nodes; {req.num_nodes} were asked for. Take it down first.",
                    cloud=self.name,
                    region=req.region,
                )
            per_node = _gpus_per_node(req.accelerator_count)
            if machines is None:
                machines = _Machines(
                    cluster=req.cluster_name,
                    created_at=time.time(),
                    nodes=[
                        _Machine(r, f"{req.cluster_name}-{r}", NodeState.PENDING)
                        for r in range(req.num_nodes)
                    ],
                )
                self._write(machines)  # the "tag": terminate finds the cluster from here on
            if per_node and any(len(m.gpu_ids) != per_node for m in machines.nodes):
                free = self._free_gpus(exclude=req.cluster_name, accelerator=req.accelerator)
                need = per_node * req.num_nodes
                if len(free) < need:
                    raise CapacityError(
                        f"The local machine has {len(free)} free GPU(s); {req.num_nodes} node(s) x "
                        f"{per_node} = {need} are needed.",
                        cloud=self.name,
                        region=req.region,
                        zone=req.zone,
                    )
                for i, m in enumerate(machines.nodes):
                    m.gpu_ids = free[i * per_node : (i + 1) * per_node]
            for m in machines.nodes:
                ndir = cdir / f"node-{m.rank}"
                if m.state == NodeState.PREEMPTED and ndir.exists():
                    shutil.rmtree(ndir, ignore_errors=True)  # a replaced VM starts empty
                ndir.mkdir(parents=True, exist_ok=True)
                m.state = NodeState.RUNNING
            self._write(machines)
            return self._cluster_info(machines, req.region, req.zone, req.instance_type, req.use_spot)

    def query(self, cluster: str) -> dict[str, NodeState]:
        """node_id -> state from `machines.json`; {} when the cluster does not exist."""
        machines = self._read(cluster)
        if machines is None:
            return {}
        return {m.node_id: m.state for m in machines.nodes}

    def query_many(self, clusters: Sequence[str], region: str | None = None
                   ) -> dict[str, dict[str, NodeState]]:
        """`query` of every cluster in one call (SupportsBatchQuery; the only region is
        this machine, so `region` changes nothing). A `machines.json` is read again only
        when it changed since the last call asked (every write replaces the file, so its
        inode, size or mtime differ): a controller polling 2,000 clusters a second stats
        them and parses the few that changed."""
        out: dict[str, dict[str, NodeState]] = {}
        root = str(local_root())
        for cluster in clusters:
            path = os.path.join(root, cluster, MACHINES_FILE)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                with _SEEN_LOCK:
                    _SEEN.pop(path, None)
                out[cluster] = {}
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            with _SEEN_LOCK:
                seen = _SEEN.get(path)
            if seen is not None and seen[0] == key:
                out[cluster] = dict(seen[1])
                continue
            view = self.query(cluster)  # as new as `key` at least: a later write changes it
            with _SEEN_LOCK:
                if len(_SEEN) >= _SEEN_MAX:
                    _SEEN.clear()
                _SEEN[path] = (key, view)
            out[cluster] = dict(view)
        return out

    def terminate(self, cluster: str) -> None:
        """Kill every process of every node and delete the cluster's directory. Idempotent."""
        cdir = self._cluster_dir(cluster)
        if not cdir.exists():
            return
        with self._locked(cluster, create=False):
            machines = self._read(cluster)
            ranks = [m.rank for m in machines.nodes] if machines else _ranks_on_disk(cdir)
            kill_nodes_processes([cdir / f"node-{rank}" for rank in ranks])
            # node dirs first, machines.json last: the tag outlives the machines
            for rank in ranks:
                shutil.rmtree(cdir / f"node-{rank}", ignore_errors=True)
        shutil.rmtree(cdir, ignore_errors=True)

    # -- stop/start (SupportsStop)

    def stop(self, cluster: str) -> None:
        """Kill all node processes and mark nodes STOPPED; directories are kept. Idempotent."""
        with self._locked(cluster, create=False):
            machines = self._require(cluster)
            cdir = self._cluster_dir(cluster)
            kill_nodes_processes([cdir / f"node-{m.rank}" for m in machines.nodes])
            for m in machines.nodes:
                if m.state == NodeState.RUNNING:
                    m.state = NodeState.STOPPED
            self._write(machines)

    def start(self, cluster: str) -> ClusterInfo:
        """Mark STOPPED nodes RUNNING again. Raises ClusterNotFoundError; a PREEMPTED node
        cannot be started (InvalidRequestError: relaunch instead)."""
        with self._locked(cluster, create=False):
            machines = self._require(cluster)
            lost = [m.rank for m in machines.nodes if m.state == NodeState.PREEMPTED]
            if lost:
                raise InvalidRequestError(
                    f"Node(s) {lost} of local cluster {cluster!r} were preempted; relaunch it "
                    "(launcher launch -c ...) or take it down.",
                    cloud=self.name,
                )
            wanted = {g for m in machines.nodes for g in m.gpu_ids}
            taken = wanted - set(self._free_gpus(exclude=cluster))
            if taken:
                raise CapacityError(
                    f"GPU(s) {sorted(taken)} of stopped local cluster {cluster!r} are in use "
                    "by another local cluster now.",
                    cloud=self.name,
                )
            for m in machines.nodes:
                m.state = NodeState.RUNNING
            self._write(machines)
            return self._cluster_info(machines, "local", None, "local", False)

    # -- local-only capabilities

    def gpu_ids(self, cluster: str) -> dict[int, list[int]]:
        """rank -> the GPU device ids given to that node ({} when the cluster has none)."""
        machines = self._read(cluster)
        if machines is None:
            return {}
        return {m.rank: list(m.gpu_ids) for m in machines.nodes if m.gpu_ids}

    def node_dir(self, cluster: str, rank: int) -> Path:
        return self._cluster_dir(cluster) / f"node-{rank}"

    def preempt(self, cluster: str, rank: int | None = None, notice_seconds: float = 0) -> list[int]:
        """Reclaim node `rank` (None = every node) the way a provider reclaims spot capacity.

        With `notice_seconds > 0`, first writes an interruption notice for the
        head-node agent (which relays it to the job as SIGTERM) and waits until the
        notice expires or the node's processes have all exited, whichever is first.
        Then kills the node's processes and marks it PREEMPTED, so `query` reports it.
        Blocking. Returns the preempted ranks. Raises ClusterNotFoundError.
        """
        machines = self._require(cluster)
        ranks = [m.rank for m in machines.nodes] if rank is None else [rank]
        known = {m.rank for m in machines.nodes}
        for r in ranks:
            if r not in known:
                raise InvalidRequestError(
                    f"Local cluster {cluster!r} has no node {r} (ranks 0..{len(known) - 1}).",
                    cloud=self.name,
                )
        cdir = self._cluster_dir(cluster)
        if notice_seconds > 0:
            deadline = time.time() + notice_seconds
            for r in ranks:
                write_preemption_notice(cdir / "node-0", r, deadline, notice_seconds)
            # wait for the job's processes to finish their SIGTERM handlers (the agent
            # daemon on the head never exits by itself, so it is not waited for)
            pids = _pids_of_nodes([cdir / f"node-{r}" for r in ranks], exclude_agent=True)
            wait_for_exit(pids, notice_seconds)
        with self._locked(cluster, create=False):
            machines = self._require(cluster)
            from launcher.runtime.local_runner import PREEMPTED_MARKER

            marked_at = f"{time.time():.6f}\n"  # before the kill: whatever it causes is later
            for r in ranks:  # first, so nothing new starts there while the kill runs
                (cdir / f"node-{r}" / PREEMPTED_MARKER).write_text(marked_at)
            kill_nodes_processes([cdir / f"node-{r}" for r in ranks])
            for m in machines.nodes:
                if m.rank in ranks:
                    m.state = NodeState.PREEMPTED
            self._write(machines)
        return ranks

    # -- internals

    def _cluster_dir(self, cluster: str) -> Path:
        return local_root() / cluster

    def _read(self, cluster: str) -> _Machines | None:
        try:
            text = (self._cluster_dir(cluster) / MACHINES_FILE).read_text()
        except FileNotFoundError:
            return None
        return _Machines.from_json(text)

    def _require(self, cluster: str) -> _Machines:
        machines = self._read(cluster)
        if machines is None:
            raise ClusterNotFoundError(f"The local cloud has no cluster {cluster!r}.")
        return machines

    def _write(self, machines: _Machines) -> None:
        path = self._cluster_dir(machines.cluster) / MACHINES_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(machines.to_json())
        os.replace(tmp, path)

    @contextlib.contextmanager
    def _locked(self, cluster: str, *, create: bool) -> Iterator[None]:
        """Serialize read-modify-write of one cluster's machines.json across processes."""
        cdir = self._cluster_dir(cluster)
        if create:
            cdir.mkdir(parents=True, exist_ok=True)
        elif not cdir.exists():
            raise ClusterNotFoundError(f"The local cloud has no cluster {cluster!r}.")
        fd = os.open(str(cdir / ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _free_gpus(self, exclude: str, accelerator: str | None = None) -> list[int]:
        used: set[int] = set()
        root = local_root()
        if root.exists():
            for cdir in root.iterdir():
                if cdir.name == exclude:
                    continue
                other = self._read(cdir.name)
                if other is None:
                    continue
                for m in other.nodes:
                    if m.state == NodeState.RUNNING:
                        used.update(m.gpu_ids)
        return [g for g in detect_gpu_ids(accelerator) if g not in used]

    def _cluster_info(
        self, machines: _Machines, region: str, zone: str | None, instance_type: str, spot: bool
    ) -> ClusterInfo:
        cdir = self._cluster_dir(machines.cluster)
        return ClusterInfo(
            cluster_name=machines.cluster,
            cloud=self.name,
            region=region,
            zone=zone,
            instance_type=instance_type,
            use_spot=spot,
            nodes=tuple(
                NodeInfo(
                    rank=m.rank,
                    node_id=m.node_id,
                    internal_ip="127.0.0.1",
                    local_root=str(cdir / f"node-{m.rank}"),
                )
                for m in machines.nodes
            ),
        )


def _gpus_per_node(count: float) -> int:
    if count <= 0:
        return 0
    if count != int(count):
        raise InvalidRequestError(
            f"The local cloud gives whole GPUs to a node, not {count}.", cloud="local"
        )
    return int(count)


def _ranks_on_disk(cdir: Path) -> list[int]:
    out = []
    for p in cdir.glob("node-*"):
        with contextlib.suppress(ValueError):
            out.append(int(p.name.split("-", 1)[1]))
    return sorted(out)


# ------------------------------------------------------------- notices and processes


def notice_path(head_dir: Path, rank: int) -> Path:
    """Where the head-node agent looks for an interruption notice for `rank`."""
    return head_dir / AGENT_DIR / f"notice-rank-{rank}.json"


def write_preemption_notice(head_dir: Path, rank: int, deadline: float, notice: float) -> None:
    """Write the notice file the agent relays to the job (atomic: temp file + rename).

    Shape (what the agent's "local-file" notice source reads):
    {"rank": N, "grace_seconds": S, "deadline": epoch, "detail": "..."}
    """
    path = notice_path(head_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "rank": rank,
                "grace_seconds": notice,
                "deadline": deadline,
                "detail": f"launcher local preempt: node {rank} goes away in {notice:g}s",
            }
        )
    )
    os.replace(tmp, path)


def _registered_pgids(node_dir: Path) -> set[int]:
    pgids: set[int] = set()
    agent_dir = node_dir / AGENT_DIR
    if agent_dir.is_dir():
        for f in agent_dir.rglob("*.pgid"):
            with contextlib.suppress(OSError, ValueError):
                pgids.add(int(f.read_text().strip()))
    return {p for p in pgids if p > 1}


def _node_pids(node_dir: Path, *, exclude_agent: bool = False) -> set[int]:
    """Live processes belonging to a local node (see the module docstring)."""
    return _pids_of_nodes([node_dir], exclude_agent=exclude_agent)


def _pids_of_nodes(node_dirs: Sequence[Path], *, exclude_agent: bool = False) -> set[int]:
    """Live processes belonging to any of `node_dirs`, in one pass over /proc."""
    roots = [str(d) for d in node_dirs]
    homes = {b"HOME=" + os.fsencode(r) for r in roots}
    prefixes = tuple(r + "/" for r in roots)
    pgids: set[int] = set()
    for d in node_dirs:
        pgids |= _registered_pgids(d)
    me = os.getpid()  # a `launcher down` run by the agent's autostop lives on a node
    agent_markers = [os.fsencode(str(d / AGENT_DIR / "agent.py")) for d in node_dirs]
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
            mine = not homes.isdisjoint(environ.split(b"\0"))
            if not mine:
                cwd = os.readlink(f"/proc/{pid}/cwd")
                mine = cwd in roots or cwd.startswith(prefixes)
            if not mine and pgids:
                mine = os.getpgid(pid) in pgids
            if mine and exclude_agent:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
                mine = not any(m in cmdline for m in agent_markers)
        except (OSError, ProcessLookupError):
            continue
        if mine:
            found.add(pid)
    return found


def wait_for_exit(pids: set[int], timeout: float) -> bool:
    """Block until every pid has exited (or is a zombie) or `timeout` passes.

    Event-based (pidfd + poll), no sleeping loop. Returns True if all exited.
    """
    fds: list[int] = []
    for pid in pids:
        with contextlib.suppress(OSError):
            fds.append(os.pidfd_open(pid))
    deadline = time.monotonic() + timeout
    try:
        pending = list(fds)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            poller = select.poll()
            for fd in pending:
                poller.register(fd, select.POLLIN)
            ready = {fd for fd, _ in poller.poll(remaining * 1000)}
            pending = [fd for fd in pending if fd not in ready]
        return True
    finally:
        for fd in fds:
            os.close(fd)


def kill_node_processes(node_dir: Path, *, timeout: float = 5.0) -> int:
    """SIGKILL every process of a local node and wait until they are gone. Idempotent."""
    return kill_nodes_processes([node_dir], timeout=timeout)


def kill_nodes_processes(node_dirs: Sequence[Path], *, timeout: float = 5.0) -> int:
    """SIGKILL every process of the given local nodes and wait until they are gone.

    Idempotent. Repeats the scan so a process forked during the kill is caught
    too. Returns how many processes were killed.
    """
    killed = 0
    for _ in range(5):
        pids = _pids_of_nodes(node_dirs)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        wait_for_exit(pids, timeout)
    return killed
