"""Real SSH nodes for tests: one sshd per network namespace (see TESTING.md).

    lab = NetnsLab(workdir)                # one bridge + /24 subnet for this process
    nodes = lab.start_nodes(3)             # 3 sshd nodes, ~0.1-0.2 s
    nodes.cluster_info("c")                # ClusterInfo with pinned host keys + client key
    nodes[1].kill()                        # node lost: kill every process in its namespace
    nodes[2].cut_network()                 # network cut: eth0 down inside the namespace
    nodes.close(); lab.close()             # kill by pidfile, ip netns del, bridge del

    # a node at a caller-chosen address with a caller-given key (cloud bodies):
    lab.subnet, lab.gateway                # "10.123.X.0/24", "10.123.X.1"
    lab.reserve("10.123.X.128/25")         # automatic nodes never take these addresses
    node = lab.start_node("10.123.X.132", authorized_key="ssh-ed25519 AAAA...")
    node.destroy()                         # kill, ip netns del, address free again

Each node: namespace `lt<pid>-<k>` with `eth0` (a veth into bridge `lb<pid>`),
address 10.123.<X>.<10..>/24 (X = the first /24 of 10.123.0.0/16 not used on
this machine; the lowest address from .10 up that is neither live nor reserved),
its own hostname (`unshare --uts`), its own /root
(`unshare --mount` + a bind mount of a per-node directory), its own host key,
`UsePAM no`, `StrictModes no`, a PidFile, and the lab's client key in
/root/.ssh/authorized_keys. Leftovers of a crashed run (names carry the pid
of the process that made them) are removed when the next lab starts.

Without network namespaces (no CAP_NET_ADMIN) the lab falls back to sshd on
127.0.0.<2+k>:<2222 + pid % 20000>, still with its own /root; network cuts are then not
possible (`cut_network` skips) and `kill` only reaches sshd's process tree.

Only addresses inside namespaces this module creates (or 127.0.0.0/8) are used.
Import is cheap and needs no root; `unavailable_reason()` says why a lab cannot start.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from launcher.clouds.base import ClusterInfo, NodeInfo

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
_LOCK_PATH = "/run/lock/launcher-test-netns.lock"
_NS_RE = re.compile(r"^lt(\d+)-(\d+)$")
_BR_RE = re.compile(r"^lb(\d+)$")
_LOOPBACK_PORT = 2222
_FIRST_AUTO_HOST = 10  # automatic nodes: .10 upwards (.1 is the bridge)

SSHD_CONFIG = """\
ListenAddress {listen}
Port {port}
HostKey {host_key}
PidFile {pidfile}
UsePAM no
StrictModes no
AuthorizedKeysFile .ssh/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
PrintMotd no
PrintLastLog no
MaxSessions 100
MaxStartups 100:30:200
LogLevel ERROR
"""


def unavailable_reason() -> str | None:
    """Why sshd nodes cannot be built here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, bind mounts)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (apt-get install iproute2 util-linux)"
    if not os.access(SSHD, os.X_OK):
        return "sshd is not installed (apt-get install openssh-server)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _ip_batch(lines: list[str], netns: str | None = None, check: bool = True) -> None:
    if not lines:
        return
    cmd = ["ip", *(["-n", netns] if netns else []), "-force", "-batch", "-"]
    proc = subprocess.run(
        cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=30
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_pids(ns: str) -> list[int]:
    proc = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _kill_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _descendants(root_pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    os.makedirs(os.path.dirname(_LOCK_PATH), exist_ok=True)
    fd = os.open(_LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def cleanup_stale() -> None:
    """Remove namespaces and bridges left by test processes that no longer exist."""
    names = _ip("netns", "list", check=False).stdout.split("\n")
    stale_ns = []
    for line in names:
        name = line.split(" ")[0]
        m = _NS_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_pids(_netns_pids(name))
            stale_ns.append(name)
    links = _ip("-o", "link", "show", "type", "bridge", check=False).stdout
    stale_br = [
        m.group(0)
        for m in (
            _BR_RE.match(line.split(": ")[1].split("@")[0])
            for line in links.splitlines()
            if ": " in line
        )
        if m and not _pid_alive(int(m.group(1)))
    ]
    _ip_batch(
        [f"netns del {n}" for n in stale_ns] + [f"link del {b}" for b in stale_br], check=False
    )


@dataclass
class SSHNode:
    """One sshd node. `host`/`port` are where it listens; `home` is its /root."""

    index: int
    hostname: str
    host: str
    port: int
    home: Path
    host_key: str  # "ssh-ed25519 AAAA..." (what the node presents)
    pidfile: Path
    log: Path
    netns: str | None  # None in loopback fallback mode
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    lab: NetnsLab | None = field(default=None, repr=False)
    authorized_key: str | None = None  # set for nodes started at a chosen address
    destroyed: bool = False

    def node_info(self, rank: int, *, user: str = "root", pin_host_key: bool = True) -> NodeInfo:
        return NodeInfo(
            rank=rank,
            node_id=self.hostname,
            internal_ip=self.host,
            ssh_user=user,
            ssh_port=self.port,
            ssh_host_key=self.host_key if pin_host_key else None,
        )

    def sshd_pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """The node is lost: SIGKILL every process of the node (sshd and all it started)."""
        if self.netns:
            _kill_pids(_netns_pids(self.netns))
        else:
            pid = self.sshd_pid() or (self.process.pid if self.process else None)
            if pid:
                _kill_pids(_descendants(pid))
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)

    def destroy(self) -> None:
        """Kill the node, delete its namespace and free its address. Idempotent.

        Its directory (/root, host key) stays: a node started again with the same
        `node_dir` finds its disk, as a stopped VM does."""
        if self.destroyed:
            return
        self.destroyed = True
        self.kill()
        if self.netns:
            _ip("netns", "del", self.netns, check=False)
        if self.lab is not None:
            self.lab._release(self.host)

    def cut_network(self) -> None:
        """Pull the cable: eth0 down inside the namespace (packets vanish, no RST)."""
        if not self.netns:
            import pytest

            pytest.skip("network cuts need network namespaces")
        _ip("-n", self.netns, "link", "set", "eth0", "down")

    def restore_network(self) -> None:
        if self.netns:
            _ip("-n", self.netns, "link", "set", "eth0", "up")

    def exec_in_node(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a command in the node's network namespace (not its mount namespace)."""
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=timeout)


class SSHNodeSet:
    """Nodes started together; `close()` kills them and deletes their namespaces."""

    def __init__(self, lab: NetnsLab, nodes: list[SSHNode]) -> None:
        self.lab = lab
        self.nodes = nodes
        self.closed = False

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, i: int) -> SSHNode:
        return self.nodes[i]

    def __iter__(self) -> Iterator[SSHNode]:
        return iter(self.nodes)

    @property
    def client_key_path(self) -> str:
        return self.lab.client_key_path

    def cluster_info(self, name: str = "test-cluster", *, cloud: str = "ssh") -> ClusterInfo:
        """A ClusterInfo over these nodes (rank = position), host keys pinned."""
        return ClusterInfo(
            cluster_name=name,
            cloud=cloud,
            region="netns",
            zone=None,
            instance_type="sshd-node",
            use_spot=False,
            nodes=tuple(n.node_info(i) for i, n in enumerate(self.nodes)),
            ssh_key_path=self.client_key_path,
        )

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        live = [n for n in self.nodes if not n.destroyed]
        for node in live:
            node.destroyed = True
            node.kill()
        if self.lab.netns_mode:
            _ip_batch([f"netns del {n.netns}" for n in live if n.netns], check=False)
        for node in live:
            self.lab._release(node.host)


@dataclass
class NodeSpec:
    """A node at a caller-chosen address (what a cloud fake's instance needs).

    `authorized_key` is the only key /root/.ssh/authorized_keys holds (cloud-init
    writes the key pair's public key); login user root. `node_dir` keeps the node's
    /root and host key across destroy/start (a stopped and started VM); default: a
    fresh directory per node."""

    ip: str
    authorized_key: str
    hostname: str | None = None  # default: EC2's style, ip-10-123-X-Y
    node_dir: Path | None = None
    env: dict[str, str] | None = None  # set in every SSH session (sshd SetEnv): the "image"
    port: int = 22  # where sshd listens (a cloud that maps port 22 to another public port)


class NetnsLab:
    """A bridge + subnet owned by this process, in which node sets are started."""

    def __init__(self, workdir: Path) -> None:
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(f"cannot build sshd nodes: {reason}")
        from launcher.runtime.keys import generate_keypair

        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pid = os.getpid()
        self.bridge = f"lb{self.pid}"
        self._next = 0
        self._lock = threading.RLock()  # node starts may come from a watcher thread
        self._live_ips: set[str] = set()
        self._reserved: list[ipaddress.IPv4Network] = []
        self.sets: list[SSHNodeSet] = []
        self.client_key_path = str(self.workdir / "client_key")
        self.client_public_key = generate_keypair(
            self.client_key_path, comment="launcher-tests"
        ).public_key()
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation dir
        self.netns_mode = True
        self.prefix = ""
        with _machine_lock():
            cleanup_stale()
            used = set(re.findall(r"inet 10\.123\.(\d+)\.", _ip("-o", "-4", "addr").stdout))
            free = [x for x in range(256) if str(x) not in used]
            if not free:
                raise RuntimeError("no free 10.123.X.0/24 subnet for test nodes")
            self.prefix = f"10.123.{free[0]}"
            try:
                _ip_batch(
                    [
                        f"link add {self.bridge} type bridge",
                        f"addr add {self.prefix}.1/24 dev {self.bridge}",
                        f"link set {self.bridge} up",
                    ]
                )
            except RuntimeError:
                self.netns_mode = False
                _ip("link", "del", self.bridge, check=False)
        self.subnet = f"{self.prefix}.0/24" if self.netns_mode else "127.0.0.0/24"
        self.gateway = f"{self.prefix}.1" if self.netns_mode else "127.0.0.1"
        self.network = ipaddress.ip_network(self.subnet)

    # ---- addresses ---------------------------------------------------------------

    def reserve(self, cidr: str) -> None:
        """Keep automatic nodes (`start_nodes`) out of `cidr` (inside the lab's
        subnet), for nodes started at chosen addresses there (a cloud fake's subnets)."""
        net = ipaddress.ip_network(cidr)
        if not net.subnet_of(self.network):  # type: ignore[arg-type]
            raise ValueError(f"{cidr} is not inside the lab's subnet {self.subnet}")
        with self._lock:
            taken = [
                n.host
                for node_set in self.sets
                for n in node_set
                if n.authorized_key is None
                and not n.destroyed
                and ipaddress.ip_address(n.host) in net
            ]
            if taken:
                raise RuntimeError(f"automatic nodes already live in {cidr}: {sorted(taken)}")
            self._reserved.append(net)  # type: ignore[arg-type]

    def _auto_ip(self) -> str:
        # the lowest free address: automatic nodes stay below the ranges cloud fakes
        # reserve (a reused address is safe: `_wire` flushes its old ARP entry)
        for host in range(_FIRST_AUTO_HOST, 255):
            ip = f"{self.prefix}.{host}"
            addr = ipaddress.ip_address(ip)
            if ip not in self._live_ips and not any(addr in r for r in self._reserved):
                return ip
        raise RuntimeError(f"no free address for an automatic test node in {self.subnet}")

    def _release(self, ip: str) -> None:
        with self._lock:
            self._live_ips.discard(ip)

    # ---- starting nodes -----------------------------------------------------------

    def start_nodes(self, count: int, *, timeout: float = 10.0,
                    envs: list[dict[str, str]] | None = None) -> SSHNodeSet:
        """Start `count` sshd nodes and wait until each accepts TCP connections.
        `envs[k]`, when given, is set in every SSH session of node k (sshd SetEnv: the
        node's "image", e.g. a PATH with fake GPU tools first)."""
        return self._start([None] * count, timeout, envs)

    def start_nodes_at(self, specs: list[NodeSpec], *, timeout: float = 10.0) -> SSHNodeSet:
        """Start one node per spec, at the spec's address with only its key authorized."""
        if not self.netns_mode:
            raise RuntimeError("nodes at chosen addresses need network namespaces")
        for spec in specs:
            addr = ipaddress.ip_address(spec.ip)
            if (
                addr not in self.network
                or addr in (self.network.network_address, self.network.broadcast_address)
                or spec.ip == self.gateway
            ):
                raise ValueError(
                    f"{spec.ip} is not a node address in the lab's subnet {self.subnet}"
                )
        return self._start(list(specs), timeout)

    def start_node(
        self,
        ip: str,
        *,
        authorized_key: str,
        hostname: str | None = None,
        node_dir: Path | None = None,
        timeout: float = 10.0,
    ) -> SSHNode:
        """One node at `ip` (see `NodeSpec`); `node.destroy()` removes it alone."""
        return self.start_nodes_at(
            [NodeSpec(ip, authorized_key, hostname, node_dir)], timeout=timeout
        )[0]

    def _start(self, specs: list[NodeSpec | None], timeout: float,
               envs: list[dict[str, str]] | None = None) -> SSHNodeSet:
        from launcher.runtime.keys import KeyPair, generate_keypair

        nodes: list[SSHNode] = []
        with self._lock:
            for i, spec in enumerate(specs):
                node_env = (spec.env if spec else None) or (envs[i] if envs else None) or {}
                k = self._next
                self._next += 1
                if spec is not None:
                    host = spec.ip
                    if host in self._live_ips:
                        for n in nodes:  # nothing of this call was started
                            self._live_ips.discard(n.host)
                        raise RuntimeError(f"a live test node already has address {host}")
                elif self.netns_mode:
                    host = self._auto_ip()
                else:
                    host = f"127.0.0.{2 + k}"
                self._live_ips.add(host)
                ns = f"lt{self.pid}-{k}" if self.netns_mode else None
                ndir = spec.node_dir if spec and spec.node_dir else self.workdir / f"node{k}"
                home = ndir / "root"
                (home / ".ssh").mkdir(parents=True, exist_ok=True)
                os.chmod(home / ".ssh", 0o700)
                key = spec.authorized_key.strip() if spec else self.client_public_key
                (home / ".ssh" / "authorized_keys").write_text(key + "\n")
                host_key_path = ndir / "ssh_host_ed25519_key"
                if spec and spec.node_dir and os.path.exists(f"{host_key_path}.pub"):
                    host_key = KeyPair(str(host_key_path), f"{host_key_path}.pub")
                else:
                    host_key = generate_keypair(host_key_path, comment=f"node{k}")
                # loopback: a port per lab, so concurrent test sessions do not collide
                port = 22 if self.netns_mode else _LOOPBACK_PORT + self.pid % 20000
                if spec is not None:
                    port = spec.port
                cfg = ndir / "sshd_config"
                cfg.write_text(
                    SSHD_CONFIG.format(
                        listen=host,
                        port=port,
                        host_key=host_key.private_path,
                        pidfile=ndir / "sshd.pid",
                    )
                    # one SetEnv line: sshd keeps only the first SetEnv directive
                    + ("SetEnv " + " ".join(f'{k}="{v}"' for k, v in node_env.items()) + "\n"
                       if node_env else "")
                )
                public = host_key.public_key().split()
                if spec is None:
                    hostname = f"lt-n{k}"
                else:
                    hostname = spec.hostname or "ip-" + host.replace(".", "-")
                nodes.append(
                    SSHNode(
                        index=k,
                        hostname=hostname,
                        host=host,
                        port=port,
                        home=home,
                        host_key=f"{public[0]} {public[1]}",
                        pidfile=ndir / "sshd.pid",
                        log=ndir / "sshd.log",
                        netns=ns,
                        lab=self,
                        authorized_key=key if spec else None,
                    )
                )
            node_set = SSHNodeSet(self, nodes)
            self.sets.append(node_set)
        try:
            if self.netns_mode:
                self._wire(nodes)
            for node in nodes:
                self._spawn(node)
            self._wait_ready(nodes, timeout)
        except BaseException:
            node_set.close()
            raise
        return node_set

    def _wire(self, nodes: list[SSHNode]) -> None:
        root_cmds = []
        for n in nodes:
            veth = f"lv{self.pid}-{n.index}"
            root_cmds += [
                f"netns add {n.netns}",
                f"link add {veth} type veth peer name eth0 netns {n.netns}",
                f"link set {veth} master {self.bridge}",
                f"link set {veth} up",
            ]
        # an address may have served an earlier node: forget its old MAC
        _ip_batch([f"neigh flush to {n.host}" for n in nodes], check=False)
        _ip_batch(root_cmds)
        procs = [
            subprocess.Popen(
                ["ip", "-n", str(n.netns), "-batch", "-"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in nodes
        ]
        for n, p in zip(nodes, procs, strict=True):
            _, err = p.communicate(
                f"addr add {n.host}/24 dev eth0\nlink set eth0 up\nlink set lo up\n", timeout=30
            )
            if p.returncode != 0:
                raise RuntimeError(f"configuring {n.netns} failed: {err.strip()}")

    def _spawn(self, node: SSHNode) -> None:
        script = (
            f"mount --bind {node.home} /root && hostname {node.hostname} && "
            f"exec {SSHD} -D -e -f {node.pidfile.parent / 'sshd_config'}"
        )
        argv = ["unshare", "--mount", "--propagation", "private", "--uts", "sh", "-c", script]
        if node.netns:
            argv = ["ip", "netns", "exec", node.netns, *argv]
        with open(node.log, "wb") as log:
            node.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # setsid: never tied to the test's terminal or pipes
            )

    def _wait_ready(self, nodes: list[SSHNode], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(nodes)
        delay = 0.002
        while pending:
            for node in list(pending):
                if node.process is not None and node.process.poll() is not None:
                    raise RuntimeError(
                        f"sshd for {node.hostname} exited ({node.process.returncode}): "
                        f"{node.log.read_text(errors='replace').strip()}"
                    )
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection((node.host, node.port), timeout=0.5),
                ):
                    pending.remove(node)
            if pending:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd did not start on {[n.hostname for n in pending]}")
                time.sleep(delay)
                delay = min(delay * 2, 0.05)

    def live_namespaces(self) -> dict[str, set[int]]:
        """{namespace: the pids of its node's own sshd} for every live node."""
        out: dict[str, set[int]] = {}
        for node_set in self.sets:
            for node in node_set:
                if node.netns and not node.destroyed:
                    own = {node.sshd_pid(), node.process.pid if node.process else None}
                    out[node.netns] = {pid for pid in own if pid is not None}
        return out

    def close(self) -> None:
        """Stop every node set and delete the bridge. Idempotent."""
        for node_set in self.sets:
            node_set.close()
        self.sets.clear()
        if self.netns_mode:
            _ip("link", "del", self.bridge, check=False)
            self.netns_mode = False
